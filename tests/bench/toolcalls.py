"""Tool-call decision throughput: 16 concurrent harness clients against a real `sandgate serve`, audit on.

Run alone from the repository root:

    .venv/bin/python tests/bench/toolcalls.py            # 3 runs, spread printed (about 2 minutes)
    .venv/bin/python tests/bench/toolcalls.py --quick    # 1 short run (under 30 seconds)

It starts `sandgate serve` (its real CLI, default configuration: embedded regorus, the shipped policies,
SQLite store under a temporary data directory, decision log and audit on) and creates one session per client.
Each client is a coroutine on one keep-alive HTTP/1.1 connection that POSTs /v1/toolcalls with the harness
token, cycling through a mix of calls a coding agent makes (`ls`, `read_file`, `git status`, a `SELECT` with a
`WHERE`, `write_file`, and `rm -rf ./build`, which asks), every call with a new `step`, as a real harness sends
them. Only answers 200 count; anything else fails the run.

Figures: decisions/s (completed calls per second of wall time in the measured window, after a warm-up), p50
and p99 latency (send to last byte), and CPU per call for each process (sandgate's main process, each of its
policy worker processes, and this client): CPU seconds in the window divided by the calls completed in it.
At the end the audit rows are counted through the API to show the calls were persisted.

The same client and mix also run against a bare aiohttp app (it reads the JSON body and answers a fixed decision:
the ceiling of the API's own stack), on asyncio's loop and on uvloop, just before sandgate in every run; the
summary gives sandgate's rate as a ratio of each. `--mix wide` uses sixteen shapes of calls instead of six.

Nothing is asserted: speed is measured, not tested. Exits non-zero only when something fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.common import (  # noqa: E402
    Conn, _children, build_request, free_port, percentile, stop_process, wait_port,
)

CLIENTS = 16
GOAL_BARE = 0.5       # the ratio to a bare aiohttp app that answers a fixed decision

# The mix of the README's row (the shape): what a coding agent sends most, one call that asks.
MIX: list[tuple[str, dict]] = [
    ("shell", {"command": "ls"}),
    ("read_file", {"path": "/workspace/src/app.py"}),
    ("shell", {"command": "git status"}),
    ("sql", {"query": "SELECT id, name FROM users WHERE id = 7"}),
    ("write_file", {"path": "/workspace/src/app.py", "content": "print('hello')\n"}),
    ("shell", {"command": "rm -rf ./build"}),                               # asks
]
# `--mix wide`: sixteen shapes (shell of several kinds, file reads and writes, HTTP, SQL, a push that asks, a
# delete that is denied). Repeats are realistic (`git status`, `pytest`).
WIDE_MIX: list[tuple[str, dict]] = [
    ("shell", {"command": "ls -la src"}),
    ("shell", {"command": "git status"}),
    ("shell", {"command": "cat README.md | grep -n install"}),
    ("shell", {"command": "pytest -q tests/test_api.py"}),
    ("read_file", {"path": "/workspace/src/app.py"}),
    ("shell", {"command": "python -m pip install -r requirements.txt"}),
    ("write_file", {"path": "/workspace/src/app.py", "content": "print('hello')\n"}),
    ("shell", {"command": "git diff --stat"}),
    ("read_file", {"path": "/workspace/README.md"}),
    ("shell", {"command": "find . -name '*.py' | xargs wc -l"}),
    ("http_request", {"method": "GET", "url": "https://api.github.com/repos/o/r"}),
    ("shell", {"command": "git push origin main"}),                         # asks
    ("sql", {"query": "SELECT id, name FROM users WHERE id = 7"}),
    ("shell", {"command": "echo done > build/status.txt"}),
    ("shell", {"command": "rm -rf /"}),                                     # denied
    ("shell", {"command": "make test"}),
]
MIXES = {"six": MIX, "wide": WIDE_MIX}


class BenchError(RuntimeError):
    pass


@dataclass
class Mode:
    warmup_s: float
    window_s: float
    runs: int


FULL = Mode(warmup_s=2.0, window_s=8.0, runs=3)
QUICK = Mode(warmup_s=1.0, window_s=4.0, runs=1)


@dataclass
class Result:
    count: int = 0
    seconds: float = 0.0
    latencies: list = field(default_factory=list)
    cpu: dict = field(default_factory=dict)          # process label -> CPU seconds in the window
    actions: dict = field(default_factory=dict)
    stored: int = 0                                  # audit rows read back afterwards (2 sessions)
    by_call: dict = field(default_factory=dict)      # call of the mix -> its latencies (--by-call)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else float("nan")


def _cpu(pid: int, system: bool = False) -> float:
    """User + system CPU seconds of a process so far (system only: `system`)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[12]) + (0 if system else int(fields[11]))) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(pid: int, tid: int) -> float:
    """User + system CPU seconds of one thread of a process so far."""
    try:
        text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(sandgate_pid: int) -> dict:
    out = {"sandgate (main)": _cpu(sandgate_pid), "sandgate (main), in the kernel": _cpu(sandgate_pid, True),
           # the event loop runs on the process's first thread (tid = pid); the rest is the store's writer and
           # readers, the decision log's and parsing threads
           "sandgate (main), its loop thread": _thread_cpu(sandgate_pid, sandgate_pid)}
    for i, child in enumerate(sorted(_children(sandgate_pid))):
        out[f"sandgate child {i + 1} (pid {child})"] = _cpu(child)
    out["client (this process)"] = _cpu(os.getpid())
    return out


