"""`sandgate serve --workers N`: N sandgate processes on one host sharing the proxy and API ports.

The supervisor (this module, in the `serve` process) prepares what the workers share — the data dir's signing
key and the egress CA, the harness token, the store schema — reserves the two ports, imports what a worker
imports (PRELOAD) once, then forks N workers, each running what `sandgate serve ... --worker-index I` runs, from
its arguments on (as gunicorn's preload does: the supervisor has one thread, no event loop and no store open
when it forks; a worker does not import sandgate again, at start nor at restart). Each worker is a whole
sandgate (proxy, API, page, its own loop and core) whose listening sockets set SO_REUSEPORT, so the kernel
spreads connections over the workers. Workers agree with each other exactly as replicas do: through the
PostgreSQL store and its change notifications (gateway/store/changes.py); with SQLite there is no such path, so
more than one worker is refused.

A worker that dies is started again (forked again: it runs the code the supervisor loaded); SIGTERM/SIGINT stop
every worker cleanly (each flushes its audit).
"""
from __future__ import annotations

import asyncio
import gc
import importlib
import io
import json
import logging
import os
import selectors
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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


# What a worker imports before it reads its configuration and as it starts (listed from sys.modules after a
# start): the composition root, the PostgreSQL driver and dialect, the codecs and resource readers, the shipped
# policies. The supervisor imports them once; each worker is forked from it with them loaded.
PRELOAD = ("gateway.app", "psycopg", "sqlalchemy.dialects.postgresql.psycopg", "gateway.store.migrate",
           "encodings.idna", "encodings.utf_8_sig", "importlib.resources.readers", "sandgate_policies")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class ForkedWorker:
    """A Popen-like handle on a forked worker: pid, returncode (negative: the signal that ended it), poll, wait,
    send_signal, kill."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:                  # never a reaped (and perhaps reused) pid
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class Worker:
    index: int
    proc: ForkedWorker
    out: int | None                      # the read end of the worker's stdout (None: at its end)
    ready: bool = False
    line: str = ""
    partial: bytes = b""


class Supervisor:
    def __init__(self, cfg: Config, workers: int, config_path: str | None, log_level: str,
                 main: Callable[[list[str]], int]):
        self.cfg = cfg
        self.main = main                         # the command line's main(argv): what a worker runs
        self.count = workers
        self.config_path = config_path
        self.log_level = log_level
        self.workers: dict[int, Worker] = {}
        self.stopping = threading.Event()        # set by SIGTERM/SIGINT (an Event starts no thread)
        self.reserved: list[socket.socket] = []
        self.selector = selectors.DefaultSelector()

    def _args(self, index: int, proxy: str, api: str) -> list[str]:
        args = ["serve", "--data-dir", str(self.cfg.data_dir), "--proxy-listen", proxy, "--api-listen", api,
                "--log-level", self.log_level, "--worker-index", str(index)]
        return args + (["--config", self.config_path] if self.config_path else [])

    @property
    def metrics_dir(self) -> Path:
        return self.cfg.data_dir / "metrics"

    def _preload(self) -> None:
        """Import what every worker imports, once, and check that forking is safe: one thread, no event loop."""
        for name in PRELOAD:
            importlib.import_module(name)
        if _threads() != 1 or threading.active_count() != 1:
            raise RuntimeError(f"{_threads()} threads in the supervisor: forking workers is not safe")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("an event loop runs in the supervisor: forking workers is not safe")
        gc.collect()
        gc.freeze()            # what the imports made stays out of the workers' collections (no copy-on-write)

    def _spawn(self, index: int, proxy: str, api: str) -> Worker:
        args = self._args(index, proxy, api)
        read_fd, write_fd = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()                       # nothing buffered is written twice
        pid = os.fork()
        if pid == 0:
            # The worker. It never returns: serve's end (SystemExit, or an exception) unwinds through these frames
            # (nothing on the way acts on it: run's `finally` closes the reserved sockets, closed already) to the
            # interpreter's own exit (atexit, threads joined, streams flushed), as gunicorn's forked workers do.
            os.close(read_fd)
            self._become_worker(args, write_fd)
        os.close(write_fd)
        worker = Worker(index, ForkedWorker(pid), read_fd)
        os.set_blocking(read_fd, False)
        self.selector.register(read_fd, selectors.EVENT_READ, worker)
        return worker

    def _become_worker(self, args: list[str], out_fd: int) -> None:
        """In the forked child: become what `python -m gateway serve ARGS` with PYTHONUNBUFFERED=1 and
        PROMETHEUS_MULTIPROC_DIR set was — default signal dispositions, stdout the pipe to the supervisor (stderr
        and stdin the supervisor's), no descriptor of the supervisor's but those, logging not yet configured."""
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for sock in self.reserved:               # the workers bind their own listeners (SO_REUSEPORT)
            sock.close()
        for key in list(self.selector.get_map().values()):     # every worker's stdout, a dead one's too
            os.close(key.fd)
        self.selector.close()
        for name in os.listdir("/proc/self/fd"):   # what the supervisor inherited (exec closed it, close_fds)
            fd = int(name)
            try:
                if fd > 2 and fd != out_fd and os.get_inheritable(fd):
                    os.close(fd)
            except OSError:                      # the listing's own descriptor, closed by now
                pass
        os.dup2(out_fd, 1)
        os.close(out_fd)
        os.environ.update({"PYTHONUNBUFFERED": "1", MULTIPROC_ENV: str(self.metrics_dir)})
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=sys.stdout.encoding,
                                      errors=sys.stdout.errors, write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=sys.stderr.encoding,
                                      errors="backslashreplace", write_through=True)
        root = logging.getLogger()               # the worker's serve configures logging as a fresh process does
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        values = sys.modules.get("prometheus_client.values")
        if values is not None:                   # chosen at import from PROMETHEUS_MULTIPROC_DIR: choose again
            values.ValueClass = values.get_value_class()
        sys.argv[1:] = args
        raise SystemExit(self.main(args))

    def _pump(self, timeout: float) -> None:
        """Read what the workers printed (at most `timeout` seconds of waiting): a worker's ready line is kept,
        anything else goes on to the supervisor's stdout."""
        for key, _ in self.selector.select(timeout):
            worker: Worker = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not data:                         # the worker's end closed: it exited
                self.selector.unregister(key.fd)
                os.close(key.fd)
                worker.out = None
                data = b"\n" if worker.partial else b""           # its last line, unterminated
            *lines, worker.partial = (worker.partial + data).split(b"\n")
            for raw in lines:
                line = raw.decode(sys.stdout.encoding or "utf-8", "replace") + "\n"
                if not worker.ready and line.startswith(READY_PREFIX):
                    worker.line = line.strip()
                    worker.ready = True
                    continue
                sys.stdout.write(line)
                sys.stdout.flush()

    def _wait_ready(self, worker: Worker, deadline: float) -> bool:
        while time.monotonic() < deadline:
            self._pump(0.1)
            if worker.ready:
                return True
            if worker.proc.poll() is not None:
                return False
        return False

    def _stop_all(self, timeout_s: float = 15.0) -> None:
        for w in self.workers.values():
            w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in self.workers.values()):
            self._pump(0.1)                      # what they print while they drain
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        deadline = time.monotonic() + 2.0        # their last lines (a child of theirs may hold the pipe open)
        while self.selector.get_map() and time.monotonic() < deadline:
            self._pump(0.1)

    def _write_listen(self, proxy: str, api: str) -> None:
        (self.cfg.data_dir / "listen.json").write_text(json.dumps({
            "proxy": proxy, "api": api, "workers": [w.proc.pid for w in self.workers.values()]}))

    def run(self) -> int:
        cfg = self.cfg
        reserved = self.reserved
        try:
            prepare_data_dir(cfg)
            shutil.rmtree(self.metrics_dir, ignore_errors=True)      # counters start again with the workers
            self.metrics_dir.mkdir(mode=0o700)
            for host, port in (cfg.proxy.listen, cfg.api.listen):
                reserved.append(reserve_port(host, port))
            self._preload()
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
            while not self.stopping.is_set():
                self._pump(0.5)
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


def run_workers(cfg: Config, workers: int, config_path: str | None, log_level: str,
                main: Callable[[list[str]], int]) -> int:
    return Supervisor(cfg, workers, config_path, log_level, main).run()

