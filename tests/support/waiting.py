"""Waiting in a test for what another task, thread or process does: poll until it holds, with a cap far above
what a busy machine takes (a 2-core machine at load 15 delays a background thread by seconds). The cap is what a
hang costs, never what a pass needs; the test's own assertion follows the wait."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

CAP_S = 30.0


async def until(condition: Callable[[], object], cap_s: float = CAP_S, interval_s: float = 0.01) -> bool:
    """Whether `condition()` became true within `cap_s` (checked every `interval_s`)."""
    deadline = time.monotonic() + cap_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval_s)
    return True
