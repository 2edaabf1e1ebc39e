"""The PostgreSQL gateway in one process: CPU a statement per thread, for comparing revisions under load.

    .venv/bin/python tests/bench/pg_inproc.py [--mode simple|prepared] [--statements N] [--profile FILE]

Run as root (the cluster runs as `postgres`). It starts a cluster of its own (`pgbench -i -s 1`), builds sandgate
as `serve` does (`gateway.app.open_gateway`, PostgreSQL gateway on, the shipped policies) on sandgate's event loop
in this process, creates one session with the database, and runs `pgbench -S -c 8 -j 2 -t N/8` through the
gateway (a subprocess: its CPU is not counted). After a warm-up run it counts each thread's CPU time over the
measured run (`pthread_getcpuclockid`) and prints µs a statement per thread: `loop` is the event loop (the wire
protocol, the gate), the rest are the store's writers, the decision log's and the policy's threads.

`--profile FILE`: cProfile over the measured run (pstats format; on Python 3.12 it sees every thread).
`--callgrind LIB`: under valgrind, count only the measured run's instructions (see tests/bench/toolcalls_inproc.py
for LIB).
`--steps 10000,50000,100000`: the measured run in steps (cumulative statement counts, one pgbench each); after
each step the process's RSS, the Python heap (`sys.getallocatedblocks`) and the size of each bounded structure a
statement can fill (`structures()`: what it holds against its cap). `--tracemalloc` adds a tracemalloc snapshot
at each step (traced from before the warm-up) and prints the top growth between consecutive steps by line; it
slows the loop about twofold, so read CPU figures from a run without it. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# --tree DIR: run another revision's gateway (its files first on sys.path, its shipped policies)
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve() if "--tree" in sys.argv else ROOT

from tests.bench.toolcalls_inproc import TIMED, Client, free_port, thread_cpu  # noqa: E402
from tests.support.pgcluster import APP_PASSWORD, PgCluster  # noqa: E402

if TREE != ROOT:
    sys.path.insert(0, str(TREE))


# --breakdown: the loop thread's CPU inside each of these (inclusive: nested ones count in both), by wrapping them
BREAKDOWN = ("gateway.postgres.gate:GateJudge.decide", "gateway.gates.toolcall:ToolCallGate.decide",
             "gateway.gates.toolcall:ToolCallGate._session_memory", "gateway.gates.toolcall:ToolCallGate._facts",
             "gateway.gates.toolcall:ToolCallGate._live_session", "gateway.policy.base:CachingEngine.decide",
             "gateway.policy.cache:DecisionCache.key", "gateway.postgres.server:StatementRecorder.statement",
             "gateway.toolcalls.enrich:toolcall_base", "gateway.sessions.registry:SessionRegistry.with_stats",
             "gateway.postgres.connection:Connection._on_bind", "gateway.postgres.connection:Connection._on_query",
             "gateway.postgres.connection:Connection._on_backend", "gateway.postgres.connection:Connection._finish",
             "gateway.postgres.connection:Connection._flush", "gateway.postgres.statements:split_statements",
             "gateway.gates.toolcall:wire_shape", "gateway.toolcalls.enrich:toolcall_facts")
SPENT: dict[str, list] = {}


def wrap_breakdown() -> None:
    import functools
    import importlib
    import inspect
    main = threading.main_thread()
    for spec in BREAKDOWN:
        module, _, qual = spec.partition(":")
        owner = importlib.import_module(module)
        *path, name = qual.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = getattr(owner, name)
        acc = SPENT.setdefault(qual, [0, 0])
        if inspect.iscoroutinefunction(fn):
            async def wrapper(*a, __fn=fn, __acc=acc, **kw):
                # a coroutine's CPU between its awaits is not separable here: counted from start to end on the
                # loop thread, which includes other tasks run meanwhile only when it awaits (rare on a cache hit)
                t = time.thread_time_ns()
                try:
                    return await __fn(*a, **kw)
                finally:
                    __acc[0] += time.thread_time_ns() - t
                    __acc[1] += 1
        else:
            def wrapper(*a, __fn=fn, __acc=acc, **kw):
                if threading.current_thread() is not main:
                    return __fn(*a, **kw)
                t = time.thread_time_ns()
                try:
                    return __fn(*a, **kw)
                finally:
                    __acc[0] += time.thread_time_ns() - t
                    __acc[1] += 1
        functools.update_wrapper(wrapper, fn)
        setattr(owner, name, wrapper)
        if module.endswith(".enrich") or (module.endswith(".gates.toolcall") and not path):
            import gateway.gates.toolcall as tc
            setattr(tc, name, wrapper)      # the gate calls these by the names it imported
        if module.endswith(".statements"):
            import gateway.postgres.connection as conn
            conn.statements.split_statements = wrapper


def decision_caches() -> list:
    """The policy engines' decision caches (hits and misses over the measured run)."""
    import gc
    from gateway.policy.cache import DecisionCache
    return [o for o in gc.get_objects() if isinstance(o, DecisionCache)]


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def memory_line() -> str:
    """RSS (anonymous and file-backed), glibc malloc's bytes in use and free-but-kept (mallinfo2: every arena),
    SQLite's own allocations (sqlite3_memory_used: page caches, prepared statements), the Python heap."""
    libc = ctypes.CDLL(None)
    mib = 1024 * 1024
    parts = [f"RSS {rss_kib() / 1024:.1f} MiB (anon {rss_kib('RssAnon') / 1024:.1f}, "
             f"file {rss_kib('RssFile') / 1024:.1f})"]
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
        m = libc.mallinfo2()
        parts.append(f"malloc in use {(m.uordblks + m.hblkhd) / mib:.1f} MiB, free kept {m.fordblks / mib:.1f} MiB")
    try:
        import _sqlite3
        lib = ctypes.CDLL(_sqlite3.__file__)
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        used = lib.sqlite3_memory_used()
        if used:                            # 0: this libsqlite3 keeps no count (SQLITE_DEFAULT_MEMSTATUS=0)
            parts.append(f"sqlite {used / mib:.1f} MiB")
    except (OSError, AttributeError):
        pass
    parts.append(f"heap blocks {sys.getallocatedblocks()}")
    parts.append(obmalloc())
    return ", ".join(parts)


