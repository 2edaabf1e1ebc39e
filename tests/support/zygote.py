"""A fork server ("zygote") for the `sandgate serve` processes tests start (docs/testing.md, "The zygote").

A real start of `python -m gateway serve` spends about 2 s of CPU importing (`gateway.app`, mitmproxy, aiohttp,
SQLAlchemy, regorus) before it reads its configuration. The zygote is one small process per test process, started
on first use (`python -m tests.support.zygote`), that imports those modules once and then forks a child for each
start. Before it imports anything it starts no thread, event loop or socket and reads no configuration (it checks
that it has one thread before it answers), so a child is the same interpreter state a fresh process has after
its imports, and the child then does what `python -m gateway serve ARGS` does from there: it takes the request's
argv, environment (os.environ replaced wholesale), cwd, stdout/stderr (the test's log file), and runs the
`gateway` package as `__main__` (`runpy`, as `-m` does), exiting through the interpreter's own shutdown.

Variables that Python or an imported module reads as it starts or imports (`IMPORT_TIME_ENV` and any
`PYTHON*`: PYTHONUNBUFFERED decides how sys.stdout and sys.stderr buffer, and the child keeps the zygote's) are
fixed in the zygote: a start whose environment differs in one of them runs a real process instead
(`Sandgate.start`), as does one when the zygote cannot start or a fork fails. `SANDGATE_TEST_EXEC=1` makes
every start a real process.

Protocol: a SOCK_SEQPACKET socket pair, one JSON message each way per event. The client sends
{"argv", "env", "cwd", "new_session"} with the log file's descriptor attached; the zygote answers {"pid"} with a
pidfd of the child attached (signals go through it: never to a reused pid), or {"error"}; when a child ends the
zygote reaps it and sends {"exit": pid, "status": returncode as Popen reports it, "cpu": user+sys seconds}. The
zygote exits when the socket closes (its test process ended) or its parent is gone (PR_SET_PDEATHSIG, and a
check of the parent every few seconds).
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What `sandgate serve` imports before it reads its configuration (the command line, the composition root), and
# what its start imports afterwards (a start's `SANDGATE_TEST_PROFILE` lists them): the SQLite and PostgreSQL
# drivers and dialects, the shipped policies' package, the codecs and resource readers, and alembic (a new store's
# migrations: about 0.25 s of CPU a start).
PRELOAD = ("gateway.cli", "gateway.cli.commands", "gateway.app", "sqlite3", "sqlalchemy.dialects.sqlite.pysqlite",
           "sqlalchemy.dialects.sqlite.aiosqlite", "psycopg", "sqlalchemy.dialects.postgresql.psycopg",
           "gateway.store.migrate", "encodings.idna", "encodings.utf_8_sig", "importlib.resources.readers",
           "sandgate_policies", "alembic", "alembic.command", "alembic.config", "alembic.script",
           "alembic.runtime.migration", "configparser", "importlib.readers")

# Environment variables read while importing the PRELOAD modules, found by `python -m tests.support.zygote
# --audit-env` (every key os.environ and os.getenv were asked for during the imports): aiohttp's, multidict's,
# yarl's, propcache's and frozenlist's *_NO_EXTENSIONS, AIOHTTP_NOSENDFILE, the SSL context aiohttp's connector
# builds at import (SSLKEYLOGFILE, and OpenSSL's own SSL_CERT_FILE/SSL_CERT_DIR), mitmproxy's
# MITMPROXY_CASE_SENSITIVE_FILTERS and SSLKEYLOGFILE, prometheus_client's multiprocess directory and series
# switches, sysconfig's HOME, zoneinfo's PYTHONTZPATH; plus what the interpreter and the C libraries read as they
# start (any PYTHON*, the locale, the loader). sandgate's own modules read none at import (gateway/ and sandgate/
# read the environment in functions) but RUST_BACKTRACE and RUST_LIB_BACKTRACE: gateway/policy/rego.py settles
# whether regorus's errors capture backtraces, once a process. wsgiref.handlers copies the whole environment at import, into a class
# sandgate never uses. A start whose value of one of these differs from the zygote's runs a real process.
IMPORT_TIME_ENV = frozenset({
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LD_PRELOAD", "LD_LIBRARY_PATH", "TZ", "HOME",
    "PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir", "PROMETHEUS_DISABLE_CREATED_SERIES",
    "PROMETHEUS_LEGACY_NAME_VALIDATION", "AIOHTTP_NO_EXTENSIONS", "AIOHTTP_NOSENDFILE", "MULTIDICT_NO_EXTENSIONS",
    "YARL_NO_EXTENSIONS", "PROPCACHE_NO_EXTENSIONS", "FROZENLIST_NO_EXTENSIONS", "PYDANTIC_DISABLE_PLUGINS",
    "MITMPROXY_CASE_SENSITIVE_FILTERS", "MITMPROXY_SSLKEYLOGFILE", "SSLKEYLOGFILE", "SSL_CERT_FILE",
    "SSL_CERT_DIR", "OPENSSL_CONF", "OPENSSL_MODULES", "_PYTHON_PROJECT_BASE", "_PYTHON_SYSCONFIGDATA_NAME",
    "RUST_BACKTRACE", "RUST_LIB_BACKTRACE",
})


def import_time_key(key: str) -> bool:
    return key in IMPORT_TIME_ENV or key.startswith("PYTHON")


# -- the zygote ---------------------------------------------------------------------------------------------
PR_SET_PDEATHSIG = 1
MAX_MESSAGE = 1 << 20


def _die_with_parent() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _become(request: dict, fds: list[int], own: list, imported_env: dict[str, str]) -> None:
    """In the forked child: become `python -m gateway ARGS` as the request describes. It never returns: the
    exception that ends it (SystemExit, as `sys.exit(main())` raises) unwinds to the interpreter's own shutdown
    (atexit, non-daemon threads joined, streams flushed), as a fresh process's does."""
    for thing in own:                              # the zygote's socket, selector and its other children's pidfds
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    if len(fds) == 1:                              # a server: its log on stdout and stderr, stdin /dev/null
        fds = [0, fds[0], fds[0]]
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request.get("new_session"):
        os.setsid()
    if request.get("unshare"):
        _unshare()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # what the imports set in the environment (awscli sets AWS_DATA_PATH from its own value, which is an import-time
    # variable of its kind, so the same as here): a fresh process's imports would have set it too
    os.environ.update(imported_env)
    args = request["argv"]
    import runpy

    script = request.get("script")
    if script:                                     # `python SCRIPT ARGS` instead (a console script: the aws CLI's)
        sys.orig_argv = [sys.executable, script, *args]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(script)      # a script's directory comes first, as for `python SCRIPT`
        if os.environ.get("SANDGATE_TEST_QUICK_EXIT"):
            _quick_exit(lambda: runpy.run_path(script, run_name="__main__"))
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)
    sys.orig_argv = [sys.executable, "-m", "gateway", *args]
    sys.argv = ["-m", *args]                       # runpy puts the module's file in argv[0], as -m does
    sys.path[0] = os.getcwd()                      # -m puts the working directory first
    profile = os.environ.get("SANDGATE_TEST_PROFILE")
    if profile:
        _profile(f"{profile}.{os.getpid()}")
    if os.environ.get("SANDGATE_TEST_QUICK_EXIT"):
        _quick_exit(lambda: runpy.run_module("gateway", run_name="__main__", alter_sys=True))
    runpy.run_module("gateway", run_name="__main__", alter_sys=True)
    sys.exit(0)