class Sandgate:
    """`sandgate serve` from this checkout, or from `tree` (another revision's files: `--baseline-ref`)."""

    def __init__(self, tmp: Path, tree: Path | None = None):
        self.tmp, self.tree = tmp, tree
        self.proc: subprocess.Popen | None = None
        self.log = open(tmp / "sandgate.log", "wb")

    def start(self, extra_toml: str = "") -> None:
        self.api_port, proxy_port = free_port(), free_port()
        self.data_dir = self.tmp / "data"
        cfg = self.tmp / "sandgate.toml"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.tree is not None:       # its own `gateway` first on the path, its own shipped policies
            env["PYTHONPATH"] = str(self.tree)
            extra_toml = f'[policy]\ndir = "{self.tree / "policies"}"\n' + extra_toml.replace("[policy]\n", "")
        cfg.write_text(f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\n[api]\nlisten = "127.0.0.1:{self.api_port}"\n'
                       + extra_toml)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir", str(self.data_dir)],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=str(self.tree or ROOT), env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"sandgate exited with {self.proc.returncode}:\n{self.tail()}")
            if (self.data_dir / "listen.json").exists():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/healthz", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
            time.sleep(0.1)
        else:
            raise BenchError(f"sandgate did not start:\n{self.tail()}")
        self.harness = (self.data_dir / "harness.token").read_text().strip()

    def tail(self, n: int = 3000) -> str:
        self.log.flush()
        return (self.tmp / "sandgate.log").read_text(errors="replace")[-n:]

    def call(self, method: str, path: str, body: dict | None = None) -> dict | list:
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {self.harness}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


BARE_ANSWER = {"id": "t_0000000000000000", "decision": "allow", "reasons": [], "codes": []}


def serve_bare(port: int, loop: str) -> None:
    """The ceiling of the API's own stack: a bare aiohttp app that reads the same JSON body and answers a fixed
    decision (no token check, no session, no policy, nothing stored). `loop`: "asyncio" (what `web.run_app`
    runs by default) or "uvloop" (sandgate's loop)."""
    from aiohttp import web

    async def toolcall(request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict) or "session" not in body:
            return web.json_response({"error": "bad_request"}, status=400)
        return web.json_response(BARE_ANSWER)

    app = web.Application()
    app.router.add_post("/v1/toolcalls", toolcall)
    if loop == "uvloop":
        import uvloop
        uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


class BareApp:
    """`serve_bare` in its own process, as the load generator sees a sandgate (port, token, pid)."""

    def __init__(self, loop: str):
        self.loop = loop
        self.api_port = free_port()
        self.harness = "bare"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-bare",
                                      str(self.api_port), "--bare-loop", loop])
        wait_port("127.0.0.1", self.api_port, self.proc)

    def stop(self) -> None:
        stop_process(self.proc)


