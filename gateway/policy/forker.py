"""Policy worker processes forked from a forker instead of each started as a fresh interpreter.

A policy worker (worker.py) started as `python -m gateway.policy.worker DIR` spends most of its start importing
Python, regorus and the policy modules (about 0.2 s of CPU) before it compiles the policy. `sandgate serve` starts
`policy.workers` of them, again on every policy revision and after every timeout kill. The forker is a small
process that `serve` forks from itself while it still has one thread (before its event loop or any thread starts:
`start`, called by the serve command): it inherits those imports and does nothing but wait on its control
socket. For each worker the pool asks it for, it forks a child that becomes what `python -m gateway.policy.worker
DIR` is after its imports (forkserver.py): stdin and stdout pipes, the asking process's stderr and working
directory, default signal dispositions, no other descriptor, then `worker.main(DIR)` and its exit. The worker's
stdin's write end, stdout's read end and a pidfd of it go back over the socket (SCM_RIGHTS): the pool talks to it
through the pipes exactly as to an exec'd worker, signals it through the pidfd (never a reused pid), and learns
of its end from the pidfd and from its stdout's end. The forker reaps its children.

What stays as it was: a worker is a separate process, killed on timeout; its death ends its stdout, which fails
its pending evaluations (the callers deny); it is replaced in the background; its protocol is worker.py's.
When the forker cannot be made (more than one thread, no pidfds, a failed fork, `SANDGATE_POLICY_SPAWN=exec`) or
stops answering, the pool starts workers as before (`python -m gateway.policy.worker`), and the reason is logged.

What differs: a forked worker shares its memory image with `serve` as it was when the forker was made (pages are
copied on write; its RSS counts the shared pages, its PSS does not), including what `serve` had read by then (its
configuration); /proc/PID/cmdline and /proc/PID/environ show `serve`'s (os.environ itself is `serve`'s at that
point). `SANDGATE_POLICY_SPAWN=exec` keeps every worker a fresh interpreter.

The forker's own loop and the protocol: forkserver.py.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, NoReturn

from gateway.policy.forkserver import MAX_MESSAGE, import_worker, serve

log = logging.getLogger("sandgate.policy")

SPAWN_ENV = "SANDGATE_POLICY_SPAWN"        # "exec": no forker, every worker a fresh interpreter
REPLY_TIMEOUT_S = 30.0                     # a fork is milliseconds; past this the forker is taken for stuck


class ForkerError(Exception):
    """The forker could not make a worker (this time, or for good: then `Forker.gone` says why)."""


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _cannot_fork() -> str | None:
    """Why this process must not fork a forker now (None: it may)."""
    if os.environ.get("SANDGATE_POLICY_SPAWN", "") == "exec":
        return f"{SPAWN_ENV}=exec"
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return "no pidfds on this platform"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError as exc:
        return f"no pidfds: {exc}"
    if _threads() != 1 or threading.active_count() != 1:
        return f"{_threads()} threads in this process: forking is not safe"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return "an event loop runs in this process: forking is not safe"


# -- serve's side -----------------------------------------------------------------------------------------------
class Forker:
    """This process's forker: `spawn` asks it for a worker (blocking: the pool calls it on a thread of its own)."""

    def __init__(self, pid: int, pidfd: int, sock: socket.socket):
        self.pid = pid
        self.owner = os.getpid()             # a process forked from this one has no forker of its own
        self.gone: str | None = None         # why it can make no more workers (None: it can)
        self._pidfd = pidfd
        self._sock = sock
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def spawn(self, directory: str) -> tuple[int, int, int, int]:
        """A new worker of `directory`: (pid, its stdin's write end, its stdout's read end, a pidfd), every
        descriptor non-inheritable. ForkerError when it cannot (`gone` set when it never will again)."""
        with self._lock:
            if self.gone is not None:
                raise ForkerError(self.gone)
            try:
                cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                raise ForkerError(f"the working directory: {exc}") from None
            attach = [cwd] + ([2] if _is_open(2) else [])
            try:
                self._sock.settimeout(REPLY_TIMEOUT_S)
                socket.send_fds(self._sock, [json.dumps({"dir": directory}).encode()], attach)
                data, fds, _flags, _addr = socket.recv_fds(self._sock, MAX_MESSAGE, 3)
            except (BrokenPipeError, ConnectionResetError):
                self._fail("the policy worker forker exited")
            except TimeoutError:
                self._fail(f"the policy worker forker did not answer within {REPLY_TIMEOUT_S:.0f} s")
            except OSError as exc:
                self._fail(f"the policy worker forker cannot be reached: {exc}")
            finally:
                os.close(cwd)
            for fd in fds:
                os.set_inheritable(fd, False)
            try:
                reply = json.loads(data) if data else {}
            except ValueError:
                reply = {}
            if "pid" in reply and len(fds) == 3:
                return (int(reply["pid"]), *fds)
            for fd in fds:
                os.close(fd)
            if not data:
                self._fail("the policy worker forker exited")
            if "error" in reply:
                raise ForkerError(str(reply["error"]))
            self._fail(f"the policy worker forker answered {data[:200]!r}")

    def _fail(self, why: str) -> NoReturn:
        """It will make no more workers: stop it, and say so once."""
        self.gone = why
        log.warning("%s; policy workers start as new processes (python -m gateway.policy.worker) from now on", why)
        self._stop(0.0)
        raise ForkerError(why)

    def _stop(self, grace_s: float) -> None:
        try:
            self._sock.close()               # it exits when its end reads the close
        except OSError:
            pass
        deadline = time.monotonic() + grace_s
        while True:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:        # reaped already (or never ours)
                break
            if pid == self.pid:
                break
            if time.monotonic() >= deadline:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
                break
            time.sleep(0.01)
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def close(self) -> None:
        """Stop the forker (its workers live on: each ends when its stdin closes)."""
        with self._lock:
            if self.gone is None:
                self.gone = "the policy worker forker was stopped"
            if self._pidfd >= 0:
                self._stop(2.0)
        if self._executor is not None:
            self._executor.shutdown(wait=False)

    async def start_worker(self, directory: str, limit: int) -> "ForkedWorker | None":
        """A worker forked for the running loop, or None when the forker could not make one (the pool then
        starts it as a new process)."""
        if self.gone is not None:
            return None
        if self._executor is None:           # one thread, made on first use: never before the fork
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandgate-policy-forker")
        cf = self._executor.submit(self.spawn, directory)
        try:
            pid, stdin_w, stdout_r, pidfd = await asyncio.wrap_future(cf)
        except (ForkerError, OSError) as exc:
            if self.gone is None:            # this worker only (a fork that failed): the next may succeed
                log.warning("the policy worker forker could not fork a worker (%s); starting it as a new process",
                            exc)
            return None
        except asyncio.CancelledError:
            cf.add_done_callback(_discard)   # a worker made after all: its stdin closed, it ends
            raise
        return await ForkedWorker.attach(pid, stdin_w, stdout_r, pidfd, limit)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _discard(cf: concurrent.futures.Future) -> None:
    if cf.cancelled() or cf.exception() is not None:
        return
    _pid, stdin_w, stdout_r, pidfd = cf.result()
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for fd in (stdin_w, stdout_r, pidfd):
        os.close(fd)