def _quick_exit(run) -> None:
    """SANDGATE_TEST_QUICK_EXIT=1 (in a command's environment; read by the child only): run, then end as the
    interpreter's shutdown begins (the exit status it would give, non-daemon threads joined, atexit callbacks run,
    stdout and stderr flushed: 120 if that fails) and leave by os._exit, without tearing the modules down: in a
    forked child that teardown writes to every page of the heap it shares with the zygote, about 0.1 s of CPU a
    command. For a command that writes only its streams (no file or store left for its objects' finalizers to
    close): what it prints and its exit status are the same. A KeyboardInterrupt takes the interpreter's own way."""
    try:
        run()
        code = 0
    except SystemExit as exc:
        code = exc.code
        if code is None:
            code = 0
        elif not isinstance(code, int):            # sys.exit("message"): printed to stderr, status 1
            print(code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        raise
    except BaseException:                          # noqa: BLE001 -- printed as the interpreter prints it
        sys.excepthook(*sys.exc_info())
        code = 1
    import atexit

    threading._shutdown()                          # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:                          # noqa: BLE001
            code = 120
    os._exit(code & 0xFF)


def _unshare() -> None:
    """What `unshare -n -m` does before it execs: a network namespace of the process's own (loopback only, down) and
    a mount namespace whose mounts, made private, never propagate to the host's (`ip netns` mounts in it)."""
    import ctypes

    os.unshare(os.CLONE_NEWNET | os.CLONE_NEWNS)
    ms_rec, ms_private = 0x4000, 0x40000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", b"/", None, ms_rec | ms_private, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private in the new mount namespace")