async def load(sg: "Sandgate | BareApp", sessions: list[str], mode: Mode, mix: list[tuple[str, dict]]) -> Result:
    state = {"measuring": False, "stop": False}
    result = Result()
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {sg.harness}", "Content-Type": "application/json"}
    host = f"127.0.0.1:{sg.api_port}"

    async def client(n: int, sid: str) -> None:
        conn = Conn("127.0.0.1", sg.api_port)
        step = 0
        try:
            while not state["stop"]:
                tool, args = mix[(n + step) % len(mix)]
                step += 1
                body = json.dumps({"session": sid, "tool": tool, "args": args, "step": step}).encode()
                raw = build_request("POST", "/v1/toolcalls", host, headers, body)
                t0 = time.perf_counter()
                resp = await conn.request(raw)
                dt = time.perf_counter() - t0
                if resp.status != 200:
                    errors.append(f"HTTP {resp.status}: {resp.body[:300]!r}")
                    state["stop"] = True
                    return
                if state["measuring"]:
                    result.count += 1
                    result.latencies.append(dt)
                    result.by_call.setdefault(_label(tool, args), []).append(dt)
                    action = json.loads(resp.body)["decision"]
                    result.actions[action] = result.actions.get(action, 0) + 1
        finally:
            conn.close()

    tasks = [asyncio.create_task(client(i, sid)) for i, sid in enumerate(sessions)]
    try:
        await _sleep_unless_done(tasks, mode.warmup_s)
        cpu0 = cpu_snapshot(sg.proc.pid)
        t0 = time.perf_counter()
        state["measuring"] = True
        await _sleep_unless_done(tasks, mode.window_s)
        state["measuring"] = False
        result.seconds = time.perf_counter() - t0
        cpu1 = cpu_snapshot(sg.proc.pid)
        result.cpu = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
        state["stop"] = True
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        for t in tasks:
            t.cancel()
    if errors:
        raise BenchError(errors[0])
    return result


async def _sleep_unless_done(tasks: list[asyncio.Task], seconds: float) -> None:
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for t in done:
        if t.exception() is not None:
            raise t.exception()


def _label(tool: str, args: dict) -> str:
    return f"{tool} {args.get('command') or args.get('path') or args.get('url') or args.get('query') or ''}"[:48]


def cpu_per_call(res: Result, loop: bool = False) -> float:
    """µs of CPU per decided call: all of sandgate's processes, or only its main process's loop thread."""
    if loop:
        return res.cpu.get("sandgate (main), its loop thread", 0.0) * 1e6 / max(res.count, 1)
    return sum(v for k, v in res.cpu.items() if k.startswith("sandgate") and "kernel" not in k
               and "loop thread" not in k) * 1e6 / max(res.count, 1)


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}"
    return f"{min(values):,.0f}–{max(values):,.0f}"


