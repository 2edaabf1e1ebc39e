"""Processes forked from a zygote of another kind than sandgate's (docs/testing.md, "The zygote"): `sandgate mcp`
from one that has imported the MCP SDK, the `aws` CLI (tests/support/moto.py) from one that has imported awscli.

A kind is its modules (instead of zygote.PRELOAD) and the variables they read as they import beyond
zygote.IMPORT_TIME_ENV (`python -m tests.support.zygote --audit-env MODULE,...` lists them): a process whose value
of one differs from the zygote's runs for real, as does any when SANDGATE_TEST_EXEC=1 or the zygote cannot fork.

A `sandgate mcp` process spends about 2 s of CPU importing before it does anything, most of it the MCP SDK (pydantic
models of the protocol's types). A test whose subject is what the proxy does, not how its process starts, forks it
from a zygote of its own kind (`zygote.client(..., MCP_PRELOAD)`: one per test process, started on first use, that
imports only what `sandgate mcp` imports), with the same argv, environment, working directory and standard streams
as the real process, and talks to it over the same pipes. One real exec'd `sandgate mcp` per way of starting it stays
in tests/gateway/mcp/test_mcp_proxy_e2e.py (the SDK's stdio_client, and a bad invocation). Where the zygote cannot
fork this start (SANDGATE_TEST_EXEC=1, an import-time variable that differs, no zygote), a real process runs."""
from __future__ import annotations

import asyncio
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from tests.support import zygote
from tests.support.gateway import ROOT, START_TIMEOUT_S, fork_refusal, run_forked

# What `sandgate mcp` imports (the command line, the proxy, the SDK's stdio and streamable-HTTP transports, uvicorn
# for --listen), listed from the imports of its code paths.
MCP_PRELOAD = ("gateway.cli", "gateway.cli.commands", "sandgate.mcp.command", "sandgate.mcp.gate",
               "sandgate.mcp.proxy", "mcp", "mcp.client.stdio", "mcp.server.stdio", "mcp.server.lowlevel",
               "mcp.client.streamable_http", "mcp.shared._httpx_utils", "mcp.shared.exceptions", "uvicorn")
# Read while importing MCP_PRELOAD beyond zygote.IMPORT_TIME_ENV (`python -m tests.support.zygote --audit-env
# MODULE,...`): opentelemetry's, which the SDK imports
MCP_IMPORT_TIME_ENV = ("OTEL_PYTHON_CONTEXT", "OTEL_PROPAGATORS", "OTEL_PYTHON_TRACER_PROVIDER")


def kind_zygote(preload: tuple[str, ...], import_env: tuple[str, ...], env: dict[str, str]) -> zygote.Client | None:
    """The zygote of this kind, if a process with this environment may fork from it; else None (run a real one)."""
    if fork_refusal(sys.executable, []) is not None:
        return None
    server = zygote.client(START_TIMEOUT_S, preload)
    if server is None or not server.forks(env):
        return None
    return server if all(env.get(k) == server.env.get(k) for k in import_env) else None


def fork_env(env: dict[str, str], import_env: tuple[str, ...]) -> dict[str, str]:
    """`env` with the zygote's import-time variables (PYTHONUNBUFFERED, the locale, ...), as a forked child has them:
    what decides the process's behaviour is `env`'s own."""
    keep = {k: v for k, v in env.items() if not zygote.import_time_key(k) and k not in import_env}
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return keep | {k: v for k, v in base.items() if zygote.import_time_key(k) or k in import_env}


def mcp_zygote(env: dict[str, str]) -> zygote.Client | None:
    return kind_zygote(MCP_PRELOAD, MCP_IMPORT_TIME_ENV, env)


class ForkedProc:
    """A child of a zygote, Popen-like: pid, poll, wait, terminate, kill, and its stdout
    and stderr as text files (the pipes' read ends)."""

    def __init__(self, child: zygote.Forked, stdout, stderr):
        self.child, self.pid, self.stdout, self.stderr = child, child.pid, stdout, stderr

    def poll(self):
        return self.child.poll()

    def wait(self, timeout: float | None = None) -> int:
        try:
            return self.child.wait(timeout)
        finally:
            if self.child.returncode is not None:
                self.stdout.close()
                self.stderr.close()

    def terminate(self) -> None:
        self.child.terminate()

    def kill(self) -> None:
        self.child.kill()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        out, err = self.stdout.read(), self.stderr.read()
        self.wait(timeout)
        return out, err


