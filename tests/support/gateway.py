"""Run a real `sandgate serve` process for tests and talk to it through its real interfaces."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from tests.support import zygote
from tests.support.upstream import free_port

ROOT = Path(__file__).resolve().parents[2]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def write_toml(path: Path, config: dict) -> None:
    lines = []

    def section(prefix: str, table: dict) -> None:
        scalars = {k: v for k, v in table.items() if not (isinstance(v, dict) and k != "resolve")}
        if prefix:
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {toml_value(v)}")
        for k, v in table.items():
            if isinstance(v, dict) and k != "resolve":
                section(f"{prefix}.{k}" if prefix else k, v)

    section("", config)
    path.write_text("\n".join(lines) + "\n")


# Set by tests/conftest.py as each test is set up: whether it is in the end-to-end tier. Outside pytest (the
# benchmarks) every start is allowed.
TIER = {"e2e": True}

# SANDGATE_TEST_STARTS=FILE: every start appends one JSON line to FILE (the test that asked for it, how long it took
# to listen, its configuration's digest), so `python -m tests.support.durations starts FILE` counts starts per file
# and shows which share a configuration (docs/testing.md, Durations).
STARTS_LOG = os.environ.get("SANDGATE_TEST_STARTS")


def record_start(what: str, seconds: float, **detail: Any) -> None:
    """Append one start of an expensive process (a sandgate, bao, a cluster, a browser) to SANDGATE_TEST_STARTS."""
    if not STARTS_LOG:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    line = json.dumps({"what": what, "test": test, "seconds": round(seconds, 3), "pid": os.getpid(), **detail})
    with open(STARTS_LOG, "a") as out:          # one short write per line: lines of parallel workers never mix
        out.write(line + "\n")


# Whether starts may fork from the test process's zygote (tests/support/zygote.py) rather than exec a fresh
# interpreter: set by tests/conftest.py, so the benchmarks (outside pytest) always run a real process.
# SANDGATE_TEST_EXEC=1 makes every start a real process.
FORK = {"on": False}


def fork_refusal(python: str, serve_args: list[str]) -> str | None:
    """Why this start execs a real process rather than forking the zygote (None: it may fork)."""
    if not FORK["on"]:
        return "outside pytest"
    if os.environ.get("SANDGATE_TEST_EXEC") == "1":
        return "SANDGATE_TEST_EXEC=1"
    if python != sys.executable:
        return "another interpreter's install"
    return None


def gateway_cli(*args: str, env: dict | None = None, input: str | None = None, cwd: str | Path | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`subprocess.run([python, "-m", "gateway", *args], capture_output=True, text=True, ...)` for a test that runs
    a CLI process for its output: forked from the zygote where a sandgate start would be (its ~1 s of imports
    already done), else a real process. `env` replaces the environment, as subprocess.run's does; PYTHONUNBUFFERED
    is set (as the zygote's), which changes when output is written, not what. A forked command leaves without
    tearing its modules down (SANDGATE_TEST_QUICK_EXIT=1, docs/testing.md) unless `env` sets that variable ("":
    the whole shutdown): every command leaves what it made committed, closed or removed before it returns."""
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    cwd = str(cwd or os.getcwd())
    if fork_refusal(sys.executable, []) is None:
        server = zygote.client(START_TIMEOUT_S)
        if server is not None and server.forks(env):
            done = run_forked(server, list(args), {"SANDGATE_TEST_QUICK_EXIT": "1", **env}, cwd, input, timeout)
            if done is not None:
                return done
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, input=input,
                          env=env, cwd=cwd, timeout=timeout)


