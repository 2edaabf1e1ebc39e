"""The tamper-evident audit trail's costs: throughput with the chain against the code before it, side by side,
and `sandgate audit verify` on a 100k-row trail.

Run alone: `.venv/bin/python tests/bench/audit.py [--baseline-ref REF] [--rounds N] [--rows N]`.
- Side by side: `sandgate serve` from this checkout and from REF (its files from `git archive`, run with this
  venv: default the commit before the chain), started alternately, each round measuring (1) egress small GETs
  through the proxy (8 keep-alive connections, one session, every request audited) and (2) tool calls (16
  keep-alive connections POSTing /v1/toolcalls, audited). Medians over the rounds; ratio = ours / baseline.
- Verify: N rows (default 100k) appended by the real audit writer (`Store.append_events`, batches of 100, as the
  audit log writes them: the chain computed on the writer's thread), then the real `sandgate audit verify`.
Prints a Markdown table. Nothing is asserted: speed is measured, not tested.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from common import Conn, build_request, free_port, serve_upstream, stop_process, wait_port  # noqa: E402

DEFAULT_BASELINE = "b773abe"       # main before the package firewall and the chain


def baseline_tree(ref: str, tmp: Path) -> Path:
    tree = tmp / f"tree-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


class Serve:
    def __init__(self, tmp: Path, tree: Path | None, up_port: int):
        self.tmp, self.tree = tmp, tree
        self.proxy, self.api = free_port(), free_port()
        self.data = tmp / "data"
        cfg = tmp / "sandgate.toml"
        policy = f'[policy]\ndir = "{tree / "policies"}"\n' if tree else ""
        cfg.write_text(f'[proxy]\nlisten = "127.0.0.1:{self.proxy}"\n[api]\nlisten = "127.0.0.1:{self.api}"\n'
                       '[egress]\nprivate_allow = ["127.0.0.0/8"]\nresolve = {"allowed.test" = ["127.0.0.1"]}\n'
                       + policy)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if tree:
            env["PYTHONPATH"] = str(tree)
        self.log = open(tmp / "sandgate.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir",
                                      str(self.data)], stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=str(tree or ROOT), env=env)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((tmp / "sandgate.log").read_text()[-2000:])
            if (self.data / "listen.json").exists():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.api}/healthz", timeout=2):
                        break
                except OSError:
                    pass
            time.sleep(0.1)
        self.harness = (self.data / "harness.token").read_text().strip()
        self.up_port = up_port

    def session(self) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.api}/v1/sessions", method="POST",
                                     data=json.dumps({"allow": ["allowed.test"]}).encode(),
                                     headers={"Authorization": f"Bearer {self.harness}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


async def load(port: int, make, concurrency: int, warmup: float, window: float) -> float:
    counter = itertools.count()
    state = {"measuring": False, "stop": False, "count": 0}

    async def worker() -> None:
        conn = Conn("127.0.0.1", port)
        try:
            while not state["stop"]:
                resp = await conn.request(make(next(counter)))
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {resp.body[:200]!r}")
                if state["measuring"]:
                    state["count"] += 1
        finally:
            conn.close()
    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    await asyncio.sleep(warmup)
    state["measuring"] = True
    t0 = time.perf_counter()
    await asyncio.sleep(window)
    state["measuring"] = False
    elapsed = time.perf_counter() - t0
    state["stop"] = True
    await asyncio.gather(*tasks)
    return state["count"] / elapsed


async def measure(serve: Serve, window: float) -> tuple[float, float]:
    import base64

    sess = serve.session()
    auth = "Basic " + base64.b64encode(f"sandgate:{sess['token']}".encode()).decode()
    host = f"allowed.test:{serve.up_port}"
    egress = await load(serve.proxy, lambda i: build_request("GET", f"http://{host}/small?n={i}", host,
                                                              {"Proxy-Authorization": auth}), 8, 1.0, window)
    tools = await load(serve.api, lambda i: build_request(
        "POST", "/v1/toolcalls", f"127.0.0.1:{serve.api}",
        {"Authorization": f"Bearer {serve.harness}", "Content-Type": "application/json"},
        json.dumps({"session": sess["id"], "tool": "shell", "args": {"command": f"ls -la src/{i % 50}"},
                    "step": i}).encode()), 16, 1.0, window)
    return egress, tools


async def verify_rows(n: int, tmp: Path) -> tuple[float, float, str]:
    from gateway.store import Store

    data = tmp / "verify-data"
    data.mkdir()
    store = Store(f"sqlite:///{data / 'sandgate.db'}")
    await store.open()
    try:
        t0 = time.perf_counter()
        for start in range(0, n, 100):
            await store.append_events([{
                "session": f"s{i % 20}", "step": i, "kind": "egress" if i % 2 else "toolcall", "action": "allow",
                "reasons": ["example.com is allowed for this session"], "codes": ["egress.allowed"],
                "request_id": f"r{i}", "method": "GET", "host": "example.com", "path": f"/x/{i}", "http_status": 200,
                "bytes_in": 100, "bytes_out": 0, "policy_rev": "abc", "detail": {"secrets": [], "n": i},
                "ts": time.time()} for i in range(start, min(n, start + 100))])
        write_s = time.perf_counter() - t0
    finally:
        store.close()
    from gateway.audit.checkpoints import load_or_create_audit_key

    load_or_create_audit_key(data)
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "gateway", "audit", "verify", "--data-dir", str(data)],
                         capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return write_s, time.perf_counter() - t0, f"{(out.stdout or out.stderr).strip()} (CPU {cpu:.1f} s)"


def chain_cost_us(n: int = 20000) -> float:
    """What chaining adds per row, load-independent: `chained` over rows shaped like egress audit rows."""
    from gateway.store.chain import GENESIS_PREV, chained

    batch = [{"session": "s_0123456789ab", "step": i, "kind": "egress", "action": "allow", "seq": i,
              "reasons": ["example.com is allowed for this session"], "codes": ["egress.allowed"],
              "request_id": f"f{i:032x}", "method": "GET", "host": "example.com", "path": f"/x/{i}",
              "http_status": 200, "bytes_in": 100, "bytes_out": 0, "policy_rev": "0123456789ab",
              "detail": {"secrets": ["github@header:authorization"]}, "ts": 1.7e9 + i} for i in range(100)]
    t0 = time.process_time()
    for _ in range(n // 100):
        for _ in chained(batch, 0, GENESIS_PREV):
            pass
    return (time.process_time() - t0) / n * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-ref", default=DEFAULT_BASELINE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        if not args.skip_throughput:
            up_port = free_port()
            upstream = subprocess.Popen([sys.executable, str(HERE / "common.py"), "upstream", "--port", str(up_port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port("127.0.0.1", up_port, upstream)
            tree = baseline_tree(args.baseline_ref, tmp)
            results: dict[str, list[tuple[float, float]]] = {"ours": [], "baseline": []}
            try:
                for r in range(args.rounds):
                    for label, t in (("ours", None), ("baseline", tree)) if r % 2 == 0 else \
                            (("baseline", tree), ("ours", None)):
                        run_dir = tmp / f"{label}-{r}"
                        run_dir.mkdir()
                        serve = Serve(run_dir, t, up_port)
                        try:
                            results[label].append(await measure(serve, args.window))
                        finally:
                            serve.stop()
                        print(f"round {r} {label}: egress {results[label][-1][0]:.0f} req/s, tool calls "
                              f"{results[label][-1][1]:.0f}/s (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            finally:
                stop_process(upstream)
            for i, name in enumerate(("egress small GET, req/s (c=8)", "tool calls/s (c=16)")):
                ours = statistics.median(x[i] for x in results["ours"])
                base = statistics.median(x[i] for x in results["baseline"])
                rows.append((name, f"{ours:.0f}", f"{base:.0f} ({args.baseline_ref}, before the chain)",
                             f"{ours / base:.2f}"))
        rows.append(("the chain's own CPU per audit row (canonical JSON + SHA-256, writer thread)",
                     f"{chain_cost_us():.1f} µs", "", ""))
        write_s, verify_s, said = await verify_rows(args.rows, tmp)
        print(said, file=sys.stderr)
        rows.append((f"{args.rows // 1000}k rows written by the audit writer (chain on)", f"{write_s:.1f} s", "", ""))
        rows.append((f"`sandgate audit verify`, {args.rows // 1000}k rows, wall (load {os.getloadavg()[0]:.0f})",
                     f"{verify_s:.1f} s", "10 s", f"{verify_s / 10:.2f}"))
        rows.append((f"`sandgate audit verify`, {args.rows // 1000}k rows, CPU of the process",
                     said.rsplit("(CPU ", 1)[-1].rstrip(")"), "10 s", ""))
    print("| figure | ours | baseline | ratio |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    asyncio.run(main())