def spawn_mcp(args: list[str], env: dict[str, str], cwd: str | Path):
    """`subprocess.Popen([python, "-m", "gateway", "mcp", *args], stdin=DEVNULL, stdout=PIPE, stderr=PIPE,
    text=True, env=env, cwd=cwd)`, forked from the MCP zygote where it can be, else exactly that."""
    import subprocess

    argv = ["mcp", *args]
    forked_env = fork_env(env, MCP_IMPORT_TIME_ENV)
    server = mcp_zygote(forked_env)
    if server is not None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            child = server.spawn(argv, forked_env, str(cwd), (devnull, out_w, err_w))
        except zygote.ZygoteGone:
            for fd in (out_r, err_r):
                os.close(fd)
        else:
            return ForkedProc(child, os.fdopen(out_r, "r"), os.fdopen(err_r, "r"))
        finally:
            for fd in (devnull, out_w, err_w):
                os.close(fd)
    return subprocess.Popen([sys.executable, "-m", "gateway", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, text=True, cwd=str(cwd))


@asynccontextmanager
async def mcp_stdio(args: list[str], env: dict[str, str], cwd: str | Path = ROOT) -> AsyncIterator[tuple]:
    """The SDK's `stdio_client(StdioServerParameters(python, ["-m", "gateway", "mcp", *args], env, cwd))` with the
    process forked from the MCP zygote: the same newline-delimited JSON-RPC over its stdin and stdout (its stderr
    is this process's), and the same end (stdin closed, then SIGTERM after 2 s, then SIGKILL). Where it cannot
    fork, the SDK's own stdio_client runs a real process."""
    from mcp import StdioServerParameters, stdio_client
    from mcp.client.stdio import get_default_environment

    full = get_default_environment() | env
    forked_env = fork_env(full, MCP_IMPORT_TIME_ENV)
    server = mcp_zygote(forked_env)
    child = None
    if server is not None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            child = server.spawn(["mcp", *args], forked_env, str(cwd), (in_r, out_w, 2))
        except zygote.ZygoteGone:
            os.close(in_w)
            os.close(out_r)
        finally:
            os.close(in_r)
            os.close(out_w)
    if child is None:
        params = StdioServerParameters(command=sys.executable, args=["-m", "gateway", "mcp", *args], env=env,
                                       cwd=str(cwd))
        async with stdio_client(params) as streams:
            yield streams
        return
    async with _pipes(child, in_w, out_r) as streams:
        yield streams


@asynccontextmanager
async def _pipes(child: zygote.Forked, in_w: int, out_r: int) -> AsyncIterator[tuple]:
    """The stdio transport's two pumps (as mcp.client.stdio's), over a forked child's stdin and stdout."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    out_file = os.fdopen(out_r, "rb", buffering=0)
    in_file = os.fdopen(in_w, "wb", buffering=0)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), out_file)
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(), in_file)
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    read_send, read_stream = anyio.create_memory_object_stream(0)
    write_stream, write_receive = anyio.create_memory_object_stream(0)

    async def stdout_reader() -> None:
        async with read_send:
            while line := await reader.readline():
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    item = exc
                else:
                    item = SessionMessage(message)
                try:
                    await read_send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def stdin_writer() -> None:
        try:
            async with write_receive:
                async for session_message in write_receive:
                    json = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write((json + "\n").encode())
                    await writer.drain()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()

    async def wait_exit(timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            while child.poll() is None:
                await anyio.sleep(0.01)
        return child.poll() is not None

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                write_transport.close()                   # stdin closed: the server's cue to end
                if not await wait_exit(2.0):
                    child.terminate()
                    if not await wait_exit(2.0):
                        child.kill()
                        await wait_exit(2.0)
                read_transport.close()
            tg.cancel_scope.cancel()


def mcp_run(args: list[str], timeout: float = 60):
    """`gateway_cli("mcp", *args)` (tests/support/gateway.py: a process run for its output, text) forked from the
    MCP zygote where it can be, else a real process."""
    import subprocess

    env = fork_env(dict(os.environ), MCP_IMPORT_TIME_ENV)
    server = mcp_zygote(env)
    argv = ["mcp", *args]
    if server is not None:
        done = run_forked(server, argv, env, os.getcwd(), None, timeout)
        if done is not None:
            return done
    return subprocess.run([sys.executable, "-m", "gateway", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)


def run_script(script: str, args: list[str], env: dict[str, str], preload: tuple[str, ...],
               import_env: tuple[str, ...], timeout: float, cwd: str | None = None) -> "subprocess.CompletedProcess":
    """`subprocess.run([script, *args], env=env, capture_output=True, timeout=timeout)` for a Python console script
    of this interpreter (its `#!` line names it), forked from the zygote of this kind where it can be: the child
    runs the script as `python SCRIPT ARGS` does (runpy.run_path, sys.argv, the script's directory first on
    sys.path), on pipes of this process. Else, or for a script of another interpreter, exactly that call."""
    import subprocess

    cwd = cwd or os.getcwd()
    with open(script, "rb") as fh:
        first = fh.readline()
    ours = first.startswith(b"#!") and os.path.realpath(first[2:].strip().decode(errors="replace")) == \
        os.path.realpath(sys.executable)
    forked_env = fork_env(env, import_env)
    server = kind_zygote(preload, import_env, forked_env) if ours else None
    if server is not None:
        try:
            done = zygote.run(server, args, forked_env, cwd, None, timeout, script=script)
        except zygote.ZygoteGone:
            pass
        else:
            return subprocess.CompletedProcess([script, *args], done.returncode, done.stdout, done.stderr)
    return subprocess.run([script, *args], env=env, capture_output=True, timeout=timeout, cwd=cwd)


def spawn_python(script: str, args: list[str], env: dict[str, str], preload: tuple[str, ...],
                 import_env: tuple[str, ...], cwd: str | Path = ROOT):
    """`subprocess.Popen([python, script, *args], env=env, cwd=cwd, stdin/stdout/stderr=DEVNULL)` (this
    interpreter), forked from the zygote of this kind where it can be (the child runs the script as `python SCRIPT`
    does); a Popen-like handle either way: poll, wait, terminate, kill."""
    import subprocess

    forked_env = fork_env(env, import_env)
    server = kind_zygote(preload, import_env, forked_env)
    if server is not None:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            return server.spawn(args, forked_env, str(cwd), (devnull, devnull, devnull), script=script)
        except zygote.ZygoteGone:
            pass
        finally:
            os.close(devnull)
    return subprocess.Popen([sys.executable, script, *args], env=env, cwd=str(cwd), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# -- a process that a program under test starts itself -------------------------------------------------------------
LAUNCHER = Path(__file__).with_name("relay_launcher.py")


class Relay:
    """This test process's end of tests/support/relay_launcher.py: a unix socket (Linux's abstract namespace:
    nothing left behind; it serves only processes of this process's user) and a daemon thread per launcher that
    forks the launcher's `python SCRIPT ARGS` from the zygote of this kind on the launcher's stdin, stdout and
    stderr, with its environment (the zygote's import-time variables, as `fork_env` gives any forked child) and
    working directory; it passes the launcher's signals on, kills the child if the launcher ends first, and reports
    the child's exit status (Popen's: `-N` for a signal). Where it cannot fork it says so, and the launcher execs
    the script itself."""

    def __init__(self, preload: tuple[str, ...], import_env: tuple[str, ...]):
        import secrets
        import socket
        import threading

        self.preload, self.import_env = preload, import_env
        self.path = f"@sandgate-relay-{os.getpid()}-{secrets.token_hex(8)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind("\0" + self.path[1:])
        self.sock.listen(16)
        threading.Thread(target=self._accept, name="zygote-relay", daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), name="zygote-relay-child", daemon=True).start()

    def _serve(self, conn) -> None:
        import json
        import select
        import socket
        import struct

        with conn:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.geteuid():
                return
            child = None
            try:
                data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
            except OSError:
                return
            try:
                request = json.loads(data)
                env = fork_env(request["env"], self.import_env)
                server = kind_zygote(self.preload, self.import_env, env) if len(fds) == 3 else None
                if server is not None:
                    child = server.spawn(request["args"], env, request["cwd"], tuple(fds), script=request["script"])
            except (zygote.ZygoteGone, ValueError, KeyError):
                child = None
            finally:
                for fd in fds:
                    os.close(fd)
            if child is None:
                conn.send(b'{"exec": true}')
                return
            conn.send(json.dumps({"pid": child.pid}).encode())
            while child.poll() is None:
                if select.select([conn], [], [], 0.1)[0]:
                    try:
                        message = conn.recv(1 << 16)
                    except OSError:
                        message = b""
                    if not message:                   # the launcher is gone: so is what it ran
                        child.kill()
                        break
                    child.send_signal(json.loads(message)["signal"])
            try:
                conn.send(json.dumps({"exit": child.wait()}).encode())
            except (OSError, zygote.ZygoteGone):        # the launcher, or the zygote, is gone
                pass


_RELAYS: dict[tuple[int, tuple[str, ...]], Relay] = {}


def relay_command(script: str, args: list[str], preload: tuple[str, ...], import_env: tuple[str, ...]) -> list[str]:
    """The command line of a real process (tests/support/relay_launcher.py) that runs `python SCRIPT ARGS` forked
    from the zygote of this kind (its imports done once per test process), for a program under test to start
    itself: `sandgate mcp -- CMD` spawns CMD, and CMD is this launcher, whose child speaks on its pipes."""
    key = (os.getpid(), preload)
    if key not in _RELAYS:
        _RELAYS[key] = Relay(preload, import_env)
    if fork_refusal(sys.executable, []) is None:
        zygote.client(START_TIMEOUT_S, preload)       # started here, in the test's thread, rather than in the relay's
    return [sys.executable, "-I", "-S", str(LAUNCHER), _RELAYS[key].path, script, *args]