def _warm() -> None:
    """What every start computes alike from the installed code alone, computed once here: a start finds it made, as
    its own second computation of it would. The shipped policies' read set (gateway/policy/cache.py's `read_set`
    keeps it keyed by the modules' text: a start whose policies differ computes its own; about 0.15 s of CPU a
    start) and SQLAlchemy's mapper configuration (made at a start's first query)."""
    from sqlalchemy.orm import configure_mappers

    from gateway.policy.base import CachingEngine
    from gateway.policy.loader import default_policy_dir, load_policy_dir

    CachingEngine._read_set(load_policy_dir(default_policy_dir()))
    configure_mappers()


def _profile(path: str) -> None:
    """SANDGATE_TEST_PROFILE=PATH (in a start's environment): the child writes, as it exits, a cProfile of its CPU
    (PATH.PID, `python -m pstats`; process time, every thread's calls) and the modules it imported after the fork
    (PATH.PID.modules: what PRELOAD could import once for every start). Read by the child only."""
    import cProfile

    before = set(sys.modules)
    profiler = cProfile.Profile(time.process_time)

    def write() -> None:
        profiler.disable()
        profiler.dump_stats(path)
        Path(f"{path}.modules").write_text("".join(f"{name}\n" for name in sorted(set(sys.modules) - before)))
    atexit.register(write)
    profiler.enable()


def serve(sock_fd: int, parent: int) -> None:
    """The zygote's loop: one fork per request, one exit message per child. Single-threaded, no signal handlers."""
    import selectors

    if threading.current_thread() is threading.main_thread() and os.environ.get("SANDGATE_ZYGOTE_PDEATHSIG"):
        _die_with_parent()
    if os.getppid() != parent:
        return
    sock = socket.socket(fileno=sock_fd)
    import importlib

    began = time.process_time()
    try:
        # SANDGATE_ZYGOTE_PRELOAD: other modules instead (the zygote's own tests: one that does not exist, for the
        # fallback; a light one for a zygote that is killed or outlived, never forked from: ~1.5 s of CPU spared)
        names = list(filter(None, os.environ.get("SANDGATE_ZYGOTE_PRELOAD", "").split(","))) or PRELOAD
        before = dict(os.environ)
        for name in names:
            importlib.import_module(name)
        if names is PRELOAD:
            _warm()
        imported_env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    except BaseException as exc:                     # noqa: BLE001 -- reported, and the client execs instead
        sock.send(json.dumps({"error": f"preload failed: {exc!r}"}).encode())
        return
    # what the imports made goes to the collector's permanent generation: a child's collections then never walk
    # (and so never copy, page by page) the heap it shares with the zygote, which would cost it more CPU than a
    # fresh process's collections of the same objects (the pattern gc.freeze's documentation describes)
    import gc

    gc.collect()
    gc.freeze()
    try:
        os.close(os.pidfd_open(os.getpid()))         # pidfds (Linux 5.3): without them every start execs
    except (AttributeError, OSError) as exc:
        sock.send(json.dumps({"error": f"no pidfd: {exc!r}"}).encode())
        return
    if _threads() != 1 or threading.active_count() != 1:
        sock.send(json.dumps({"error": f"{_threads()} threads after the imports: forking is not safe"}).encode())
        return
    sock.send(json.dumps({"ready": True, "pid": os.getpid(),
                          "import_cpu": round(time.process_time() - began, 3)}).encode())
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    children: dict[int, int] = {}                    # pidfd -> pid
    while True:
        events = sel.select(timeout=5.0)
        if os.getppid() != parent:
            return
        for key, _ in events:
            if key.data is None:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 3)
                except OSError:
                    return
                if not data:
                    return                           # the test process closed its end: it is gone
                request = json.loads(data)
                if len(fds) not in (1, 3):
                    for fd in fds:
                        os.close(fd)
                    sock.send(json.dumps({"error": "one log descriptor, or stdin, stdout and stderr"}).encode())
                    continue
                try:
                    pid = os.fork()
                except OSError as exc:
                    for fd in fds:
                        os.close(fd)
                    sock.send(json.dumps({"error": f"fork failed: {exc!r}"}).encode())
                    continue
                if pid == 0:
                    _become(request, fds, [sock, sel, *children], imported_env)
                    return                           # unreachable: _become raises SystemExit
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                sel.register(pidfd, selectors.EVENT_READ, pid)
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
            else:
                pidfd, pid = key.fd, key.data
                sel.unregister(pidfd)
                os.close(pidfd)
                del children[pidfd]
                _, status, usage = os.wait4(pid, 0)
                sock.send(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(status),
                                      "cpu": round(usage.ru_utime + usage.ru_stime, 3)}).encode())


