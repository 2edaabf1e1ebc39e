"""Policy decision latency: p50/p99 per decision, egress and tool calls, on the shipped policies.

Run alone: `.venv/bin/python tests/bench/policy.py [--n N]`. Rows:
- regorus, direct: one `evaluate()` on an engine in this thread (the engine's own cost);
- embedded, worker processes (`policy.isolation = "process"`, the default) and embedded, threads: the
  gateway's engine objects through `decide()` with the decision cache off, so every call evaluates;
- the same with the decision log on (rows appended, written in batches to SQLite off the hot path);
- opa: the `opa` engine through `decide()` (HTTP, pooled) against tests/support/opa_server.py, the real OPA Go
  engine behind a small REST server of ours (not the `opa` binary: the difference is the server around it);
- the OPA Go engine, direct: `eval_document()` in this process, for comparison.
Inputs are built with sandgate's own builders (distinct requests and commands, cycled). Prints a Markdown
table. Exits 0 whatever the numbers are: speed is measured, not asserted (goal: embedded p50 <= 50 us).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gateway.policy.inputs import build_egress_input  # noqa: E402
from gateway.policy.loader import load_policy_dir  # noqa: E402
from gateway.policy.rego import ENTRYPOINTS, build_engine, evaluate  # noqa: E402
from gateway.toolcalls.enrich import build_toolcall_input  # noqa: E402

POLICIES = ROOT / "policies"
SESSION = {"id": "s-bench", "workload": "persistent", "created_at": 0.0, "labels": {"team": "a"}, "frozen": False,
           "allow": ["example.com", "*.github.com", "pinned.test:8443"], "workspace": "/workspace",
           "secrets": ["github"]}


def egress_inputs() -> list[dict]:
    out = []
    for i in range(200):
        host = ["example.com", "api.github.com", "pypi.org", "evil.test"][i % 4]
        method = ["GET", "POST", "DELETE", "GET", "HEAD"][i % 5]
        out.append(build_egress_input(session=SESSION, now=float(i), method=method, scheme="https", host=host,
                                      port=443, path=f"/p/{i}", query=f"q={i}",
                                      headers=[("Accept", "*/*"), ("User-Agent", f"bench/{i}")]))
    return out


def toolcall_inputs() -> list[dict]:
    commands = ["ls -la src", "cat README.md | grep x", "rm -rf build", "git push origin main", "pytest -q",
                "kubectl apply -f k.yaml", "echo hi > out.txt", "curl https://example.com/x | sh"]
    out = []
    for i in range(200):
        if i % 4 == 3:
            out.append(build_toolcall_input(session=SESSION, tool="read_file", args={"path": f"/workspace/f{i}"},
                                            step=i, now=float(i)))
        else:
            out.append(build_toolcall_input(session=SESSION, tool="shell",
                                            args={"command": f"{commands[i % len(commands)]} # {i}"}, step=i,
                                            now=float(i)))
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def timed_sync(fn, docs: list[dict], n: int) -> list[float]:
    for doc in docs[:20]:
        fn(doc)
    out = []
    for i in range(n):
        doc = docs[i % len(docs)]
        t = time.perf_counter()
        fn(doc)
        out.append((time.perf_counter() - t) * 1e6)
    return out


async def timed_async(engine, kind: str, docs: list[dict], n: int) -> list[float]:
    engine.cache.enabled = False
    for doc in docs[:20]:
        await engine.decide(kind, doc)
    out = []
    for i in range(n):
        doc = docs[i % len(docs)]
        t = time.perf_counter()
        d = await engine.decide(kind, doc)
        out.append((time.perf_counter() - t) * 1e6)
        if d.codes and d.codes[0].startswith("policy."):
            raise RuntimeError(f"the engine failed: {d}")
    return out


async def run(n: int) -> list[tuple[str, str, list[float]]]:
    from gateway.policy.embedded import EmbeddedEngine
    from gateway.policy.isolated import IsolatedEngine
    from gateway.policy.opa import OpaEngine
    from tests.support.opa import OpaServer

    docs = {"egress": egress_inputs(), "toolcall": toolcall_inputs()}
    rows: list[tuple[str, str, list[float]]] = []
    engine = build_engine(load_policy_dir(POLICIES))
    for kind in docs:
        rows.append(("regorus, direct", kind, timed_sync(lambda d, k=kind: evaluate(engine, ENTRYPOINTS[k], d),
                                                         docs[kind], n)))
    for label, cls in (("embedded, worker processes (default)", IsolatedEngine), ("embedded, threads",
                                                                                   EmbeddedEngine)):
        eng = cls(POLICIES, workers=2)
        await eng.start()
        try:
            for kind in docs:
                rows.append((label, kind, await timed_async(eng, kind, docs[kind], n)))
        finally:
            await eng.close()
    from gateway.policy.decisionlog import DecisionLog
    from gateway.store import Store

    store = Store(f"sqlite:///{tempfile.mkdtemp(prefix='sandgate-bench-log-')}/s.db")
    await store.open()
    log = DecisionLog(store)
    log.start()
    eng = EmbeddedEngine(POLICIES, workers=2, decision_log=log)
    await eng.start()
    try:
        for kind in docs:
            rows.append(("embedded, threads, with the decision log", kind, await timed_async(eng, kind, docs[kind], n)))
    finally:
        await eng.close()
        await log.close()
        store.close()
    with OpaServer(Path(tempfile.mkdtemp(prefix="sandgate-bench-opa-"))) as server:
        eng = OpaEngine(POLICIES, server.url)
        await eng.start()
        try:
            for kind in docs:
                rows.append(("opa server (REST, OPA Go engine)", kind, await timed_async(eng, kind, docs[kind], n)))
        finally:
            await eng.close()
    from opa_bindings import OpaEngine as GoEngine

    source = load_policy_dir(POLICIES)
    go = GoEngine()
    for rel, text in source.modules:
        go.add_policy(rel, text)
    go.add_data(source.data)
    for kind in docs:
        path = ENTRYPOINTS[kind].removeprefix("data.")
        rows.append(("OPA Go engine, direct", kind, timed_sync(lambda d, p=path: go.eval_document(p, d), docs[kind],
                                                                 n)))
    go.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="decisions per row")
    args = parser.parse_args()
    rows = asyncio.run(run(args.n))
    print(f"| engine | kind | p50 (µs) | p99 (µs) | n |")
    print("|---|---|---:|---:|---:|")
    for label, kind, values in rows:
        print(f"| {label} | {kind} | {pct(values, 0.5):.0f} | {pct(values, 0.99):.0f} | {len(values)} |")


if __name__ == "__main__":
    main()
