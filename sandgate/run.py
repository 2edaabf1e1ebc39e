"""`sandgate run -- CMD`: one sandbox session around one command.

Creates a session on a running sandgate (or on an embedded one started for the run when none answers),
writes the CA bundle to a temporary file, runs CMD with the session's environment, prints one stderr line
`sandgate: denied HOST: REASON` per refused destination (read from the session's events), ends the session
when CMD exits and exits with CMD's code. How CMD is started is a `Launcher`: `DirectLauncher` (proxy
variables), or with `--isolate` `NetnsLauncher`: CMD in its own network namespace (isolate.py) whose every TCP
connection is captured by sandgate's transparent listener and whose DNS is the filtering resolver; the session
is bound to the namespace's source address, so nothing in CMD needs to know about a proxy.
"""
from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Protocol, TextIO

from sandgate.isolate import IsolatedNetwork, isolated_network, preflight
from sandgate.isolation import IsolationError, isolated_env
from sandgate.client import Client, Session
from sandgate.transport import command_endpoint
from sandgate.types import Event, SandgateError, Unavailable

# Variables of the harness that never reach the sandboxed command.
HARNESS_ONLY_ENV = ("SANDGATE_TOKEN", "SANDGATE_API_URL", "SANDGATE_DATA_DIR", "SANDGATE_CONFIG", "VAULT_TOKEN",
                    "VAULT_ADDR", "VAULT_NAMESPACE", "ALL_PROXY", "all_proxy")
EMBEDDED_START_S = 60.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class RunError(Exception):
    """The run could not start (no sandgate, no token, a refused session): one line for the user, exit 2."""


@dataclass(frozen=True)
class RunSpec:
    cmd: list[str]
    allow: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    databases: list[str] = field(default_factory=list)
    workload: str = "ephemeral"
    ttl_s: int | None = None
    isolate: bool = False


# -- pure helpers -------------------------------------------------------------------------------------
def child_env(base: Mapping[str, str], session_env: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: the caller's, less harness credentials, plus the session's variables."""
    env = {k: v for k, v in base.items() if k not in HARNESS_ONLY_ENV and not k.startswith("SANDGATE_")}
    env.update(session_env)
    return env


def exit_status(returncode: int) -> int:
    """A shell's convention: a command killed by signal N exits 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class DenialReporter:
    """One line per refused destination (host and reason), in the order they happen."""

    def __init__(self, out: TextIO):
        self.out = out
        self.after = 0
        self._seen: set[tuple[str, str]] = set()

    def feed(self, events: list[Event]) -> None:
        for event in events:
            self.after = max(self.after, event.seq)
            line = denial_line(event)
            if line is None:
                continue
            key = (event.host or "", line)
            if key not in self._seen:
                self._seen.add(key)
                self.out.write(line + "\n")
                self.out.flush()


def denial_line(event: Event) -> str | None:
    if not event.refused:
        return None
    host = event.host or "?"
    reason = event.reasons[0] if event.reasons else (event.codes[0] if event.codes else "denied")
    return f"sandgate: denied {host}: {' '.join(str(reason).split())}"


# -- launching ----------------------------------------------------------------------------------------
class Launcher(Protocol):
    async def start(self, cmd: list[str], env: dict[str, str]) -> asyncio.subprocess.Process: ...


class DirectLauncher:
    """CMD as a child process with the proxy variables (a client that ignores them is not captured)."""

    async def start(self, cmd: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*cmd, env=env)


class NetnsLauncher:
    """CMD inside the isolated namespace, without proxy variables (everything is captured there)."""

    def __init__(self, network: IsolatedNetwork):
        self.network = network

    async def start(self, cmd: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
        env = isolated_env(env)
        program = shutil.which(cmd[0], path=env.get("PATH", os.defpath))
        if program is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cmd[0])
        return await asyncio.create_subprocess_exec(*self.network.command([program, *cmd[1:]]), env=env)


# -- an embedded sandgate -----------------------------------------------------------------------------
@asynccontextmanager
async def embedded_sandgate(config: str | None, stderr: TextIO,
                            transparent: bool = False) -> AsyncIterator[tuple[str, str]]:
    """A `sandgate serve` child on free loopback ports in a temporary data dir: (API URL, harness token). With
    `transparent`, it also runs the transparent listener and the filtering resolver (for --isolate)."""
    ddir = Path(tempfile.mkdtemp(prefix="sandgate-embedded-"))
    cmd = [sys.executable, "-m", "gateway", "serve", "--data-dir", str(ddir), "--proxy-listen", "127.0.0.1:0",
           "--api-listen", "127.0.0.1:0", "--log-level", "WARNING"]
    if transparent:
        cmd += ["--transparent-listen", "127.0.0.1:0", "--dns-listen", "127.0.0.1:0"]
    if config:
        cmd += ["--config", config]
    log = open(ddir / "serve.log", "wb")
    env = {k: v for k, v in os.environ.items() if k not in ("SANDGATE_TOKEN", "SANDGATE_DATA_DIR")}
    env["SANDGATE_API__HARNESS_TOKEN_FILE"] = ""     # its own data dir, its own harness.token (read below)
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                                start_new_session=True)
    try:
        api, token = await _wait_ready(proc, ddir)
        yield api, token
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
        if proc.returncode not in (0, None) and proc.returncode != -signal.SIGTERM:
            stderr.write(f"sandgate: the embedded sandgate exited with {proc.returncode}; log: {ddir}/serve.log\n")
        else:
            shutil.rmtree(ddir, ignore_errors=True)