# -- the test process's side ----------------------------------------------------------------------------------
class ZygoteGone(RuntimeError):
    pass


class _ForkedZygote:
    """A zygote forked from the process that uses it (`client(..., fork=True)`), Popen-like: pid, poll, wait, kill."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["zygote", str(self.pid)], timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _fork_zygote(ours: socket.socket, theirs: socket.socket, log_file, env: dict[str, str]) -> _ForkedZygote:
    """The zygote as a fork of this process instead of `python -m tests.support.zygote`: for a process that has
    PRELOAD imported already, having been forked from a zygote itself (tests/support/isolate_probe.py, in namespaces
    of its own), and has started no thread yet. The child takes the zygote's environment and streams, and serves."""
    if _threads() != 1:
        raise ZygoteGone(f"{_threads()} threads: a zygote cannot be forked from this process")
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        zygote = os.getpid()
        try:
            ours.close()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(log_file.fileno(), 1)
            os.dup2(log_file.fileno(), 2)
            os.close(devnull)
            os.environ.clear()
            os.environ.update(env)
            serve(theirs.fileno(), parent)
        except BaseException:
            if os.getpid() != zygote:        # a child of it, ending (SystemExit): on to the interpreter's shutdown
                raise
            import traceback

            traceback.print_exc()
        os._exit(0)                          # the zygote itself never returns into the process it was forked from
    return _ForkedZygote(pid)