def run_forked(server, args: list[str], env: dict, cwd: str, input: str | None,
               timeout: float | None) -> subprocess.CompletedProcess | None:
    """`python -m gateway ARGS` forked from `server` (a zygote client), as subprocess.run(..., text=True) reports
    it; None when the zygote went away (the caller then runs a real process)."""
    try:
        done = zygote.run(server, args, env, cwd, None if input is None else input.encode(), timeout)
    except zygote.ZygoteGone:
        return None
    return subprocess.CompletedProcess([sys.executable, "-m", "gateway", *args], done.returncode,
                                       done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


# How long `Sandgate.start` waits for a sandgate to listen. A loaded machine (a parallel `make test` on 2 cores) can
# take a minute to import and start one: a start that is slow is not a failure; one that exits or never listens is.
# The wait stays below pytest's own timeout (pyproject: 120 s), so that a start that never ends fails with the
# sandgate's log rather than a bare timeout.
START_TIMEOUT_S = 100.0


def process_cpu(pid: int) -> float | None:
    """User+system CPU seconds a process has used so far (/proc/PID/stat), None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 3)


class Sandgate:
    """A sandgate process. `config` is merged into a loopback-friendly test configuration."""

    def __init__(self, tmp: Path, config: dict | None = None, env: dict | None = None,
                 proxy_host: str = "127.0.0.1", python: str = sys.executable, serve_args: tuple[str, ...] = ()):
        self.serve_args = list(serve_args)          # extra `sandgate serve` arguments, e.g. ("--workers", "2")
        self.python = python            # the interpreter whose installed sandgate runs (default: this one)
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.data_dir = tmp / "data"
        self.proxy_port = free_port(proxy_host)
        self.api_port = free_port()
        self.proxy_host = proxy_host
        base = {
            "proxy": {"listen": f"{proxy_host}:{self.proxy_port}"},
            "api": {"listen": f"127.0.0.1:{self.api_port}"},
        }
        for key, val in (config or {}).items():
            base[key] = {**base.get(key, {}), **val} if isinstance(val, dict) else val
        self.config = base
        self.config_path = tmp / "sandgate.toml"
        # what decides the started process's behaviour, ports and this start's own paths left out: starts with
        # one digest could share one process (SANDGATE_TEST_STARTS)
        self.digest = hashlib.sha256(json.dumps([config, sorted((env or {}).items()), self.serve_args, proxy_host],
                                                sort_keys=True, default=str).replace(str(tmp.parent), "TMP")
                                     .encode()).hexdigest()[:12]
        write_toml(self.config_path, base)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.log_path = tmp / "sandgate.log"
        self.proc: subprocess.Popen | zygote.Forked | None = None
        self.forked = False         # whether the last start forked the zygote (else: a real process, exec_reason)
        self.exec_reason: str | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> "Sandgate":
        if not TIER["e2e"]:
            raise RuntimeError("a sandgate process started for a test outside the end-to-end tier (`make test-fast` "
                               "runs it): move the test to a file named *_e2e.py (docs/testing.md)")
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("this sandgate is already running")
        listen = self.data_dir / "listen.json"
        if listen.exists():
            listen.unlink()
        began = time.monotonic()
        self._log = open(self.log_path, "ab")
        args = ["serve", "--config", str(self.config_path), "--data-dir", str(self.data_dir), *self.serve_args]
        self.proc = self._fork(args)
        if self.proc is None:
            self.proc = subprocess.Popen([self.python, "-m", "gateway", *args], stdout=self._log, stderr=self._log,
                                         env=self.env, cwd=str(self.tmp))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandgate exited: {self.log()}")
            if listen.exists():
                try:
                    if requests.get(self.api + "/healthz", timeout=2).ok:
                        break
                except requests.RequestException:
                    pass
            time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"sandgate did not start: {self.log()}")
        self.start_cpu = process_cpu(self.proc.pid)
        # the harness token: DATA_DIR/harness.token, or the file `api.harness_token_file` names
        token_file = self.config.get("api", {}).get("harness_token_file") or self.data_dir / "harness.token"
        self.harness_token = Path(token_file).read_text().strip()
        self.started_at = time.time()           # this start's harness token was minted before it
        record_start("sandgate", time.monotonic() - began, config=self.digest, args=self.serve_args,
                     own_python=self.python != sys.executable, forked=self.forked, exec_reason=self.exec_reason,
                     cpu=self.start_cpu)
        return self

    def _zygote(self) -> "zygote.Client | None":
        """The zygote this start forks from, or None: a real process runs instead (the reason in
        `self.exec_reason`)."""
        self.forked = False
        self.exec_reason = fork_refusal(self.python, self.serve_args)
        if self.exec_reason is not None:
            return None
        server = zygote.client(START_TIMEOUT_S)
        if server is None:
            self.exec_reason = f"no zygote: {zygote.failure()}"
            return None
        if not server.forks(self.env):
            self.exec_reason = "an environment variable read at import differs from the zygote's"
            return None
        return server

    def _fork(self, args: list[str]) -> "zygote.Forked | None":
        """`python -m gateway ARGS` forked from this test process's zygote, or None: a real process runs instead
        (the reason in `self.exec_reason`), as it does when the zygote cannot start or fork."""
        server = self._zygote()
        if server is None:
            return None
        try:
            # it leaves without tearing its modules down (SANDGATE_TEST_QUICK_EXIT, docs/testing.md) unless `env`
            # sets that variable: `serve` stops cleanly before it returns (its exit stack: store, audit, listeners)
            proc = server.spawn(args, {"SANDGATE_TEST_QUICK_EXIT": "1", **self.env}, str(self.tmp),
                                self._log.fileno())
        except zygote.ZygoteGone as exc:
            self.exec_reason = f"the zygote could not fork: {exc}"
            return None
        self.forked = True
        return proc

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # `serve --workers N` gives its workers 15 s to stop before it kills them (gateway/cli/workers.py), and a busy
    # machine takes its time to flush and close: a stop is a failure when it never ends, not when it is slow.
    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._log.close()

    def __enter__(self) -> "Sandgate":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- API helpers -----------------------------------------------------------------------------
    def token(self, role: str, name: str, ttl_s: int | None = None) -> str:
        """A token signed with this sandgate's key, as `sandgate token` mints it. Minted here, in this process,
        when the sandgate runs this interpreter's gateway: a `sandgate token` process costs about 0.6 s of CPU
        (and seconds of waiting on a loaded machine) for what is one signature; the CLI itself is tested by
        tests/gateway/api/test_tokens_e2e.py. Another interpreter's install (the clean-install test) runs its CLI."""
        if self.python == sys.executable:
            from gateway.auth.tokens import DEFAULT_TTL_S, TokenSigner, load_or_create_key
            signer = TokenSigner(load_or_create_key(self.data_dir))
            return signer.mint(role, name, DEFAULT_TTL_S if ttl_s is None else ttl_s)
        cmd = [self.python, "-m", "gateway", "token", "--role", role, "--name", name,
               "--data-dir", str(self.data_dir), "--config", str(self.config_path)]
        if ttl_s is not None:
            cmd += ["--ttl-s", str(ttl_s)]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=self.env).stdout.strip()

    def call(self, method: str, path: str, token: str | None = None, **kw) -> requests.Response:
        headers = kw.pop("headers", {})
        headers["Authorization"] = f"Bearer {token or self.harness_token}"
        return requests.request(method, self.api + path, headers=headers, timeout=kw.pop("timeout", 30), **kw)

    def session(self, **body) -> dict:
        resp = self.call("POST", "/v1/sessions", json=body)
        assert resp.status_code == 201, resp.text
        sess = resp.json()
        ca = self.tmp / f"ca-{sess['id']}.pem"
        ca.write_text(sess["ca_pem"])
        sess["ca_file"] = str(ca)
        sess["proxies"] = {"http": sess["proxy_url"], "https": sess["proxy_url"]}
        return sess

    def events(self, session_id: str) -> list[dict]:
        resp = self.call("GET", f"/v1/events?session={session_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def rss_kb(self, field: str = "VmRSS") -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(field)
