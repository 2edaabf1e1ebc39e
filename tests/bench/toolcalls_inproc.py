"""Tool calls in one process: CPU per call per thread, for comparing revisions under load.

    .venv/bin/python tests/bench/toolcalls_inproc.py [--tree DIR] [--calls N] [--profile FILE]

It builds sandgate as `serve` does (`gateway.app.open_gateway`, from this checkout or from `--tree`, another
revision's files: that directory goes first on sys.path, with its own shipped policies), on sandgate's event loop,
and runs the toolcalls bench's mix (tests/bench/toolcalls.py MIX, 16 sessions, one keep-alive connection each,
every call a new step) from coroutines on the same loop: a minimal client (requests built once, answers read by
their Content-Length) whose cost is the same for every revision. After a warm-up it counts each thread's CPU
time (`pthread_getcpuclockid`, nanoseconds) over `--calls` calls and prints µs per call per thread.

Rates are not printed: on a loaded machine only CPU per call compares revisions, and even that moves with the
load; instruction counts do not. `--quiet` stops what runs by the clock (polls, housekeeping, the policy watch),
whose share of a call depends on the rate. `--profile FILE`: cProfile over the measured calls (pstats format; on
Python 3.12 it sees every thread). `--callgrind LIB`: under valgrind, count only the measured calls'
instructions (all threads):

    printf '#include <valgrind/callgrind.h>\nvoid cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }\nvoid cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }\n' > /tmp/cgctl.c
    gcc -O2 -shared -fPIC -o /tmp/libcgctl.so /tmp/cgctl.c
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p .venv/bin/python \
        tests/bench/toolcalls_inproc.py --quiet --calls 300 --callgrind /tmp/libcgctl.so [--tree DIR]
    grep totals /tmp/cg.*.1          # instructions over the 300 calls (and the 1 s after, the writers' last batches)

Nothing is asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import ctypes
import socket
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLIENTS = 16
# What runs by the clock, not per call (--quiet stops them): their cost per call depends on the calls' rate.
TIMED = frozenset({"sandgate-presence", "sandgate-housekeeping", "sandgate-revocations", "sandgate-policy-revisions",
                   "sandgate-packages", "sandgate-audit-checkpoints", "sandgate-policy-watch"})

MIX: list[tuple[str, dict]] = [                # tests/bench/toolcalls.py MIX (not imported: --tree's path first)
    ("shell", {"command": "ls"}),
    ("read_file", {"path": "/workspace/src/app.py"}),
    ("shell", {"command": "git status"}),
    ("sql", {"query": "SELECT id, name FROM users WHERE id = 7"}),
    ("write_file", {"path": "/workspace/src/app.py", "content": "print('hello')\n"}),
    ("shell", {"command": "rm -rf ./build"}),                               # asks
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each live thread of this process, by name."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            secs = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, TypeError):
            continue
        name = "loop" if t is threading.main_thread() else t.name.split("_")[0].rstrip("0123456789-")
        out[name] = out.get(name, 0.0) + secs
    writer = writer_process_cpu()
    if writer:
        out["writer process"] = writer
    return out

def writer_process_cpu() -> float:
    """CPU seconds so far of this process's writer processes (gateway/store/offload.py), from /proc."""
    total, me = 0.0, str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[1] != me:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"gateway.store.offload" not in f.read():
                    continue
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Client:
    def __init__(self, port: int, token: str):
        self.port, self.token = port, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    def request(self, method: str, path: str, body: dict | None) -> bytes:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        return head.encode() + data

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length)
        return status, body