class Forked:
    """A Popen-like handle on a child of the zygote: pid, returncode, poll, wait, send_signal, terminate, kill."""

    def __init__(self, client: "Client", pid: int, pidfd: int, args: list[str]):
        self._client = client
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.cpu: float | None = None             # user+sys seconds of the child, once it has ended
        self._pidfd = pidfd

    def _ended(self, status: int, cpu: float) -> None:
        self.returncode = status
        self.cpu = cpu
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._client.pump(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._client.pump(left if left is None else min(left, 1.0))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Client:
    """This test process's zygote. `spawn` forks a child of it; `pump` reads what the zygote reported."""

    def __init__(self, timeout: float, preload: tuple[str, ...] | None = None, fork: bool = False):
        self.owner = os.getpid()
        self.lock = threading.RLock()
        self.children: dict[int, Forked] = {}
        self.spawned = 0                          # children forked so far
        # the zygote's own output (a failed import, a traceback): an anonymous file, gone when both have closed it
        self.log_file = tempfile.TemporaryFile()
        self.last_words = ""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # the zygote's environment: this process's, so a start with the same import-time variables can fork (a
        # forked zygote's streams buffer as this interpreter's do)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if fork and not sys.stdout.write_through:        # this interpreter started without PYTHONUNBUFFERED
            del self.env["PYTHONUNBUFFERED"]
        if threading.current_thread() is threading.main_thread():
            self.env["SANDGATE_ZYGOTE_PDEATHSIG"] = "1"   # PR_SET_PDEATHSIG follows the thread that started it
        if preload:                                       # a zygote of another kind: these modules, not PRELOAD
            self.env["SANDGATE_ZYGOTE_PRELOAD"] = ",".join(preload)
        if fork:
            self.proc = _fork_zygote(ours, theirs, self.log_file, self.env)
        else:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.zygote", str(theirs.fileno()),
                                          str(os.getpid())], pass_fds=[theirs.fileno()], cwd=str(ROOT),
                                         stdin=subprocess.DEVNULL, stdout=self.log_file, stderr=self.log_file,
                                         env=self.env)
        theirs.close()
        self.sock = ours
        self.sock.settimeout(timeout)
        try:
            ready = json.loads(self.sock.recv(MAX_MESSAGE) or b'{"error": "the zygote exited"}')
        except (OSError, ValueError) as exc:
            ready = {"error": repr(exc)}
        self.sock.settimeout(None)
        if not ready.get("ready"):
            self.close()
            raise ZygoteGone(f"{ready.get('error')}: {self.last_words}")
        self.import_cpu = ready["import_cpu"]

    def log(self) -> str:
        if self.log_file.closed:
            return self.last_words
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        if self.sock.fileno() < 0:
            return
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.last_words = self.log()
        self.log_file.close()

    def forks(self, env: dict[str, str]) -> bool:
        """Whether a child with this environment is what a fresh process would be: no variable read at import
        time differs from the zygote's."""
        keys = {k for k in (*env, *self.env) if import_time_key(k)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def spawn(self, args: list[str], env: dict[str, str], cwd: str, log_fd: int | tuple[int, int, int],
              new_session: bool = False, script: str | None = None, unshare: bool = False) -> Forked:
        """`python -m gateway ARGS` (or `python SCRIPT ARGS`) as a child of the zygote, its stdout and stderr on
        `log_fd` (stdin /dev/null), or on (stdin, stdout, stderr); ZygoteGone if it cannot fork one. `unshare`:
        in a network and mount namespace of its own, as `unshare -n -m python ...` (root)."""
        with self.lock:
            if self.proc.poll() is not None:
                raise ZygoteGone(f"the zygote exited: {self.log()}")
            message = json.dumps({"argv": args, "env": env, "cwd": cwd, "new_session": new_session,
                                  **({"script": script} if script else {}),
                                  **({"unshare": True} if unshare else {})}).encode()
            try:
                socket.send_fds(self.sock, [message], list(log_fd) if isinstance(log_fd, tuple) else [log_fd])
                while True:
                    reply = self._receive(None)
                    if reply is None:
                        raise ZygoteGone(f"the zygote exited: {self.log()}")
                    data, fds = reply
                    if "exit" in data:
                        self._exited(data)
                        continue
                    if "error" in data:
                        raise ZygoteGone(data["error"])
                    child = Forked(self, data["pid"], fds[0], [script, *args] if script else ["-m", "gateway", *args])
                    self.children[child.pid] = child
                    self.spawned += 1
                    return child
            except OSError as exc:
                raise ZygoteGone(repr(exc)) from exc

    def _receive(self, timeout: float | None) -> tuple[dict, list[int]] | None:
        self.sock.settimeout(timeout)
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 1)
        except (TimeoutError, BlockingIOError):
            raise
        finally:
            self.sock.settimeout(None)
        if not data:
            return None
        return json.loads(data), fds

    def _exited(self, data: dict) -> None:
        child = self.children.pop(data["exit"], None)
        if child is not None:
            child._ended(data["status"], data["cpu"])

    def pump(self, timeout: float | None) -> None:
        """Read the zygote's exit reports: wait up to `timeout` for the first one (0: only what has arrived)."""
        with self.lock:
            wait = timeout
            while True:
                try:
                    reply = self._receive(wait)
                except (TimeoutError, BlockingIOError):
                    return
                except OSError:
                    reply = None
                if reply is None:
                    self._lost()
                    return
                self._exited(reply[0])
                wait = 0

    def _lost(self) -> None:
        """The zygote is gone (it never is while its test process lives, unless killed): its children's exit
        statuses went with it. A child that has ended raises on wait; one still running is waited for."""
        for pid, child in list(self.children.items()):
            if child._pidfd is not None:
                import select

                ready, _, _ = select.select([child._pidfd], [], [], 0)
                if ready:
                    del self.children[pid]
                    raise ZygoteGone(f"the zygote exited, and with it child {pid}'s exit status: {self.log()}")
        time.sleep(0.1)


