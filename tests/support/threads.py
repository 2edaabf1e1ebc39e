"""Running a blocking client call in the background while the test drives something else."""
from __future__ import annotations

import threading
from typing import Any, Callable


def background(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    """Start fn() in a daemon thread; returns (thread, out) with out["value"] or out["error"] once joined."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out