def bare_run(loop: str, mode: Mode, mix: list[tuple[str, dict]]) -> Result | None:
    """The same load against the bare aiohttp app. None when something failed."""
    bare = BareApp(loop)
    try:
        return asyncio.run(load(bare, [f"s_{i}" for i in range(CLIENTS)], mode, mix))
    except (BenchError, OSError, asyncio.TimeoutError) as exc:
        print(f"bare aiohttp run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    finally:
        bare.stop()


def one_run(tree: Path | None, extra: str, mode: Mode, mix: list[tuple[str, dict]], profile: str = "",
            profile_opts: list | None = None) -> Result | None:
    """One sandgate (this checkout, or `tree`), 16 sessions, one load window. None when something failed."""
    with tempfile.TemporaryDirectory(prefix="sandgate-bench-tc-") as tmp:
        sg = Sandgate(Path(tmp), tree)
        try:
            sg.start(extra)
            sessions = [sg.call("POST", "/v1/sessions", {"allow": ["api.github.com"]})["id"] for _ in range(CLIENTS)]
            spy = None
            if profile:           # py-spy (pip install py-spy) on sandgate's main process, collapsed stacks
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-f", "raw",
                                        "-r", "200", "-d", str(int(mode.warmup_s + mode.window_s)),
                                        "-p", str(sg.proc.pid), "-o", profile]
                                       + [o for opt in profile_opts or [] for o in shlex.split(opt)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            res = asyncio.run(load(sg, sessions, mode, mix))
            if spy is not None:
                spy.wait(60)
            time.sleep(1.0)                                    # let the audit writer flush its last batch
            res.stored = sum(len(sg.call("GET", f"/v1/events?session={sid}&kind=toolcall&limit=100000"))
                             for sid in sessions[:2])
            return res
        except (BenchError, OSError, asyncio.TimeoutError) as exc:
            print(f"tool-call bench failed: {type(exc).__name__}: {exc}\n--- sandgate log ---\n{sg.tail()}",
                  file=sys.stderr)
            return None
        finally:
            sg.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="sandgate tool-call decision throughput, against a bare aiohttp app")
    ap.add_argument("--quick", action="store_true", help="one short run (< 30 s)")
    ap.add_argument("--runs", type=int, help="number of runs (default 3, --quick 1)")
    ap.add_argument("--mix", choices=sorted(MIXES), default="six",
                    help="six: ls, read_file, git status, SELECT ... WHERE, write_file, rm -rf ./build (asks); "
                         "wide: sixteen shapes")
    ap.add_argument("--isolation", choices=("process", "thread"), help="policy.isolation (default: sandgate's)")
    ap.add_argument("--baseline-ref", default="", help="also run sandgate at this git revision, side by side")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare aiohttp apps")
    ap.add_argument("--toml", default="", help="extra sandgate configuration (TOML text), e.g. an experiment's")
    ap.add_argument("--by-call", action="store_true", help="also print p50/p99 of each call of the mix")
    ap.add_argument("--profile", default="", help="run sandgate under py-spy, collapsed stacks to this file")
    ap.add_argument("--profile-opts", nargs="*", default=[], help="extra py-spy options, e.g. --profile-opts='--gil' or '--idle --native'")
    ap.add_argument("--serve-bare", type=int, default=0, help=argparse.SUPPRESS)   # the bare app's own process
    ap.add_argument("--bare-loop", default="asyncio", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_bare:
        serve_bare(args.serve_bare, args.bare_loop)
        return 0
    mode = QUICK if args.quick else FULL
    runs = args.runs or mode.runs
    mix = MIXES[args.mix]
    extra = ""
    if args.isolation:
        extra = f'[policy]\nisolation = "{args.isolation}"\n'
    if args.toml:
        extra += args.toml.replace("\\n", "\n") + "\n"
    load0 = os.getloadavg()[0]
    print(f"tool-call bench ({'quick' if args.quick else 'full'}, mix {args.mix}): {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {CLIENTS} clients, load average {load0:.2f}", flush=True)
    t_start = time.perf_counter()
    results: list[Result] = []
    base_rates: list[float] = []
    bare_rates: dict[str, list[float]] = {} if args.no_bare else {"asyncio": [], "uvloop": []}
    with tempfile.TemporaryDirectory(prefix="sandgate-bench-base-") as base_tmp:
        tree = None
        if args.baseline_ref:
            tree = Path(base_tmp)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for run in range(runs):
            for loop, rates_of in bare_rates.items():     # the bare apps first, then the baseline, then ours
                bare = bare_run(loop, mode, mix)
                if bare is None:
                    return 1
                rates_of.append(bare.rate)
                cpu, kernel = (bare.cpu[k] * 1e6 / max(bare.count, 1)
                               for k in ("sandgate (main)", "sandgate (main), in the kernel"))
                print(f"  run {run + 1} bare aiohttp ({loop}): {bare.rate:,.0f} answers/s, "
                      f"p50 {percentile(bare.latencies, 50) * 1e3:.2f} ms, {cpu:.0f} µs CPU per call "
                      f"({kernel:.0f} in the kernel)", flush=True)
            if tree is not None:
                base = one_run(tree, extra, mode, mix, "")
                if base is None:
                    return 1
                base_rates.append(base.rate)
                print(f"  run {run + 1} baseline ({args.baseline_ref}): {base.rate:,.0f} decisions/s, "
                      f"{cpu_per_call(base):.0f} µs CPU per call (all of sandgate; "
                      f"{cpu_per_call(base, loop=True):.0f} on its loop thread)", flush=True)
            res = one_run(None, extra, mode, mix, args.profile, args.profile_opts)
            if res is None:
                return 1
            results.append(res)
            cpu, loop_cpu = cpu_per_call(res), cpu_per_call(res, loop=True)
            print(f"  run {run + 1}: {res.rate:,.0f} decisions/s, {cpu:.0f} µs CPU per call (all of sandgate; "
                  f"{loop_cpu:.0f} on its loop thread), "
                  f"p50 {percentile(res.latencies, 50) * 1e3:.2f} ms, "
                  f"p99 {percentile(res.latencies, 99) * 1e3:.2f} ms, {res.actions}, "
                  f"{res.stored} audit rows stored for 2 of the sessions", flush=True)

    rates = [r.rate for r in results]
    mid = sorted(results, key=lambda r: r.rate)[len(results) // 2]
    p50 = statistics.median(percentile(r.latencies, 50) * 1e3 for r in results)
    p99 = statistics.median(percentile(r.latencies, 99) * 1e3 for r in results)
    print("\nDetail (the median run):\n")
    print("| figure | value |")
    print("| --- | ---: |")
    print(f"| tool-call p50 latency (ms), median of the runs | {p50:.2f} |")
    print(f"| tool-call p99 latency (ms), median of the runs | {p99:.2f} |")
    for name, secs in mid.cpu.items():
        print(f"| CPU per call, {name} (µs) | {secs * 1e6 / max(mid.count, 1):.0f} |")
    print(f"| decisions (allow/ask/deny) | {mid.actions.get('allow', 0)}/{mid.actions.get('ask', 0)}/"
          f"{mid.actions.get('deny', 0)} |")
    if args.by_call:
        print("\nLatency of each call of the mix (the median run):\n")
        print("| call | p50 (ms) | p99 (ms) |")
        print("| --- | ---: | ---: |")
        for label, lat in sorted(mid.by_call.items(), key=lambda kv: -percentile(kv[1], 50)):
            print(f"| `{label}` | {percentile(lat, 50) * 1e3:.2f} | {percentile(lat, 99) * 1e3:.2f} |")
    print("\nSummary (the README's table):\n")
    print(f"| figure | goal | ours | baseline | ratio | spread ({len(rates)} run{'s' if len(rates) > 1 else ''}) |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for loop, bare in bare_rates.items():
        ratios = [o / b for o, b in zip(rates, bare) if b > 0]
        print(f"| tool-call decisions/s | ≥ {GOAL_BARE:.1f}× bare aiohttp | {statistics.median(rates):,.0f} | "
              f"{statistics.median(bare):,.0f} (bare aiohttp, {loop}) | {statistics.median(ratios):.2f}× | "
              f"{min(ratios):.2f}×–{max(ratios):.2f}× (ours {spread(rates)}) |")
    if base_rates:
        ratios = [o / b for o, b in zip(rates, base_rates) if b > 0]
        print(f"| tool-call decisions/s | | {statistics.median(rates):,.0f} | "
              f"{statistics.median(base_rates):,.0f} ({args.baseline_ref}) | {statistics.median(ratios):.2f}× | "
              f"{min(ratios):.2f}×–{max(ratios):.2f}× (ours {spread(rates)}) |")
    if not bare_rates and not base_rates:
        print(f"| tool-call decisions/s | | {statistics.median(rates):,.0f} | | | {spread(rates)} |")
    print()
    print(f"- {CLIENTS} clients, one keep-alive connection and one session each, every call a new `step`; mix "
          f"{args.mix} ({len(mix)} calls); {mode.window_s:g} s window after {mode.warmup_s:g} s warm-up; the median "
          "run's CPU rows.")
    print("- bare aiohttp: the same client and mix against an aiohttp app that reads the JSON body and answers a "
          "fixed decision (asyncio: web.run_app's default loop; uvloop: sandgate's loop), just before ours in "
          "every run. With --baseline-ref REF, also sandgate at REF (its files from `git archive`, this venv). "
          "Ratio = ours ÷ baseline, run by run.")
    print(f"- client and server share {os.cpu_count()} CPUs (load average {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} now); total wall time {time.perf_counter() - t_start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