def obmalloc() -> str:
    """Python's small-object allocator (objects of at most 512 bytes, outside malloc): its arenas' size, the bytes
    in blocks in use and in free blocks it keeps (sys._debugmallocstats, read off the C stderr)."""
    import re
    with tempfile.TemporaryFile("w+") as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()

    def field(name: str) -> int:
        m = re.search(r"# " + name + r"\s*=\s*([\d,]+)", text)
        return int(m.group(1).replace(",", "")) if m else 0
    mib = 1024 * 1024
    arenas = re.search(r"(\d+) arenas \* (\d+) bytes/arena", text)
    size = int(arenas.group(1)) * int(arenas.group(2)) if arenas else 0
    return (f"obmalloc arenas {size / mib:.1f} MiB (in blocks {field('bytes in allocated blocks') / mib:.1f}, "
            f"free blocks {field('bytes in available blocks') / mib:.1f})")


def structures() -> dict[str, str]:
    """What each bounded structure a wire statement can fill holds now, against its cap."""
    import gc
    out: dict[str, str] = {}

    def add(name: str, size: int, cap) -> None:
        out[name] = f"{size}/{cap}"

    from gateway.policy import decisionlog
    from gateway.policy.cache import _READS, DecisionCache
    from gateway.sessions.memory import SessionMemory
    from gateway.approvals.index import BindingIndex
    from gateway.toolcalls.memo import FactsMemo
    from gateway.toolcalls.sql import ShapeMemo
    info = decisionlog._redact_short.cache_info()
    add("decisionlog redaction memo", info.currsize, info.maxsize)
    for fn in ("_sensitive_key", "_key_text", "_sensitive_key_text"):
        info = getattr(decisionlog, fn).cache_info()
        add(f"decisionlog {fn}", info.currsize, info.maxsize)
    add("policy cache reads", len(_READS), 4)
    for o in gc.get_objects():
        cls = o.__class__
        if cls is DecisionCache:
            add(f"decision cache {id(o):x}", len(o._items), o.size)
        elif cls is decisionlog.DecisionLog:
            add("decision log written refs", len(o._written_refs), decisionlog.MAX_WRITTEN_REFS)
            add("decision log pending", len(o._decisions), o._max_pending)
        elif cls is ShapeMemo:
            add(f"sql shape memo {id(o):x}", len(o._items), o.size)
        elif cls is FactsMemo:
            add(f"facts memo {id(o):x}", len(o._items), o.size)
        elif cls is BindingIndex:
            add("approval index bindings", len(o._by_binding), "live approvals")
        elif cls is SessionMemory:
            for sid, mem in o._sessions.items():
                add(f"session memory {sid[:8]} events", len(mem.events), mem.events.maxlen)
                add(f"session memory {sid[:8]} ids", len(mem.ids), "events")
    return out


