"""The policy worker forker's own side (forker.py has serve's side and the design): a loop on its control socket
that forks a policy worker per request and reaps the workers that end.

Protocol: a SOCK_SEQPACKET socket pair, one JSON message each way per worker. The client sends {"dir": DIR} with
its working directory (an O_DIRECTORY descriptor) and, when open, its stderr attached; the forker answers
{"pid": PID} with the worker's stdin (write end), stdout (read end) and a pidfd attached, or {"error": TEXT}. The
forker exits when the socket closes (its process ended or closed it) or when its parent dies (PR_SET_PDEATHSIG).

A worker is forked as `python -m gateway.policy.worker DIR` is after its imports (`_become_worker`): stdin and
stdout the new pipes, stderr and working directory the client's, no other descriptor, the client's SIGINT
disposition and no Python signal handler, fresh std streams, logging unconfigured; then `worker.main(DIR)`, and
its exit status as the interpreter's would be (a traceback on stderr for an uncaught exception).
"""
from __future__ import annotations

import gc
import io
import json
import logging
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

MAX_MESSAGE = 1 << 16
PR_SET_PDEATHSIG = 1
MAX_FD = 1 << 30                           # os.closerange: close_range(2), whatever the limit

_KEEP: list[Any] = []                      # the inherited std streams a worker replaces: never finalised (closed)


def import_worker() -> None:
    """What a worker runs, and what the forker itself uses: imported by forker.start before it forks the forker."""
    import ctypes  # noqa: F401 - for _die_with_parent

    from gateway.policy import loader, rego, worker  # noqa: F401


def _die_with_parent() -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):       # the control socket's end still ends it
        pass


def serve(sock_fd: int, parent: int) -> NoReturn:
    """The forker: in a child forked by forker.start (or exec'd with the socket as `sock_fd`). One thread, no signal
    handler, no descriptor but the socket (and /dev/null as 0, 1, 2). Never returns."""
    try:
        _die_with_parent()
        if os.getppid() != parent:          # the parent died before PR_SET_PDEATHSIG took
            os._exit(0)
        sys.setprofile(None)                 # a profiler or tracer of the parent's (a fresh worker has neither)
        sys.settrace(None)
        sigint = signal.getsignal(signal.SIGINT)
        for sig in signal.valid_signals():  # a handler the parent set runs Python code: not here
            handler = signal.getsignal(sig)
            if callable(handler) and sig != signal.SIGINT:
                signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)    # a Ctrl-C at the terminal is for serve, which closes us
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, sock_fd)
        os.closerange(sock_fd + 1, MAX_FD)
        sock = socket.socket(fileno=sock_fd)
        sock.setblocking(True)
        import_worker()                      # imported before the fork by forker.start; exec'd: here

        # What was imported goes to the collector's permanent generation without a collection (which would touch,
        # and so copy, every object): a worker's collections walk only what it makes itself.
        gc.freeze()
        _loop(sock, sigint)
    except BaseException:  # noqa: BLE001 - nowhere to report: the client sees the socket close
        pass
    os._exit(0)


def _loop(sock: socket.socket, sigint: Any) -> None:
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    children: dict[int, int] = {}            # our pidfd -> pid
    while True:
        for key, _ in sel.select():
            if key.data is not None:         # a worker ended: reap it
                sel.unregister(key.fd)
                os.close(key.fd)
                pid = children.pop(key.fd)
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 2)
            except OSError:
                return
            if not data:
                return                       # the client closed its end: serve is gone or done
            reply, give = _fork_worker(data, fds, sock, sel, children, sigint)
            try:
                socket.send_fds(sock, [json.dumps(reply).encode()], give) if give else sock.send(
                    json.dumps(reply).encode())
            except OSError:
                return
            finally:
                for fd in give:
                    os.close(fd)


def _fork_worker(data: bytes, fds: list[int], sock: socket.socket, sel: selectors.BaseSelector,
                 children: dict[int, int], sigint: Any) -> tuple[dict, list[int]]:
    pipes: list[int] = []
    try:
        try:
            request = json.loads(data)
            directory = request["dir"]
        except (ValueError, KeyError, TypeError):
            return {"error": "a malformed request"}, []
        if len(fds) not in (1, 2):
            return {"error": "a working directory, and stderr when open"}, []
        try:
            in_r, in_w = os.pipe()
            pipes += [in_r, in_w]
            out_r, out_w = os.pipe()
            pipes += [out_r, out_w]
            pid = os.fork()
        except OSError as exc:
            return {"error": f"fork failed: {exc}"}, []
        if pid == 0:
            _become_worker(directory, in_r, out_w, fds, [sock, sel, *children], sigint)
        pidfd = os.pidfd_open(pid)           # the child is ours and unreaped: this is it, exited or not
        children[pidfd] = pid
        sel.register(pidfd, selectors.EVENT_READ, pid)
        pipes.remove(in_w)
        pipes.remove(out_r)
        return {"pid": pid}, [in_w, out_r, os.dup(pidfd)]
    finally:
        for fd in fds + pipes:
            os.close(fd)


def _become_worker(directory: str, in_r: int, out_w: int, fds: list[int], own: list[Any], sigint: Any) -> NoReturn:
    """In the forked child: become `python -m gateway.policy.worker DIR` after its imports, and exit as it would."""
    code: Any = 1
    try:
        for thing in own:                    # the forker's socket, selector and its other children's pidfds
            if isinstance(thing, int):
                os.close(thing)
            else:
                thing.close()
        cwd, err = fds[0], (fds[1] if len(fds) > 1 else None)
        os.fchdir(cwd)
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        if err is not None:
            os.dup2(err, 2)
        else:
            os.close(2)                      # the client had no stderr: neither has an exec'd worker
        os.closerange(3, MAX_FD)             # everything else, the pipes' other ends and the forker's included
        signal.signal(signal.SIGINT, sigint)
        _KEEP.extend((sys.stdin, sys.stdout, sys.stderr))
        sys.stdin = io.open(0, "r", closefd=False, encoding=_encoding(_KEEP[0]), errors=_errors(_KEEP[0]))
        sys.stdout = io.open(1, "w", closefd=False, encoding=_encoding(_KEEP[1]), errors=_errors(_KEEP[1]))
        sys.stderr = io.open(2, "w", buffering=1, closefd=False, encoding=_encoding(_KEEP[2]),
                             errors="backslashreplace")
        root = logging.getLogger()           # logging as a fresh interpreter has it: not configured
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
        from gateway.policy.worker import main

        code = main(directory)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        _print_exception()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - what the interpreter would print on the way out
        _print_exception()
    _flush()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        try:
            print(code, file=sys.stderr)
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    os._exit(code & 0xFF)


def _encoding(stream: Any) -> str:
    return getattr(stream, "encoding", None) or "utf-8"


def _errors(stream: Any) -> str:
    return getattr(stream, "errors", None) or "strict"


def _print_exception() -> None:
    try:
        traceback.print_exc()
    except BaseException:  # noqa: BLE001
        pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
