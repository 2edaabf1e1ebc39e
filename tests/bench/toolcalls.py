"""Tool-call decision throughput: 16 concurrent harness clients against a real `sandgate serve`, audit on.

Run alone from the repository root:

    .venv/bin/python tests/bench/toolcalls.py            # 3 runs, spread printed (about 1 minute)
    .venv/bin/python tests/bench/toolcalls.py --quick    # 1 short run (under 30 seconds)

It starts `sandgate serve` (its real CLI, default configuration: embedded regorus, the shipped policies,
SQLite store under a temporary data directory, decision log and audit on) and creates one session per client.
Each client is a coroutine on one keep-alive HTTP/1.1 connection that POSTs /v1/toolcalls with the harness
token, cycling through a mix of calls a coding agent makes (shell commands of several shapes, file reads and
writes, HTTP requests, SQL, a push that asks, a destructive command that is denied), every call with a new
`step`, as a real harness sends them. Only answers 200 count; anything else fails the run.

Figures: decisions/s (completed calls per second of wall time in the measured window, after a warm-up), p50
and p99 latency (send to last byte), and CPU per call for each process (sandgate's main process, each of its
policy worker processes, and this client): CPU seconds in the window divided by the calls completed in it.
At the end the audit rows are counted through the API to show the calls were persisted.

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
    Conn, _children, build_request, free_port, percentile, stop_process,
)

CLIENTS = 16
GOAL = 3000.0
WAVE1 = 300.0          # issue 12: the wave-1 code, same machine, 16 clients

# (tool, args) a coding agent sends; the mix of the benchmark. Repeats are realistic (`git status`, `pytest`).
MIX: list[tuple[str, dict]] = [
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


def _cpu(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(sandgate_pid: int) -> dict:
    out = {"sandgate (main)": _cpu(sandgate_pid)}
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


async def load(sg: Sandgate, sessions: list[str], mode: Mode) -> Result:
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
                tool, args = MIX[(n + step) % len(MIX)]
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


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}"
    return f"{min(values):,.0f}–{max(values):,.0f}"


def one_run(tree: Path | None, extra: str, mode: Mode, profile: str = "", profile_opts: list | None = None
            ) -> Result | None:
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
            res = asyncio.run(load(sg, sessions, mode))
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
    ap = argparse.ArgumentParser(description="sandgate tool-call decision throughput")
    ap.add_argument("--quick", action="store_true", help="one short run (< 30 s)")
    ap.add_argument("--runs", type=int, help="number of runs (default 3, --quick 1)")
    ap.add_argument("--isolation", choices=("process", "thread"), help="policy.isolation (default: sandgate's)")
    ap.add_argument("--baseline-ref", default="", help="also run sandgate at this git revision, side by side")
    ap.add_argument("--by-call", action="store_true", help="also print p50/p99 of each call of the mix")
    ap.add_argument("--profile", default="", help="run sandgate under py-spy, collapsed stacks to this file")
    ap.add_argument("--profile-opts", nargs="*", default=[], help="extra py-spy options, e.g. --profile-opts='--gil' or '--idle --native'")
    args = ap.parse_args(argv)
    mode = QUICK if args.quick else FULL
    runs = args.runs or mode.runs
    extra = ""
    if args.isolation:
        extra = f'[policy]\nisolation = "{args.isolation}"\n'
    print(f"tool-call bench ({'quick' if args.quick else 'full'}): {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {CLIENTS} clients, load average {os.getloadavg()[0]:.2f}",
          flush=True)
    t_start = time.perf_counter()
    results: list[Result] = []
    base_rates: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sandgate-bench-base-") as base_tmp:
        tree = None
        if args.baseline_ref:
            tree = Path(base_tmp)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for run in range(runs):
            if tree is not None:        # the baseline first, then ours, in every run
                base = one_run(tree, extra, mode, "")
                if base is None:
                    return 1
                base_rates.append(base.rate)
                print(f"  run {run + 1} baseline ({args.baseline_ref}): {base.rate:,.0f} decisions/s", flush=True)
            res = one_run(None, extra, mode, args.profile, args.profile_opts)
            if res is None:
                return 1
            results.append(res)
            print(f"  run {run + 1}: {res.rate:,.0f} decisions/s, p50 {percentile(res.latencies, 50) * 1e3:.2f} ms, "
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
    if base_rates:
        ratios = [o / b for o, b in zip(rates, base_rates) if b > 0]
        print(f"| tool-call decisions/s | ≥ {GOAL:,.0f} | {statistics.median(rates):,.0f} | "
              f"{statistics.median(base_rates):,.0f} ({args.baseline_ref}) | {statistics.median(ratios):.1f}× | "
              f"{min(ratios):.1f}×–{max(ratios):.1f}× (ours {spread(rates)}) |")
    else:
        print(f"| tool-call decisions/s | ≥ {GOAL:,.0f} | {statistics.median(rates):,.0f} | {WAVE1:,.0f} (wave 1, "
              f"issue 12) | {statistics.median(rates) / WAVE1:.1f}× | {spread(rates)} |")
    print()
    print(f"- {CLIENTS} clients, one keep-alive connection and one session each, every call a new `step`; "
          f"{mode.window_s:g} s window after {mode.warmup_s:g} s warm-up; the median run's CPU rows.")
    print("- baseline: with --baseline-ref REF, the same load on sandgate at REF (its files from `git archive`, "
          "this venv), run just before ours in every run; without it, the wave-1 figure from issue 12. "
          "Ratio = ours ÷ baseline.")
    print(f"- client and sandgate share {os.cpu_count()} CPUs (load average now {os.getloadavg()[0]:.2f}); "
          f"total wall time {time.perf_counter() - t_start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