async def run(tree: Path, calls: int, warm: int, profile: str, callgrind: Any, quiet: bool, idle: float) -> dict:
    from gateway.app import open_gateway
    from gateway.config import load_config
    import gateway.app as gapp

    tmp = Path(tempfile.mkdtemp(prefix="sandgate-inproc-"))
    cfg_file = tmp / "sandgate.toml"
    api_port = free_port()
    cfg_file.write_text(f'[proxy]\nlisten = "127.0.0.1:{free_port()}"\n[api]\nlisten = "127.0.0.1:{api_port}"\n'
                        f'[policy]\ndir = "{tree / "policies"}"\n')
    cfg = load_config(cfg_file, tmp / "data")
    async with AsyncExitStack() as stack:
        await open_gateway(cfg, stack)
        token = (tmp / "data" / "harness.token").read_text().strip()
        clients = [Client(api_port, token) for _ in range(CLIENTS)]
        for c in clients:
            await c.open()
        sessions = []
        for c in clients:
            status, body = await c.send(c.request("POST", "/v1/sessions", {"allow": ["api.github.com"]}))
            assert status in (200, 201), body[:200]
            sessions.append(json.loads(body)["id"])
        if quiet:
            for task in asyncio.all_tasks():
                if task.get_name() in TIMED:
                    task.cancel()
        gapp._settle_heap()
        state = {"left": 0}
        actions: dict[str, int] = {}

        async def client(n: int, c: Client, sid: str, steps: list[int]) -> None:
            while state["left"] > 0:
                state["left"] -= 1
                tool, args = MIX[(n + steps[0]) % len(MIX)]
                steps[0] += 1
                status, body = await c.send(c.request("POST", "/v1/toolcalls",
                                                      {"session": sid, "tool": tool, "args": args, "step": steps[0]}))
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {body[:300]!r}")
                action = json.loads(body)["decision"]
                actions[action] = actions.get(action, 0) + 1

        steps = [[0] for _ in range(CLIENTS)]
        state["left"] = warm
        await asyncio.gather(*(client(i, c, s, steps[i]) for i, (c, s) in enumerate(zip(clients, sessions))))
        await asyncio.sleep(0.5)
        actions.clear()
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
        if idle:                          # what the clock-driven tasks cost, with no calls
            cpu0, proc0 = thread_cpu(), time.process_time()
            await asyncio.sleep(idle)
            cpu1, proc1 = thread_cpu(), time.process_time()
            print(f"idle {idle:g} s: {(proc1 - proc0) * 1e3 / idle:.1f} ms CPU a second (process), threads: "
                  + ", ".join(f"{k} {(v - cpu0.get(k, 0.0)) * 1e3 / idle:.1f}" for k, v in sorted(cpu1.items())),
                  flush=True)
        cpu0, wall0, proc0 = thread_cpu(), time.perf_counter(), time.process_time()
        state["left"] = calls
        if prof is not None:
            prof.enable()
        if callgrind:
            callgrind.cg_start()
        await asyncio.gather(*(client(i, c, s, steps[i]) for i, (c, s) in enumerate(zip(clients, sessions))))
        if prof is not None:
            prof.disable()
        await asyncio.sleep(1.0)          # the writers' last batches
        if callgrind:
            callgrind.cg_stop()
        cpu1, wall1, proc1 = thread_cpu(), time.perf_counter(), time.process_time()
        if prof is not None:
            prof.dump_stats(profile)
        for c in clients:
            assert c.writer is not None
            c.writer.close()
    per = {k: (cpu1[k] - cpu0.get(k, 0.0)) * 1e6 / calls for k in cpu1}
    return {"process": (proc1 - proc0) * 1e6 / calls, "threads": per, "wall_s": wall1 - wall0, "actions": actions}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(ROOT), help="the checkout to run (default: this one)")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--warm", type=int, default=600)
    ap.add_argument("--profile", default="")
    ap.add_argument("--callgrind", default="", metavar="LIB",
                    help="under `valgrind --tool=callgrind --instr-atstart=no`: instrument only the measured calls "
                         "(LIB: a shared library with cg_start/cg_stop, the callgrind.h client requests)")
    ap.add_argument("--quiet", action="store_true",
                    help="stop the timed background tasks (polls, housekeeping, the policy watch): per-call work only")
    ap.add_argument("--idle", type=float, default=0.0, metavar="S",
                    help="first measure S seconds with no calls (the clock-driven tasks' CPU a second)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    for name in [m for m in sys.modules if m == "gateway" or m.startswith("gateway.")]:
        del sys.modules[name]
    try:
        from gateway.runtime.eventloop import loop_factory
    except ImportError:
        from gateway.eventloop import loop_factory
    import logging
    logging.basicConfig(level=logging.WARNING)
    out = asyncio.run(run(tree, args.calls, args.warm, args.profile, ctypes.CDLL(args.callgrind) if args.callgrind else None,
                          args.quiet, args.idle), loop_factory=loop_factory())
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"tree": str(tree), "load": load, **out}))
        return 0
    threads = ", ".join(f"{k} {v:.0f}" for k, v in sorted(out["threads"].items(), key=lambda kv: -kv[1]) if v >= 0.5)
    writer = out["threads"].get("writer process", 0.0)
    also = f" + {writer:.0f} writer process" if writer else ""
    print(f"{tree}: {out['process']:.0f}{also} µs CPU per call (process), threads: {threads}; "
          f"{args.calls} calls in {out['wall_s']:.1f} s, {out['actions']}, load {load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