class ForkedWorker:
    """What the pool uses of an `asyncio.subprocess.Process`, for a worker the forker made: pid, stdin (a
    StreamWriter), stdout (a StreamReader), returncode, kill, wait. The forker reaps the worker and keeps its exit
    status: here `returncode` is None while it runs, then -SIGKILL when this process killed it, else 0."""

    def __init__(self, pid: int, pidfd: int, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader):
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._killed = False
        self._loop = asyncio.get_running_loop()
        self._exited = self._loop.create_future()
        self._loop.add_reader(pidfd, self._on_exit)

    @classmethod
    async def attach(cls, pid: int, stdin_w: int, stdout_r: int, pidfd: int, limit: int) -> "ForkedWorker":
        loop = asyncio.get_running_loop()
        files: list[Any] = []
        try:
            files.append(open(stdout_r, "rb", buffering=0))
            files.append(open(stdin_w, "wb", buffering=0))
            reader = asyncio.StreamReader(limit=limit, loop=loop)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), files[0])
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), files[1])
        except BaseException:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(pidfd)
            for fd, f in zip((stdout_r, stdin_w), files + [None, None]):
                if f is not None:
                    f.close()
                else:
                    os.close(fd)
            raise
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(pid, pidfd, writer, reader)

    def _on_exit(self) -> None:
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        self.returncode = -signal.SIGKILL if self._killed else 0
        self.stdin.close()
        if not self._exited.done():
            self._exited.set_result(None)

    def send_signal(self, sig: int) -> None:
        if self._pidfd < 0:                  # exited (and perhaps reaped: its pid may be another's now)
            return
        try:
            signal.pidfd_send_signal(self._pidfd, sig)
        except ProcessLookupError:
            return
        if sig == signal.SIGKILL:
            self._killed = True

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        await asyncio.shield(self._exited)
        assert self.returncode is not None
        return self.returncode


# -- this process's forker --------------------------------------------------------------------------------------
_current: Forker | None = None


def current() -> Forker | None:
    """The forker the policy pools of this process use (None: each worker starts as a new process)."""
    return _current if _current is not None and _current.owner == os.getpid() else None


def install(forker: Forker | None) -> Forker | None:
    """Make `forker` the one pools use (None: none); returns the one it replaces."""
    global _current
    previous, _current = _current, forker
    return previous


def start() -> Forker | None:
    """Fork this process's forker, when it may: call while the process has one thread and no event loop (the
    serve command, before its loop starts). None, and the reason logged, when it cannot."""
    if current() is not None:
        return current()
    why = _cannot_fork()
    if why is not None:
        (log.info if why.startswith(SPAWN_ENV) else log.warning)(
            "policy workers start as new processes: %s", why)
        return None
    import_worker()                          # what every worker runs, imported once here
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        ours.close()
        theirs.close()
        log.warning("policy workers start as new processes: the forker could not be forked: %s", exc)
        return None
    if pid == 0:
        ours.detach()                        # closed with every other descriptor by serve(), not finalised
        serve(theirs.detach(), parent)
    theirs.close()
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:                   # unreachable in practice: checked by _cannot_fork
        ours.close()
        os.waitpid(pid, 0)
        log.warning("policy workers start as new processes: %s", exc)
        return None
    forker = Forker(pid, pidfd, ours)
    install(forker)
    import atexit

    atexit.register(forker.close)
    log.debug("policy workers fork from a forker (pid %d)", pid)
    return forker