async def pgbench(u, mode: str, per_client: int, cwd: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        "pgbench", "-n", "-S", "-c", "8", "-j", "2", "-t", str(per_client), "-M", mode, "-h", u.hostname,
        "-p", str(u.port), "-U", u.username, "prod", cwd=cwd, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PGPASSWORD": u.password, "PGSSLMODE": "require"})
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(err.decode()[-2000:])
    return out.decode()


async def steps(args, u, cwd: Path) -> str:
    """The measured run in steps; RSS, heap and structures after each, tracemalloc's growth between them."""
    import gc
    import tracemalloc
    done, snap, out = 0, None, ""
    if args.tracemalloc:
        await asyncio.sleep(1.0)
        gc.collect()
        snap = tracemalloc.take_snapshot()
    print(f"step 0: {memory_line()}", flush=True)
    from gateway.audit.log import AuditLog
    from gateway.policy.decisionlog import DecisionLog
    logs = [o for o in gc.get_objects() if o.__class__ in (AuditLog, DecisionLog)]
    for target in args.steps:
        peaks = {"rss": 0, "audit": 0, "decisions": 0}

        async def sample() -> None:       # the step's peaks, every 0.2 s: a backlog's objects set the high-water
            while True:
                peaks["rss"] = max(peaks["rss"], rss_kib())
                for log in logs:
                    name, n = (("audit", log.pending) if log.__class__ is AuditLog else
                               ("decisions", len(log._decisions)))
                    peaks[name] = max(peaks[name], n)
                await asyncio.sleep(0.2)
        sampler = asyncio.create_task(sample())
        out = await pgbench(u, args.mode, max(1, (target - done) // 8), cwd)
        sampler.cancel()
        done += max(1, (target - done) // 8) * 8
        await asyncio.sleep(1.0)          # the writers' last batches
        gc.collect()
        print(f"step {done}: {memory_line()}, load {os.getloadavg()[0]:.1f}; during it: RSS at most "
              f"{peaks['rss'] / 1024:.1f} MiB, audit rows pending at most {peaks['audit']}, decision-log rows "
              f"pending at most {peaks['decisions']}", flush=True)
        for name, held in structures().items():
            print(f"    {name}: {held}")
        if snap is not None:
            new = tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
            total = sum(s.size for s in new.statistics("filename"))
            print(f"  traced {total / 1024 / 1024:.1f} MiB; top growth since the last step:")
            for stat in new.compare_to(snap, "lineno")[:args.top]:
                if stat.size_diff:
                    print(f"    {stat.size_diff / 1024:+.0f} KiB ({stat.count_diff:+d} blocks) "
                          f"{stat.traceback[0].filename.replace(str(ROOT) + '/', '')}:{stat.traceback[0].lineno}")
            snap = new
    return out


async def run(args, cluster: PgCluster) -> dict:
    from gateway.app import open_gateway
    from gateway.config import load_config

    tmp = Path(tempfile.mkdtemp(prefix="sandgate-pginproc-"))
    os.chmod(tmp, 0o777)
    api_port = free_port()
    (tmp / "sandgate.toml").write_text(
        f'[proxy]\nlisten = "127.0.0.1:{free_port()}"\npostgres_listen = "127.0.0.1:{free_port()}"\n'
        f'[api]\nlisten = "127.0.0.1:{api_port}"\n[policy]\ndir = "{TREE / "policies"}"\n'
        f'[databases.prod]\nupstream = "localhost:{cluster.port}"\ndbname = "app"\nuser = "app"\n'
        f'password = "env:BENCH_DB_PASSWORD"\nupstream_ca = "{cluster.ca_file}"\n')
    os.environ["BENCH_DB_PASSWORD"] = APP_PASSWORD
    cfg = load_config(tmp / "sandgate.toml", tmp / "data")
    async with AsyncExitStack() as stack:
        await open_gateway(cfg, stack)
        token = (tmp / "data" / "harness.token").read_text().strip()
        client = Client(api_port, token)
        await client.open()
        status, body = await client.send(client.request("POST", "/v1/sessions", {"databases": ["prod"]}))
        assert status in (200, 201), body[:300]
        u = urlsplit(json.loads(body)["env"]["PROD_DATABASE_URL"])
        if args.quiet:
            for task in asyncio.all_tasks():
                if task.get_name() in TIMED:
                    task.cancel()
        await pgbench(u, args.mode, max(1, args.warm // 8), tmp)
        await asyncio.sleep(1.0)
        prof = None
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
        callgrind = ctypes.CDLL(args.callgrind) if args.callgrind else None
        for acc in SPENT.values():
            acc[0] = acc[1] = 0
        caches = decision_caches()
        hits0 = sum(c.hits for c in caches), sum(c.misses for c in caches)
        cpu0, wall0, proc0 = thread_cpu(), time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        if callgrind is not None:
            callgrind.cg_start()
        if args.steps:
            out = await steps(args, u, tmp)
        else:
            out = await pgbench(u, args.mode, max(1, args.statements // 8), tmp)
        await asyncio.sleep(1.0)          # the writers' last batches
        if callgrind is not None:
            callgrind.cg_stop()
        if prof is not None:
            prof.disable()
        cpu1, wall1, proc1 = thread_cpu(), time.perf_counter(), time.process_time()
        cache = (sum(c.hits for c in caches) - hits0[0], sum(c.misses for c in caches) - hits0[1])
        if prof is not None:
            prof.dump_stats(args.profile)
        client.writer.close()
    n = args.steps[-1] if args.steps else (args.statements // 8) * 8
    tps = next((line.split()[2] for line in out.splitlines() if line.startswith("tps = ")), "?")
    return {"process": (proc1 - proc0) * 1e6 / n, "wall_s": wall1 - wall0, "tps": tps, "cache": cache,
            "threads": {k: (v - cpu0.get(k, 0.0)) * 1e6 / n for k, v in cpu1.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="prepared", choices=("simple", "prepared"))
    ap.add_argument("--statements", type=int, default=8000)
    ap.add_argument("--warm", type=int, default=2000)
    ap.add_argument("--profile", default="")
    ap.add_argument("--callgrind", default="", metavar="LIB")
    ap.add_argument("--quiet", action="store_true", help="stop the timed background tasks")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tree", default=str(ROOT), help="the checkout to run (default: this one)")
    ap.add_argument("--breakdown", action="store_true",
                    help="the loop thread's CPU a statement inside the gate's and the adapter's main functions")
    ap.add_argument("--steps", default="", help="cumulative statement counts: RSS and structures after each")
    ap.add_argument("--tracemalloc", action="store_true", help="with --steps: tracemalloc growth between steps")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    args.steps = [int(x) for x in args.steps.split(",") if x]
    if args.tracemalloc:
        import tracemalloc
        tracemalloc.start(1)
    from gateway.runtime.eventloop import loop_factory
    import logging
    logging.basicConfig(level=logging.WARNING)
    if args.breakdown:
        wrap_breakdown()
    cluster = PgCluster().start()
    try:
        cluster._as_pg("pgbench", "-i", "-s", "1", "-q", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                       "-U", "postgres", "app")
        cluster.psql_local("ALTER TABLE pgbench_accounts OWNER TO app; ALTER TABLE pgbench_branches OWNER TO app; "
                           "ALTER TABLE pgbench_tellers OWNER TO app; ALTER TABLE pgbench_history OWNER TO app")
        out = asyncio.run(run(args, cluster), loop_factory=loop_factory())
    finally:
        cluster.stop()
    load = os.getloadavg()[0]
    n = args.steps[-1] if args.steps else (args.statements // 8) * 8
    for qual, (ns, calls) in SPENT.items():
        if calls:
            print(f"  {qual}: {ns / 1e3 / n:.1f} µs a statement ({calls} calls, {ns / 1e3 / calls:.1f} µs each)")
    if args.json:
        print(json.dumps({"mode": args.mode, "load": load, **out}))
        return 0
    threads = ", ".join(f"{k} {v:.0f}" for k, v in sorted(out["threads"].items(), key=lambda kv: -kv[1]) if v >= 0.5)
    writer = out["threads"].get("writer process", 0.0)
    also = f" + {writer:.0f} writer process" if writer else ""
    print(f"{args.mode}: {out['process']:.0f}{also} µs CPU a statement (process), threads: {threads}; "
          f"{n} statements in {out['wall_s']:.1f} s ({out['tps']} tps), decision cache hits/misses "
          f"{out['cache'][0]}/{out['cache'][1]}, load {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