async def _wait_ready(proc: asyncio.subprocess.Process, ddir: Path) -> tuple[str, str]:
    deadline = time.monotonic() + EMBEDDED_START_S
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise RunError(f"the embedded sandgate did not start: {_tail(ddir / 'serve.log')}")
        try:
            listen = json.loads((ddir / "listen.json").read_text())
            token = (ddir / "harness.token").read_text().strip()
            api = f"http://{listen['api']}"
            async with Client(api, token) as probe:
                await probe.health()
            return api, token
        except (OSError, ValueError, KeyError, Unavailable):
            await asyncio.sleep(0.1)
    raise RunError("the embedded sandgate did not start in time")


def _tail(path: Path) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-3:])
    except OSError:
        return "(no log)"


# -- the run ------------------------------------------------------------------------------------------
async def _reachable(api_url: str) -> bool:
    async with Client(api_url, "-") as probe:
        try:
            await probe.health()
            return True
        except Unavailable:
            return False


async def run(spec: RunSpec, *, api_url: str, token: str, explicit_url: bool, config: str | None,
              stderr: TextIO = sys.stderr, launcher: Launcher | None = None) -> int:
    if spec.isolate:
        try:
            preflight()
        except IsolationError as exc:
            raise RunError(str(exc)) from None
    async with AsyncExitStack() as stack:
        if not await _reachable(api_url):
            if explicit_url:
                raise RunError(f"no sandgate answers at {api_url}")
            stderr.write(f"sandgate: no sandgate answers at {api_url}: starting an embedded one for this run "
                         "(it stops when the command ends)\n")
            api_url, token = await stack.enter_async_context(embedded_sandgate(config, stderr, spec.isolate))
        if not token:
            raise RunError("no harness token (use --token, SANDGATE_TOKEN or the data dir's harness.token)")
        client = await stack.enter_async_context(Client(api_url, token))
        if spec.isolate and not await _transparent(client):
            raise RunError(f"the sandgate at {api_url} has no transparent listener (set proxy.transparent_listen "
                           f"and proxy.dns_listen, or let run start its own)")
        tmp = Path(tempfile.mkdtemp(prefix="sandgate-run-"))
        stack.callback(shutil.rmtree, tmp, True)
        ca_file = tmp / "ca.pem"
        network = None
        if spec.isolate:
            try:
                network = await stack.enter_async_context(isolated_network())
            except IsolationError as exc:
                raise RunError(str(exc)) from None
        try:
            session = await client.create_session(workload=spec.workload, allow=spec.allow, secrets=spec.secrets,
                                                  databases=spec.databases, ttl_s=spec.ttl_s, ca_path=str(ca_file),
                                                  source=network.link.sandbox if network is not None else None)
        except SandgateError as exc:
            raise RunError(f"cannot create a session: {exc.detail or exc.code}") from None
        try:
            ca_file.write_text(session.ca_pem)
            ca_file.chmod(0o644)
            if network is not None:
                launcher = await _capture(network, session)
            return await _supervise(client, session, spec, stderr, launcher or DirectLauncher())
        finally:
            await asyncio.shield(_end(client, session, stderr))
    raise AssertionError("unreachable")  # pragma: no cover


async def _transparent(client: Client) -> bool:
    try:
        return bool((await client.health()).get("transparent"))
    except SandgateError:
        return False


async def _capture(network: IsolatedNetwork, session: Session) -> Launcher:
    """Point the namespace's capture at the session's transparent listener and resolver."""
    where = session.info.transparent
    if not where or not where.get("listen") or not where.get("dns"):
        raise RunError("this sandgate did not bind the session to the namespace's address")
    try:
        await network.capture(where["listen"], where["dns"])
    except IsolationError as exc:
        raise RunError(str(exc)) from None
    return NetnsLauncher(network)


async def _supervise(client: Client, session: Session, spec: RunSpec, stderr: TextIO, launcher: Launcher) -> int:
    reporter = DenialReporter(stderr)
    try:
        proc = await launcher.start(spec.cmd, child_env(os.environ, session.env))
    except OSError as exc:
        stderr.write(f"sandgate: cannot run {spec.cmd[0]}: {exc.strerror or exc}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    loop = asyncio.get_running_loop()
    for sig in FORWARDED_SIGNALS:
        loop.add_signal_handler(sig, _forward, proc, sig)
    watcher = asyncio.create_task(_watch(session, reporter))
    try:
        returncode = await proc.wait()
    finally:
        for sig in FORWARDED_SIGNALS:
            loop.remove_signal_handler(sig)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    try:
        reporter.feed(await session.events(after=reporter.after))
    except SandgateError:
        pass
    return exit_status(returncode)


def _forward(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is None:
        proc.send_signal(sig)


async def _watch(session: Session, reporter: DenialReporter) -> None:
    while True:
        try:
            reporter.feed(await session.events(after=reporter.after, wait_s=20.0))
        except SandgateError:
            await asyncio.sleep(1.0)


async def _end(client: Client, session: Session, stderr: TextIO) -> None:
    try:
        await session.end()
    except SandgateError as exc:
        stderr.write(f"sandgate: could not end session {session.id}: {exc.detail or exc.code}\n")


def cmd_run(cfg: Any, args: Any) -> int:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("sandgate run: no command (sandgate run [OPTIONS] -- CMD [ARGS...])", file=sys.stderr)
        return 2
    explicit = bool(args.api_url)
    api_url, token = command_endpoint(args.api_url, args.token, cfg.api_url, cfg.data_dir,
                                      token_file=cfg.api.harness_token_file or None)
    spec = RunSpec(cmd=cmd, allow=list(args.allow or []), secrets=list(args.secret or []),
                   databases=list(args.database or []), workload=args.workload, ttl_s=args.ttl_s, isolate=args.isolate)
    try:
        return asyncio.run(run(spec, api_url=api_url, token=token, explicit_url=explicit,
                               config=str(cfg.path) if cfg.path else None))
    except RunError as exc:
        print(f"sandgate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
