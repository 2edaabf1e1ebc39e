"""`sandgate serve --workers N`: N sandgate processes on one host sharing the proxy and API ports.

The supervisor (this module, in the `serve` process) prepares what the workers share — the data dir's signing
key and the egress CA, the harness token, the store schema — reserves the two ports, then starts N workers
(`sandgate serve ... --worker-index I`). Each worker is a whole sandgate (proxy, API, page, its own loop and
core) whose listening sockets set SO_REUSEPORT, so the kernel spreads connections over the workers. Workers
agree with each other exactly as replicas do: through the PostgreSQL store and its change notifications
(gateway/store/changes.py); with SQLite there is no such path, so more than one worker is refused.

A worker that dies is started again; SIGTERM/SIGINT stop every worker cleanly (each flushes its audit).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.config import Config

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"      # gateway/runtime/metrics.py reads it (imported lazily: CLI start-up time)

log = logging.getLogger("sandgate.workers")
READY_TIMEOUT_S = 60.0
READY_PREFIX = "sandgate: proxy "


def workers_refusal(cfg: Config, workers: int) -> str | None:
    """Why `--workers N` cannot run with this configuration (None: it can)."""
    if workers < 1:
        return "--workers must be 1 or more"
    if workers == 1:
        return None
    if not cfg.store_url.startswith("postgresql"):
        return ("--workers > 1 needs a PostgreSQL store (store.url = \"postgresql+psycopg://...\"): workers share "
                "sessions, holds and approvals through it; with SQLite run one worker")
    if cfg.proxy.transparent is not None:
        return "--workers > 1 cannot run transparent capture (source-address bindings live in one process)"
    return None


def reserve_port(host: str, port: int) -> socket.socket:
    """Bind (not listen) a SO_REUSEPORT socket: it holds the port (a chosen one when `port` is 0) for the
    workers, and takes no connections itself."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def prepare_data_dir(cfg: Config) -> str:
    """What every worker shares, made once before they start: the signing key, the egress CA, the schema,
    and the harness token (returned)."""
    from mitmproxy.certs import CertStore

    from gateway.egress.proxy import ensure_ca
    from gateway.audit.checkpoints import load_or_create_audit_key
    from gateway.auth.tokens import HARNESS_TOKEN_TTL_S, TokenSigner, load_or_create_key, write_private
    from gateway.store import Store

    cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    signer = TokenSigner(load_or_create_key(cfg.data_dir))
    load_or_create_audit_key(cfg.data_dir)
    ensure_ca(cfg.data_dir)                      # named as sandgate's CA, not mitmproxy's default
    CertStore.from_store(cfg.data_dir, "mitmproxy", 2048)
    store = Store(cfg.store_url)
    try:
        store.migrate()
    finally:
        store.close()
    token = signer.mint("harness", "harness", HARNESS_TOKEN_TTL_S)
    if not cfg.api.harness_token_file:
        write_private(cfg.data_dir / "harness.token", token.encode() + b"\n")
    return token


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen
    ready: threading.Event
    line: list


class Supervisor:
    def __init__(self, cfg: Config, workers: int, config_path: str | None, log_level: str):
        self.cfg = cfg
        self.count = workers
        self.config_path = config_path
        self.log_level = log_level
        self.workers: dict[int, Worker] = {}
        self.stopping = threading.Event()

    def _argv(self, index: int, proxy: str, api: str) -> list[str]:
        argv = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(self.cfg.data_dir),
                "--proxy-listen", proxy, "--api-listen", api, "--log-level", self.log_level,
                "--worker-index", str(index)]
        return argv + (["--config", self.config_path] if self.config_path else [])

    @property
    def metrics_dir(self) -> Path:
        return self.cfg.data_dir / "metrics"

    def _spawn(self, index: int, proxy: str, api: str) -> Worker:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", MULTIPROC_ENV: str(self.metrics_dir)}
        proc = subprocess.Popen(self._argv(index, proxy, api), stdout=subprocess.PIPE, text=True, bufsize=1,
                                env=env)
        worker = Worker(index, proc, threading.Event(), [])

        def pump() -> None:                # the worker's stdout: its ready line, then anything it prints
            assert proc.stdout is not None
            for line in proc.stdout:
                if not worker.ready.is_set() and line.startswith(READY_PREFIX):
                    worker.line.append(line.strip())
                    worker.ready.set()
                    continue
                sys.stdout.write(line)
                sys.stdout.flush()
        threading.Thread(target=pump, daemon=True, name=f"sandgate-worker-{index}-out").start()
        return worker

    def _wait_ready(self, worker: Worker, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if worker.ready.wait(0.1):
                return True
            if worker.proc.poll() is not None:
                return False
        return False

    def _stop_all(self, timeout_s: float = 15.0) -> None:
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for w in self.workers.values():
            try:
                w.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def _write_listen(self, proxy: str, api: str) -> None:
        (self.cfg.data_dir / "listen.json").write_text(json.dumps({
            "proxy": proxy, "api": api, "workers": [w.proc.pid for w in self.workers.values()]}))

    def run(self) -> int:
        cfg = self.cfg
        reserved: list[socket.socket] = []
        try:
            prepare_data_dir(cfg)
            shutil.rmtree(self.metrics_dir, ignore_errors=True)      # counters start again with the workers
            self.metrics_dir.mkdir(mode=0o700)
            for host, port in (cfg.proxy.listen, cfg.api.listen):
                reserved.append(reserve_port(host, port))
        except Exception as exc:  # noqa: BLE001 - one line, no traceback (the store URL is never shown)
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            log.error("sandgate failed to start: %s: %s", exc.__class__.__name__, first)
            for sock in reserved:
                sock.close()
            return 1
        try:
            proxy = _hostport(*reserved[0].getsockname()[:2])
            api = _hostport(*reserved[1].getsockname()[:2])
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stopping.set())
            deadline = time.monotonic() + READY_TIMEOUT_S
            for i in range(self.count):
                self.workers[i] = self._spawn(i, proxy, api)
            for w in self.workers.values():
                if not self._wait_ready(w, deadline):
                    log.error("sandgate worker %d did not start", w.index)
                    self._stop_all()
                    return 1
            self._write_listen(proxy, api)
            print(f"sandgate: proxy {proxy}  api {api}  data {cfg.data_dir}  workers {self.count}", flush=True)
            while not self.stopping.wait(0.5):
                for i, w in list(self.workers.items()):
                    if w.proc.poll() is not None and not self.stopping.is_set():
                        log.error("sandgate worker %d exited with %s; starting it again", i, w.proc.returncode)
                        from prometheus_client.multiprocess import mark_process_dead

                        mark_process_dead(w.proc.pid, str(self.metrics_dir))
                        self.workers[i] = self._spawn(i, proxy, api)
                        if self._wait_ready(self.workers[i], time.monotonic() + READY_TIMEOUT_S):
                            self._write_listen(proxy, api)
            log.info("sandgate stopping %d workers", self.count)
            self._stop_all(15.0 + self.cfg.egress.drain_s)      # each drains its held requests first
            return 0
        finally:
            for sock in reserved:
                sock.close()


def run_workers(cfg: Config, workers: int, config_path: str | None, log_level: str) -> int:
    return Supervisor(cfg, workers, config_path, log_level).run()

