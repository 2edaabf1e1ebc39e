"""Start the OPA REST test server (tests/support/opa_server.py, the real OPA Go engine) as its own process."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.conftest import need

ROOT = Path(__file__).resolve().parents[2]


def need_opa() -> None:
    try:
        import opa_bindings  # noqa: F401
    except ImportError:
        need(False, "opa-golib-python-bindings (make install puts it in the test venv)")


class OpaServer:
    def __init__(self, tmp: Path):
        need_opa()
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.port_file = tmp / "opa.port"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "OpaServer":
        if self.port_file.exists():
            self.port_file.unlink()
        self._log = open(self.tmp / "opa.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.opa_server", str(self.port_file)],
                                     cwd=str(ROOT), stdout=self._log, stderr=self._log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the OPA test server exited: " + (self.tmp / "opa.log").read_text())
            if self.port_file.exists():
                self.port = int(self.port_file.read_text())
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the OPA test server did not start")

    def fault(self, fault: str) -> None:
        requests.put(self.url + "/__test/fault", json={"fault": fault}, timeout=5).raise_for_status()

    def reset(self) -> None:
        """Back to a freshly started server's state (PUT /__test/reset)."""
        requests.put(self.url + "/__test/reset", timeout=30).raise_for_status()

    def stats(self) -> dict:
        return requests.get(self.url + "/__test/stats", timeout=5).json()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._log.close()

    def __enter__(self) -> "OpaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