def run(server: Client, args: list[str], env: dict[str, str], cwd: str, input: bytes | None,
        timeout: float | None, script: str | None = None, unshare: bool = False) -> subprocess.CompletedProcess:
    """`subprocess.run([python, "-m", "gateway", *args], input=..., capture_output=True, timeout=...)`, forked:
    stdin, stdout and stderr are pipes of this process; on a timeout the child is killed, as subprocess.run does."""
    import selectors

    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = server.spawn(args, env, cwd, (stdin_r, out_w, err_w), script=script, unshare=unshare)
    finally:
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    pending = memoryview(input or b"")
    deadline = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(out_r, selectors.EVENT_READ)
        sel.register(err_r, selectors.EVENT_READ)
        if pending:
            os.set_blocking(stdin_w, False)
            sel.register(stdin_w, selectors.EVENT_WRITE)
        else:
            os.close(stdin_w)
        try:
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    child.kill()
                    child.wait()
                    raise subprocess.TimeoutExpired(["-m", "gateway", *args], timeout,
                                                    b"".join(chunks[out_r]), b"".join(chunks[err_r]))
                for key, _ in sel.select(left):
                    if key.fd == stdin_w:
                        try:
                            pending = pending[os.write(stdin_w, pending[:65536]):]
                        except BrokenPipeError:
                            pending = pending[:0]
                        if not pending:
                            sel.unregister(stdin_w)
                            os.close(stdin_w)
                        continue
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
        finally:
            for fd in (out_r, err_r, *([stdin_w] if pending else [])):
                try:
                    os.close(fd)
                except OSError:
                    pass
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        code = child.wait(left)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    except ZygoteGone as exc:                     # it ran, its status is lost: not a start to run again
        raise RuntimeError(str(exc)) from exc
    return subprocess.CompletedProcess(["-m", "gateway", *args], code, b"".join(chunks[out_r]),
                                       b"".join(chunks[err_r]))


_CLIENT: dict[str, Client | None] = {}
_FAILED: dict[int | tuple[int, str], str] = {}


def client(timeout: float, preload: tuple[str, ...] | None = None, fork: bool = False) -> Client | None:
    """This test process's zygote, started on first use; None when it cannot start (the reason: `failure()`).
    `preload`: a zygote of another kind, one per test process too, that imports these modules instead of PRELOAD
    (the MCP SDK's for `sandgate mcp`: tests/support/forked.py)."""
    pid = os.getpid()
    key = "client" if preload is None else "preload:" + ",".join(preload)
    failed = pid if preload is None else (pid, key)
    current = _CLIENT.get(key)
    if current is not None and current.owner == pid and current.proc.poll() is None:
        return current
    if failed in _FAILED:
        return None
    try:
        started = _CLIENT[key] = Client(timeout, preload, fork)
    except (ZygoteGone, OSError) as exc:
        _FAILED[failed] = str(exc)
        _CLIENT[key] = None
        return None
    # at exit the zygote is stopped and reaped by this process, so its children's CPU counts in this process's
    # RUSAGE_CHILDREN (and in `time`), as a real start's does. pytest-xdist's workers end with os._exit, past
    # atexit: tests/conftest.py calls shutdown() from pytest_unconfigure.
    atexit.register(shutdown)
    return started


def shutdown() -> None:
    """Stop and reap this process's zygotes, if it started any (their children have been stopped by then)."""
    for current in list(_CLIENT.values()):
        if current is not None and current.owner == os.getpid():
            current.close()


def failure() -> str | None:
    return _FAILED.get(os.getpid())


def audit_env(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Every environment key read while importing `names` (and warming, for PRELOAD) (os.environ's reads and
    os.getenv's), in order."""
    import importlib

    seen: list[str] = []

    class Recording(type(os.environ)):
        def __getitem__(self, key):
            seen.append(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            seen.append(key)
            return super().__contains__(key)

    recording = Recording(os.environ._data, os.environ.encodekey, os.environ.decodekey, os.environ.encodevalue,
                          os.environ.decodevalue)
    os.environ = recording
    try:
        for name in names:
            importlib.import_module(name)
        if names is PRELOAD:
            _warm()
    finally:
        os.environ = os._Environ(recording._data, recording.encodekey, recording.decodekey, recording.encodevalue,
                                 recording.decodevalue)
    return list(dict.fromkeys(seen))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--audit-env"]:              # --audit-env [MODULE,...]: PRELOAD, or these modules
        print("\n".join(audit_env(tuple(sys.argv[2].split(",")) if sys.argv[2:] else PRELOAD)))
        sys.exit(0)
    serve(int(sys.argv[1]), int(sys.argv[2]))
