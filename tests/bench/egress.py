"""Egress benchmark: sandgate against bare mitmdump, side by side in one run.

Run from the repository root (no other services needed; everything listens on 127.0.0.1):

    .venv/bin/python tests/bench/egress.py            # full: 3 runs for the spread, about 4 minutes
    .venv/bin/python tests/bench/egress.py --quick    # one short run, under 1 minute

It starts three processes: a fast upstream (tests/bench/common.py, raw asyncio: `/small` answers
100 bytes, `/big/N` streams N bytes), `sandgate serve` (its real CLI, with `allowed.test` resolved to
127.0.0.1 and loopback allowed) and bare `mitmdump` (`connection_strategy=lazy`,
`stream_large_bodies=1m`). The load client runs in this process: asyncio, one coroutine per
keep-alive connection, raw HTTP/1.1 with Content-Length parsing. Requests are plain HTTP in absolute
form (`GET http://allowed.test:PORT/small HTTP/1.1`) with `Proxy-Authorization: Basic
base64("x:" + session token)` on every request for sandgate; bare mitmdump gets no auth and is asked
for `http://127.0.0.1:PORT/...`, since it resolves names with the system resolver.

Figures (ratio = sandgate / baseline; throughput: higher is better, latency and RSS: lower is better):
- small GET throughput (requests/s) at concurrency 1 and 8: completed `GET /small` per second of
  wall time over a fixed window after a warm-up, one keep-alive connection per coroutine; p50 and p99
  are the per-request latencies (send to last body byte) in that window. Runs alternate between the
  two proxies, and the full mode pools two rounds.
- proxy CPU per request: CPU time (user + system) the proxy process used during the c=8 window,
  divided by the requests completed in it. On a small machine the client, the upstream and the proxy
  share the cores, so this is the clearest per-request cost.
- RSS growth: VmRSS of the proxy after all small-GET runs minus before them (after a priming load),
  divided by the requests served (warm-up requests included). Near zero means no memory is kept
  per request; the quick mode's short runs make it noisy.
- 200 MiB download: one `GET /big/209715200` through the proxy, body discarded by the client;
  MiB/s over the whole transfer, and peak RSS of the proxy process (VmRSS sampled every 20 ms
  during the transfer; VmHWM over the process lifetime is printed too). RSS before the download
  is printed as a row for context.
- session create: latency of sequential `POST /v1/sessions` (harness token, keep-alive) on sandgate's
  API; the baseline has no such thing ("n/a").
- direct: the same client straight to the upstream — the client's own ceiling, a reference line.
- `--workers 2`: small GET throughput at c=16 of `sandgate serve --workers 2` against one worker, both on
  the PostgreSQL store (tests/support/pg.py: 127.0.0.1:5432, `SANDGATE_TEST_PG_DB`); the baseline column of
  that row is the one-worker figure (goal: 2 workers >= 1.7x). Skipped ("n/a") without PostgreSQL;
  `--workers-only` runs just this row; `--workers-only --workers 1,2,4` one row per count against the first,
  with how many CPUs sandgate's processes used; `--pin [K]` puts sandgate on the first K CPUs (default 1) and this
  load generator and the upstream on the others (taskset; PostgreSQL stays where it is).

- HTTPS rows (`--https-only` runs just these, `--no-https` leaves them out): real curl through each proxy to an
  HTTPS upstream that speaks HTTP/1.1 only and to one that speaks h2 only (both tests/bench/common.py, no logging
  per request, the same certificate). Three columns: sandgate, bare mitmdump with its defaults
  (connection_strategy=eager: it connects upstream before answering the ClientHello and mirrors the upstream's
  ALPN) and the lazy mitmdump above (which accepts h2 from the client whatever the upstream speaks). Each curl
  trusts its proxy's CA plus the public roots (the same bundle size). Cells: one curl with N URLs on one tunnel,
  as curl comes (offering h2), and with --http1.1; fresh tunnels (one curl per request, so a CONNECT and both TLS
  handshakes each, curl's own start included in every column); and the h2 upstream. req/s = requests ÷ curl's
  wall time; the median of the rounds, the proxies alternating; the protocol each client got is printed. Each
  cell also gives the proxy process's CPU (user + system, /proc/PID/stat, its policy workers included) per
  request: robust to the machine's load where req/s is not; its ratio is mitmdump's ÷ sandgate's (above 1× is
  better for sandgate, as for req/s). sandgate's bundle holds its CA alone plus the roots: the session's `ca_pem`
  already carries the public roots, and curl loading them twice (about 290 certificates against 146) cost a fresh
  curl some 50 ms at load 10-14.

Nothing is asserted: the script exits non-zero only when something fails (a process does not start,
a request errors or gets a non-2xx answer).
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import base64
import json
import os
import platform
import shutil
import signal
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
    MIB, Conn, RssSampler, build_request, free_port, percentile, proc_cpu_s, proc_status_kb, stop_process,
    tree_cpu_s, wait_port,
)
from tests.support.upstream import make_cert  # noqa: E402

BIG_SIZE = 200 * MIB


class BenchError(RuntimeError):
    pass


@dataclass
class Mode:
    warmup_s: float
    window_s: float
    rounds: int
    direct_s: float
    downloads: int
    sessions: int
    prime_s: float


FULL = Mode(warmup_s=1.0, window_s=5.0, rounds=2, direct_s=2.0, downloads=3, sessions=300, prime_s=1.5)
QUICK = Mode(warmup_s=0.5, window_s=1.5, rounds=1, direct_s=1.0, downloads=1, sessions=60, prime_s=1.0)


@dataclass
class Target:
    """Where the load goes: a proxy (or the upstream itself) and how to phrase the request."""
    name: str
    port: int
    url_host: str                  # host[:port] in the absolute-form URL / Host header
    pid: int | None = None
    headers: dict = field(default_factory=dict)
    absolute: bool = True          # absolute-form target (through a proxy) or origin-form (direct)

    def request(self, path: str) -> bytes:
        target = f"http://{self.url_host}{path}" if self.absolute else path
        return build_request("GET", target, self.url_host, self.headers)


@dataclass
class LoadResult:
    count: int = 0                 # requests completed inside the measured window
    total: int = 0                 # requests completed in all, warm-up included
    seconds: float = 0.0
    cpu_s: float = 0.0
    latencies: list = field(default_factory=list)

    def merge(self, other: "LoadResult") -> None:
        self.count += other.count
        self.total += other.total
        self.seconds += other.seconds
        self.cpu_s += other.cpu_s
        self.latencies.extend(other.latencies)

    @property
    def rps(self) -> float:
        return self.count / self.seconds if self.seconds else float("nan")

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000.0

    @property
    def cpu_ms_per_req(self) -> float:
        return self.cpu_s * 1000.0 / self.count if self.count else float("nan")


# -- load ----------------------------------------------------------------------------------------
async def small_load(target: Target, concurrency: int, warmup_s: float, window_s: float,
                     distinct: bool = False) -> LoadResult:
    """`concurrency` keep-alive connections hammer GET /small; measure a window after a warm-up.

    distinct=True gives every request its own URL (`/small?n=N`), so no two policy inputs are alike."""
    raw = target.request("/small")
    counter = itertools.count()
    state = {"measuring": False, "stop": False}
    result = LoadResult()
    errors: list[str] = []

    async def worker() -> None:
        conn = Conn("127.0.0.1", target.port)
        try:
            while not state["stop"]:
                t0 = time.perf_counter()
                resp = await conn.request(target.request(f"/small?n={next(counter)}") if distinct else raw)
                dt = time.perf_counter() - t0
                if resp.status != 200 or resp.size != 100:
                    errors.append(f"{target.name}: HTTP {resp.status}, {resp.size} bytes: {resp.body[:300]!r}")
                    state["stop"] = True
                    return
                result.total += 1
                if state["measuring"]:
                    result.count += 1
                    result.latencies.append(dt)
        finally:
            conn.close()

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await _sleep_unless_done(tasks, warmup_s)
        cpu0 = proc_cpu_s(target.pid) if target.pid else 0.0
        t0 = time.perf_counter()
        state["measuring"] = True
        await _sleep_unless_done(tasks, window_s)
        state["measuring"] = False
        result.seconds = time.perf_counter() - t0
        result.cpu_s = (proc_cpu_s(target.pid) - cpu0) if target.pid else 0.0
        state["stop"] = True
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        for t in tasks:
            t.cancel()
    if errors:
        raise BenchError(errors[0])
    if result.count == 0:
        raise BenchError(f"{target.name}: no request completed in {window_s}s")
    return result


async def _sleep_unless_done(tasks: list[asyncio.Task], seconds: float) -> None:
    """Sleep, but surface a worker's exception at once instead of after the window."""
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for t in done:
        if t.exception() is not None:
            raise t.exception()


@dataclass
class Download:
    mib_s: float
    peak_rss_kb: int
    rss_before_kb: int
    hwm_kb: int


async def download(target: Target) -> Download:
    conn = Conn("127.0.0.1", target.port)
    try:
        await conn.open()
        rss_before = proc_status_kb(target.pid, "VmRSS")
        with RssSampler(target.pid) as sampler:
            t0 = time.perf_counter()
            resp = await asyncio.wait_for(conn.request(target.request(f"/big/{BIG_SIZE}"), keep_body=False), 300)
            dt = time.perf_counter() - t0
        if resp.status != 200 or resp.size != BIG_SIZE:
            raise BenchError(f"{target.name}: download got HTTP {resp.status}, {resp.size} of {BIG_SIZE} bytes")
        return Download(BIG_SIZE / MIB / dt, sampler.peak_kb, rss_before, proc_status_kb(target.pid, "VmHWM"))
    finally:
        conn.close()


async def session_creates(api_port: int, harness: str, n: int) -> list[float]:
    body = json.dumps({"allow": ["allowed.test"]}).encode()
    raw = build_request("POST", "/v1/sessions", f"127.0.0.1:{api_port}",
                        {"Authorization": f"Bearer {harness}", "Content-Type": "application/json"}, body)
    conn = Conn("127.0.0.1", api_port)
    latencies = []
    try:
        for i in range(n + 5):                     # five warm-up creates, not counted
            t0 = time.perf_counter()
            resp = await conn.request(raw)
            dt = time.perf_counter() - t0
            if resp.status != 201 or b'"token"' not in resp.body:
                raise BenchError(f"POST /v1/sessions: HTTP {resp.status}: {resp.body[:300]!r}")
            if i >= 5:
                latencies.append(dt)
    finally:
        conn.close()
    return latencies


# -- processes -----------------------------------------------------------------------------------
class Procs:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.upstream: subprocess.Popen | None = None
        self.sandgate: subprocess.Popen | None = None
        self.mitmdump: subprocess.Popen | None = None
        self.logs: list = []

    def _log(self, name: str):
        f = open(self.tmp / f"{name}.log", "wb")
        self.logs.append(f)
        return f

    def log_tail(self, name: str, n: int = 3000) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def start(self) -> None:
        self.up_port, self.sg_proxy, self.sg_api, self.mitm_port = (free_port() for _ in range(4))
        self.cert = make_cert(self.tmp / "upstream-tls", ["allowed.test"])      # the HTTPS upstreams' (its own CA)
        self.upstream = subprocess.Popen(
            [sys.executable, str(HERE / "common.py"), "upstream", "--port", str(self.up_port)],
            stdout=self._log("upstream"), stderr=subprocess.STDOUT)
        # sandgate, through its real CLI
        self.data_dir = self.tmp / "sandgate-data"
        cfg = self.tmp / "sandgate.toml"
        cfg.write_text(
            f'[proxy]\nlisten = "127.0.0.1:{self.sg_proxy}"\n'
            f'[api]\nlisten = "127.0.0.1:{self.sg_api}"\n'
            '[egress]\nprivate_allow = ["127.0.0.0/8"]\nresolve = {"allowed.test" = ["127.0.0.1"]}\n'
            f'upstream_ca = "{self.cert.cert}"\n')
        self.sandgate = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir", str(self.data_dir)],
            stdout=self._log("sandgate"), stderr=subprocess.STDOUT, cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # bare mitmdump, with its own confdir so the run leaves nothing in ~/.mitmproxy
        mitmdump = Path(sys.executable).parent / "mitmdump"
        if not mitmdump.exists():
            found = shutil.which("mitmdump")
            if not found:
                raise BenchError("mitmdump is not installed next to this Python nor on PATH")
            mitmdump = Path(found)
        self.mitmdump = subprocess.Popen(
            [str(mitmdump), "-q", "--listen-host", "127.0.0.1", "--listen-port", str(self.mitm_port),
             "--set", "connection_strategy=lazy", "--set", "stream_large_bodies=1m",
             "--set", f"confdir={self.tmp / 'mitmproxy-conf'}",
             "--set", f"ssl_verify_upstream_trusted_ca={self.cert.cert}"],
            stdout=self._log("mitmdump"), stderr=subprocess.STDOUT)
        self.mitmdump_bin = mitmdump
        wait_port("127.0.0.1", self.up_port, self.upstream)
        try:
            wait_port("127.0.0.1", self.mitm_port, self.mitmdump, timeout=60)
        except RuntimeError as exc:
            raise BenchError(f"mitmdump: {exc}\n{self.log_tail('mitmdump')}") from None
        self._wait_sandgate()
        self.harness = (self.data_dir / "harness.token").read_text().strip()

    def _wait_sandgate(self, timeout: float = 60.0) -> None:
        listen = self.data_dir / "listen.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sandgate.poll() is not None:
                raise BenchError(f"sandgate exited with {self.sandgate.returncode}:\n{self.log_tail('sandgate')}")
            if listen.exists():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.sg_api}/healthz", timeout=2) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.1)
        raise BenchError(f"sandgate did not become ready in {timeout:.0f}s:\n{self.log_tail('sandgate')}")

    def new_session_token(self) -> str:
        return self.new_session()["token"]

    def new_session(self) -> dict:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.sg_api}/v1/sessions", method="POST",
            data=json.dumps({"allow": ["allowed.test"]}).encode(),
            headers={"Authorization": f"Bearer {self.harness}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            if r.status != 201:
                raise BenchError(f"POST /v1/sessions: HTTP {r.status}")
            return json.loads(r.read())

    def start_https(self) -> None:
        """The HTTPS rows' parts: an HTTP/1.1-only and an h2-only TLS upstream (tests/bench/common.py, no logging
        per request), and a second bare mitmdump with its defaults (connection_strategy=eager)."""
        self.tls_port, self.h2_port, self.eager_port = (free_port() for _ in range(3))
        tls = ["--cert", self.cert.cert, "--key", self.cert.key]
        self.tls_upstream = subprocess.Popen(
            [sys.executable, str(HERE / "common.py"), "upstream", "--port", str(self.tls_port), *tls],
            stdout=self._log("tls-upstream"), stderr=subprocess.STDOUT)
        self.h2_upstream = subprocess.Popen(
            [sys.executable, str(HERE / "common.py"), "upstream", "--port", str(self.h2_port), *tls, "--h2"],
            stdout=self._log("h2-upstream"), stderr=subprocess.STDOUT)
        self.eager = subprocess.Popen(
            [str(self.mitmdump_bin), "-q", "--listen-host", "127.0.0.1", "--listen-port", str(self.eager_port),
             "--set", "stream_large_bodies=1m", "--set", f"confdir={self.tmp / 'mitmproxy-eager-conf'}",
             "--set", f"ssl_verify_upstream_trusted_ca={self.cert.cert}"],
            stdout=self._log("mitmdump-eager"), stderr=subprocess.STDOUT)
        for port, proc in ((self.tls_port, self.tls_upstream), (self.h2_port, self.h2_upstream),
                           (self.eager_port, self.eager)):
            wait_port("127.0.0.1", port, proc, timeout=60)

    def stop(self) -> None:
        for proc in (getattr(self, "eager", None), getattr(self, "tls_upstream", None),
                     getattr(self, "h2_upstream", None)):
            if proc is not None:
                stop_process(proc)
        for proc in (self.sandgate, self.mitmdump, self.upstream):
            try:
                stop_process(proc)
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"warning: could not stop {proc and proc.args[:3]}: {exc}", file=sys.stderr)
        for f in self.logs:
            f.close()


def start_pg_sandgate(tmp: Path, workers: int, logs: list, cpus: str = "") -> tuple[subprocess.Popen, int, int, Path]:
    """`sandgate serve --workers N` on the PostgreSQL store; (process, proxy port, API port, data dir). `cpus`: run
    it (and every process it starts) on these CPUs only (`taskset -c`)."""
    from tests.support.pg import PG_URL

    proxy, api = free_port(), free_port()
    data = tmp / f"sandgate-w{workers}"
    cfg = tmp / f"sandgate-w{workers}.toml"
    cfg.write_text(
        f'[proxy]\nlisten = "127.0.0.1:{proxy}"\n[api]\nlisten = "127.0.0.1:{api}"\n'
        f'[store]\nurl = "{PG_URL}"\n'
        '[egress]\nprivate_allow = ["127.0.0.0/8"]\nresolve = {"allowed.test" = ["127.0.0.1"]}\n')
    log = open(tmp / f"sandgate-w{workers}.log", "wb")
    logs.append(log)
    (data / "listen.json").unlink(missing_ok=True)           # the previous run's (every run starts one)
    pinned = ["taskset", "-c", cpus] if cpus else []
    proc = subprocess.Popen(pinned + [sys.executable, "-m", "gateway", "serve", "--config", str(cfg), "--data-dir",
                                      str(data), "--workers", str(workers)], stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 90
    while not (data / "listen.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise BenchError(f"sandgate --workers {workers} did not start:\n"
                             f"{(tmp / f'sandgate-w{workers}.log').read_text(errors='replace')[-1500:]}")
        time.sleep(0.1)
    wait_port("127.0.0.1", api, proc, timeout=max(1.0, deadline - time.monotonic()))
    return proc, proxy, api, data


async def workers_row(mode: Mode, tmp: Path, up_port: int, counts: tuple[int, ...] = (1, 2),
                      cpus: str = "") -> list[tuple]:
    """Small GETs at c=16 through `serve --workers N` for each N in `counts` (PostgreSQL store); the first count is
    the baseline of the others. `cpus`: sandgate pinned to these CPUs (the caller pins the load generator)."""
    from tests.support.pg import pg_available

    names = {n: f"small GET c=16, PostgreSQL store: --workers {n} (baseline column: {counts[0]} worker"
                f"{'s' if counts[0] > 1 else ''}{', sandgate on CPUs ' + cpus if cpus else ''}) (req/s)"
             for n in counts[1:]}
    if not pg_available():
        print("  --workers: no PostgreSQL at 127.0.0.1:5432, row skipped", flush=True)
        return [(name, "n/a", "n/a", 0) for name in names.values()]
    rps = {}
    logs: list = []
    for workers in counts:
        proc, proxy, api, data = start_pg_sandgate(tmp, workers, logs, cpus)
        try:
            harness = (data / "harness.token").read_text().strip()
            req = urllib.request.Request(
                f"http://127.0.0.1:{api}/v1/sessions", method="POST", data=json.dumps({"allow": ["allowed.test"]}).encode(),
                headers={"Authorization": f"Bearer {harness}", "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                token = json.loads(r.read())["token"]
            auth = "Basic " + base64.b64encode(f"x:{token}".encode()).decode()
            target = Target(f"sandgate-w{workers}", proxy, f"allowed.test:{up_port}", None,
                            {"Proxy-Authorization": auth})
            await small_load(target, 16, 0.0, mode.prime_s)
            total = LoadResult()
            cpu0, t0 = tree_cpu_s(proc.pid), time.perf_counter()
            for _ in range(mode.rounds):
                total.merge(await small_load(target, 16, mode.warmup_s, mode.window_s))
            cores = (tree_cpu_s(proc.pid) - cpu0) / (time.perf_counter() - t0)
            rps[workers] = total.rps
            print(f"  --workers {workers} c=16: {total.rps:8,.0f} req/s  p50 {total.p(50):6.2f} ms  "
                  f"p99 {total.p(99):6.2f} ms  sandgate used {cores:.2f} CPUs (all its processes, warm-ups "
                  f"included)", flush=True)
        finally:
            stop_process(proc)
    for f in logs:
        f.close()
    return [(names[n], rps[n], rps[counts[0]], 0) for n in counts[1:]]


# -- report --------------------------------------------------------------------------------------
def fmt(value, digits: int = 1) -> str:
    if isinstance(value, str):
        return value
    if value != value:  # nan
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def ratio(a, b) -> str:
    if isinstance(a, str) or isinstance(b, str) or a != a or b != b or b <= 0 or a < 0:
        return "n/a"
    return f"{a / b:.2f}×"


def table(rows: list[tuple], baseline: str = "baseline (bare mitmdump)") -> str:
    out = [f"| figure | sandgate | {baseline} | ratio |", "| --- | ---: | ---: | ---: |"]
    for name, sg, base, digits in rows:
        out.append(f"| {name} | {fmt(sg, digits)} | {fmt(base, digits)} | {ratio(sg, base)} |")
    return "\n".join(out)


def mitmproxy_version() -> str:
    try:
        from importlib.metadata import version
        return version("mitmproxy")
    except Exception:  # noqa: BLE001
        return "?"


# -- main ----------------------------------------------------------------------------------------
async def run(mode: Mode, procs: Procs, label: str) -> dict:
    token = procs.new_session_token()
    auth = "Basic " + base64.b64encode(f"x:{token}".encode()).decode()
    sg = Target("sandgate", procs.sg_proxy, f"allowed.test:{procs.up_port}", procs.sandgate.pid,
                {"Proxy-Authorization": auth})
    base = Target("mitmdump", procs.mitm_port, f"127.0.0.1:{procs.up_port}", procs.mitmdump.pid)
    direct = Target("direct", procs.up_port, f"127.0.0.1:{procs.up_port}", procs.upstream.pid, absolute=False)

    started = time.perf_counter()
    print(f"egress bench ({label}): {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"mitmproxy {mitmproxy_version()}, load average {os.getloadavg()[0]:.2f} before start", flush=True)

    direct_res = {}
    for c in (1, 8):
        direct_res[c] = await small_load(direct, c, min(mode.warmup_s, 0.5), mode.direct_s)
    print(f"direct to upstream (client ceiling): c=1 {direct_res[1].rps:,.0f} req/s, "
          f"c=8 {direct_res[8].rps:,.0f} req/s", flush=True)

    # prime both proxies (first-use allocations, caches) so that RSS growth below is per-request memory
    for t in (sg, base):
        await small_load(t, 8, 0.0, mode.prime_s)
    small = {(t.name, c): LoadResult() for t in (sg, base) for c in (1, 8)}
    rss0 = {t.name: proc_status_kb(t.pid, "VmRSS") for t in (sg, base)}
    for r in range(mode.rounds):
        order = (sg, base) if r % 2 == 0 else (base, sg)
        for c in (1, 8):
            for t in order:
                res = await small_load(t, c, mode.warmup_s, mode.window_s)
                small[(t.name, c)].merge(res)
                print(f"  round {r + 1} {t.name:8} c={c}: {res.rps:8,.0f} req/s  p50 {res.p(50):6.2f} ms  "
                      f"p99 {res.p(99):6.2f} ms", flush=True)

    unique = {}
    for t in (sg, base):
        unique[t.name] = await small_load(t, 8, mode.warmup_s, mode.window_s, distinct=True)
        print(f"  distinct URLs {t.name:8} c=8: {unique[t.name].rps:8,.0f} req/s", flush=True)

    growth = {}
    for t in (sg, base):
        done = small[(t.name, 1)].total + small[(t.name, 8)].total
        growth[t.name] = (proc_status_kb(t.pid, "VmRSS") - rss0[t.name]) * 1024.0 / max(done, 1)

    dl: dict[str, list[Download]] = {"sandgate": [], "mitmdump": []}
    for r in range(mode.downloads):
        for t in ((sg, base) if r % 2 == 0 else (base, sg)):
            d = await download(t)
            dl[t.name].append(d)
            print(f"  download {r + 1} {t.name:8}: {d.mib_s:7.1f} MiB/s  peak RSS {d.peak_rss_kb / 1024:7.1f} MiB "
                  f"(before {d.rss_before_kb / 1024:.1f}, VmHWM {d.hwm_kb / 1024:.1f})", flush=True)

    creates = await session_creates(procs.sg_api, procs.harness, mode.sessions)
    workers = (await workers_row(mode, procs.tmp, procs.up_port))[0]
    elapsed = time.perf_counter() - started

    def best(name: str) -> Download:
        return max(dl[name], key=lambda d: d.mib_s)

    def peak(name: str) -> float:
        return max(d.peak_rss_kb for d in dl[name]) / 1024

    rows: list[tuple] = []
    for c in (1, 8):
        s, b = small[("sandgate", c)], small[("mitmdump", c)]
        rows += [(f"small GET c={c}: throughput (req/s)", s.rps, b.rps, 0),
                 (f"small GET c={c}: p50 latency (ms)", s.p(50), b.p(50), 2),
                 (f"small GET c={c}: p99 latency (ms)", s.p(99), b.p(99), 2)]
    rows.append(("small GET c=8, every URL distinct: throughput (req/s)", unique["sandgate"].rps,
                 unique["mitmdump"].rps, 0))
    s8, b8 = small[("sandgate", 8)], small[("mitmdump", 8)]
    rows.append(("small GET c=8: proxy CPU per request (ms)", s8.cpu_ms_per_req, b8.cpu_ms_per_req, 3))
    rows.append(("proxy RSS growth during the small GETs (bytes per request)", growth["sandgate"],
                 growth["mitmdump"], 0))
    rows += [("200 MiB download: throughput (MiB/s)", best("sandgate").mib_s, best("mitmdump").mib_s, 1),
             ("200 MiB download: peak RSS of proxy (MiB)", peak("sandgate"), peak("mitmdump"), 1),
             ("proxy RSS before the download (MiB)", dl["sandgate"][0].rss_before_kb / 1024,
              dl["mitmdump"][0].rss_before_kb / 1024, 1),
             (f"session create p50 (ms, n={len(creates)})", percentile(creates, 50) * 1000, "n/a", 2),
             (f"session create p99 (ms, n={len(creates)})", percentile(creates, 99) * 1000, "n/a", 2),
             workers]

    print()
    print(table(rows))
    print()
    print(f"- direct to the upstream, no proxy (the client's ceiling): c=1 {direct_res[1].rps:,.0f} req/s "
          f"(p50 {direct_res[1].p(50):.2f} ms), c=8 {direct_res[8].rps:,.0f} req/s (p50 {direct_res[8].p(50):.2f} ms)")
    print("- ratio = sandgate ÷ baseline: above 1× is better for throughput, worse for latency, CPU and RSS.")
    print(f"- small GETs: {mode.rounds} round(s) of {mode.window_s:g} s per cell after {mode.warmup_s:g} s warm-up, "
          f"the proxies alternating; 100-byte bodies, keep-alive, Proxy-Authorization on every sandgate request.")
    print("- the baseline is bare `mitmdump` with connection_strategy=lazy and stream_large_bodies=1m: it streams "
          "large bodies (without that option it buffers the whole 200 MiB response in memory); it is asked for "
          "`http://127.0.0.1:PORT/...` because it resolves names with the system resolver, while sandgate is "
          "asked for `http://allowed.test:PORT/...` (its static `egress.resolve` map).")
    print(f"- download: best of {mode.downloads} per proxy for MiB/s, highest sampled VmRSS for peak RSS; "
          f"VmHWM (lifetime peak) sandgate {max(d.hwm_kb for d in dl['sandgate']) / 1024:.1f} MiB, "
          f"mitmdump {max(d.hwm_kb for d in dl['mitmdump']) / 1024:.1f} MiB.")
    print(f"- client, upstream and both proxies share {os.cpu_count()} CPUs on 127.0.0.1 (load average now "
          f"{os.getloadavg()[0]:.2f}: anything else running skews both columns); measured part took {elapsed:.0f} s.")
    return {"repeated": (s8.rps, b8.rps), "distinct": (unique["sandgate"].rps, unique["mitmdump"].rps),
            "stream": (best("sandgate").mib_s, best("mitmdump").mib_s),
            "rss": tuple(max(d.peak_rss_kb - d.rss_before_kb for d in dl[n]) / 1024 for n in ("sandgate", "mitmdump"))}


# The README's performance table (issue 12): figure, goal, ours, baseline, ratio, spread over the runs.
SUMMARY = [("repeated", "egress small GET, repeated URL (req/s, c=8)", "≥ 0.9× bare mitmdump 12", 0),
           ("distinct", "egress small GET, distinct URLs (req/s, c=8)", "≥ 0.85× bare mitmdump 12", 0),
           ("stream", "200 MiB stream (MiB/s)", "≥ 0.9×", 1),
           ("rss", "RSS under streaming (MiB above the RSS before it)", "flat", 1)]


def summary(runs: list[dict]) -> str:
    import statistics
    out = [f"| figure | goal | ours | baseline | ratio | spread ({len(runs)} run{'s' if len(runs) > 1 else ''}) |",
           "| --- | --- | ---: | ---: | ---: | --- |"]
    for key, name, goal, digits in SUMMARY:
        ours = statistics.median(r[key][0] for r in runs)
        base = statistics.median(r[key][1] for r in runs)
        if key == "rss":
            ratio_s = "n/a"
            spread = f"ours {min(r[key][0] for r in runs):.1f}–{max(r[key][0] for r in runs):.1f} MiB"
        else:
            ratios = [r[key][0] / r[key][1] for r in runs if r[key][1] > 0]
            ratio_s = f"{statistics.median(ratios):.2f}×" if ratios else "n/a"
            spread = f"{min(ratios):.2f}×–{max(ratios):.2f}×" if ratios else "n/a"
        out.append(f"| {name} | {goal} | {fmt(ours, digits)} | {fmt(base, digits)} | {ratio_s} | {spread} |")
    return "\n".join(out)


# -- HTTPS rows ----------------------------------------------------------------------------------
@dataclass
class HttpsMode:
    keepalive_n: int       # requests on one tunnel (one curl, that many URLs)
    fresh_n: int           # sequential curls of one request each (a CONNECT and both TLS handshakes each)
    rounds: int            # the median of these per cell, the proxies alternating


HTTPS_FULL = HttpsMode(keepalive_n=200, fresh_n=40, rounds=3)
HTTPS_QUICK = HttpsMode(keepalive_n=100, fresh_n=15, rounds=1)
HTTPS_PROXIES = ("sandgate", "mitmdump eager", "mitmdump lazy")
IDLE_S = 3.0               # the proxies' idle CPU is sampled this long before the cells


@dataclass
class CurlTarget:
    name: str
    proxy: str              # -x
    bundle: str             # --cacert: the proxy's CA + the public roots (the same size for every proxy)
    host: str               # the URL's host (sandgate resolves allowed.test itself; mitmdump asks the system)
    pid: int                # the proxy's process: its CPU seconds per cell
    proxy_user: str = ""


def bundle_file(path: Path, ca_pem: str) -> str:
    import certifi
    path.write_text(ca_pem.strip() + "\n" + Path(certifi.where()).read_text())
    return str(path)


def curl_run(target: CurlTarget, port: int, n_urls: int, *flags: str) -> tuple[float, set[str]]:
    """One curl with `n_urls` GETs of /small (one tunnel, kept alive): wall seconds and the HTTP versions it got."""
    curl = shutil.which("curl")
    if curl is None:
        raise BenchError("curl is not installed")
    args = [curl, "-s", "--cacert", target.bundle, "-x", target.proxy, "-w", "%{http_version} %{http_code}\n",
            *flags]
    if target.proxy_user:
        args += ["--proxy-user", target.proxy_user]
    for i in range(n_urls):
        args += [f"https://{target.host}:{port}/small?{i}", "-o", "/dev/null"]
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    t0 = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    seconds = time.perf_counter() - t0
    lines = out.stdout.split()
    versions, codes = set(lines[0::2]), lines[1::2]
    if out.returncode != 0 or codes != ["200"] * n_urls:
        raise BenchError(f"curl through {target.name} failed (exit {out.returncode}): {out.stdout[-300:]!r} "
                         f"{out.stderr[-300:]!r}")
    return seconds, versions


def https_cell(target: CurlTarget, port: int, kind: str, mode: HttpsMode) -> tuple[float, float, set[str]]:
    """req/s and the proxy's CPU ms per request of one cell: `keepalive` (N URLs on one tunnel), `http1` (the same
    with --http1.1), `fresh` (one curl per request, run one after another)."""
    cpu0 = proc_cpu_s(target.pid)
    if kind == "fresh":
        total, versions = 0.0, set()
        for _ in range(mode.fresh_n):
            seconds, got = curl_run(target, port, 1)
            total += seconds
            versions |= got
        n = mode.fresh_n
    else:
        total, versions = curl_run(target, port, mode.keepalive_n, *(("--http1.1",) if kind == "http1" else ()))
        n = mode.keepalive_n
    return n / total, (proc_cpu_s(target.pid) - cpu0) * 1000.0 / n, versions


def https_run(mode: HttpsMode, procs: Procs) -> list[tuple]:
    import statistics
    sess = procs.new_session()
    tmp = procs.tmp
    mitm_ca = (tmp / "mitmproxy-conf" / "mitmproxy-ca-cert.pem").read_text()
    eager_ca = (tmp / "mitmproxy-eager-conf" / "mitmproxy-ca-cert.pem").read_text()
    targets = [
        # the session's ca_pem already holds the public roots: its CA alone, as for mitmdump
        CurlTarget("sandgate", f"http://127.0.0.1:{procs.sg_proxy}",
                   bundle_file(tmp / "b-sandgate.pem", (procs.data_dir / "mitmproxy-ca-cert.pem").read_text()),
                   "allowed.test", procs.sandgate.pid, proxy_user=f"x:{sess['token']}"),
        CurlTarget("mitmdump eager", f"http://127.0.0.1:{procs.eager_port}",
                   bundle_file(tmp / "b-eager.pem", eager_ca), "127.0.0.1", procs.eager.pid),
        CurlTarget("mitmdump lazy", f"http://127.0.0.1:{procs.mitm_port}",
                   bundle_file(tmp / "b-lazy.pem", mitm_ca), "127.0.0.1", procs.mitmdump.pid),
    ]
    print(f"egress bench, HTTPS rows: curl, {mode.keepalive_n} requests per kept-alive tunnel, {mode.fresh_n} fresh "
          f"tunnels, {mode.rounds} round(s); load average {os.getloadavg()[0]:.2f} before start", flush=True)
    cells = [("keepalive", procs.tls_port, "HTTPS kept-alive tunnel, curl offering h2, HTTP/1.1 upstream"),
             ("http1", procs.tls_port, "HTTPS kept-alive tunnel, curl --http1.1"),
             ("fresh", procs.tls_port, "HTTPS fresh tunnels, one curl per request, offering h2"),
             ("keepalive", procs.h2_port, "HTTPS kept-alive tunnel, curl offering h2, h2 upstream")]
    for t in targets:                                      # warm-up: first TLS contexts, certificates, sessions
        curl_run(t, procs.tls_port, 5)
        curl_run(t, procs.h2_port, 5)
    idle0 = {t.name: proc_cpu_s(t.pid) for t in targets}  # what each proxy spends with no request at all
    time.sleep(IDLE_S)
    idle = {t.name: (proc_cpu_s(t.pid) - idle0[t.name]) * 1000.0 / IDLE_S for t in targets}
    print("  idle CPU (ms per second, no requests): " + ", ".join(f"{n} {v:.1f}" for n, v in idle.items()) +
          " (counted in every cell's CPU per request: at 10 fresh tunnels a second, 1 ms/s is 0.1 ms a tunnel)",
          flush=True)
    rows = []
    for kind, port, name in cells:
        rates: dict[str, list[float]] = {t.name: [] for t in targets}
        cpus: dict[str, list[float]] = {t.name: [] for t in targets}
        versions: dict[str, set[str]] = {t.name: set() for t in targets}
        for r in range(mode.rounds):
            for t in (targets if r % 2 == 0 else targets[::-1]):
                rate, cpu_ms, got = https_cell(t, port, kind, mode)
                rates[t.name].append(rate)
                cpus[t.name].append(cpu_ms)
                versions[t.name] |= got
                print(f"  round {r + 1} {kind:9} :{port} {t.name:14}: {rate:8.1f} req/s, {cpu_ms:6.2f} ms CPU/req "
                      f"(HTTP/{'+'.join(sorted(got))})", flush=True)
        got = ", ".join(f"{n.split()[-1] if n != 'sandgate' else n} HTTP/{'+'.join(sorted(versions[n]))}"
                        for n in HTTPS_PROXIES)
        rows.append((name, {n: statistics.median(v) for n, v in rates.items()},
                     {n: statistics.median(v) for n, v in cpus.items()}, got))
    return rows


def https_table(rows: list[tuple]) -> str:
    """req/s (higher is better) and the proxy process's CPU ms per request (lower is better; the ratio is
    mitmdump's ÷ sandgate's, so above 1× is better for both)."""
    out = ["| figure | sandgate | mitmdump (eager, its default) | ratio | mitmdump (lazy) | ratio | protocol the client got |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, rates, cpus, got in rows:
        sg, eager, lazy = (rates[n] for n in HTTPS_PROXIES)
        out.append(f"| {name} (req/s) | {fmt(sg, 0)} | {fmt(eager, 0)} | {ratio(sg, eager)} | {fmt(lazy, 0)} | "
                   f"{ratio(sg, lazy)} | {got} |")
        sg, eager, lazy = (cpus[n] for n in HTTPS_PROXIES)
        out.append(f"| {name} (proxy CPU ms/req; ratio: theirs ÷ ours) | {fmt(sg, 2)} | {fmt(eager, 2)} | "
                   f"{ratio(eager, sg)} | {fmt(lazy, 2)} | {ratio(lazy, sg)} | |")
    return "\n".join(out)


def _stop_spy(spy: subprocess.Popen) -> None:
    """py-spy writes its file on SIGINT (Ctrl-C), not on SIGTERM."""
    if spy.poll() is None:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()


def workers_only(mode: Mode, counts: tuple[int, ...], pin: int) -> int:
    """The --workers rows alone. `pin` > 0: sandgate on the first `pin` CPUs, this load generator and the upstream
    on the others (with two CPUs: one core for sandgate whatever N is, so the rows show what N workers cost on one
    core)."""
    cpus = sorted(os.sched_getaffinity(0))
    pin = min(pin, len(cpus) - 1)
    sg_cpus, load_cpus = (",".join(map(str, cpus[:pin])), cpus[pin:]) if pin > 0 else ("", cpus)
    if sg_cpus:
        os.sched_setaffinity(0, load_cpus)
    with tempfile.TemporaryDirectory(prefix="sandgate-bench-") as tmp:
        up_port = free_port()
        pinned = ["taskset", "-c", ",".join(map(str, load_cpus))] if sg_cpus else []
        upstream = subprocess.Popen(pinned + [sys.executable, str(HERE / "common.py"), "upstream", "--port",
                                              str(up_port)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_port("127.0.0.1", up_port, upstream)
            where = (f"sandgate on CPU {sg_cpus}, load generator and upstream on CPU "
                     f"{','.join(map(str, load_cpus))}" if sg_cpus else "nothing pinned")
            print(f"egress bench (--workers only, {' / '.join(map(str, counts))} workers; {where}): "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
            rows = asyncio.run(workers_row(mode, Path(tmp), up_port, counts, sg_cpus))
        except (BenchError, RuntimeError, OSError, asyncio.TimeoutError) as exc:
            print(f"egress bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        finally:
            stop_process(upstream)
    print()
    print(table(rows, baseline=f"baseline ({counts[0]} worker{'s' if counts[0] > 1 else ''})"))
    print(f"\n- load average at the end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (PostgreSQL is not pinned).")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="sandgate vs bare mitmdump egress benchmark")
    parser.add_argument("--quick", action="store_true", help="short windows, one run (< 1 minute in all)")
    parser.add_argument("--profile", default="", help="py-spy (pip install py-spy) on sandgate during the first "
                        "run, collapsed stacks to this file")
    parser.add_argument("--runs", type=int, help="runs for the summary's spread (default 3, --quick 1)")
    parser.add_argument("--workers-only", action="store_true", help="only the --workers 2 row (needs PostgreSQL)")
    parser.add_argument("--workers", default="1,2", help="with --workers-only: the worker counts, the first the "
                        "baseline (e.g. 1,2,4)")
    parser.add_argument("--pin", type=int, nargs="?", const=1, default=0, metavar="K",
                        help="with --workers-only: sandgate on the first K CPUs (default 1), the load generator and "
                             "the upstream on the others (taskset)")
    parser.add_argument("--https-only", action="store_true", help="only the HTTPS rows (curl through each proxy)")
    parser.add_argument("--no-https", action="store_true", help="leave the HTTPS rows out")
    args = parser.parse_args(argv)
    https_mode = HTTPS_QUICK if args.quick else HTTPS_FULL
    https_rows: list[tuple] = []
    mode = QUICK if args.quick else FULL
    runs = args.runs or (1 if args.quick else 3)
    results: list[dict] = []
    t0 = time.perf_counter()
    if args.workers_only:
        return workers_only(mode, tuple(int(n) for n in args.workers.split(",")), args.pin)
    spy = None
    with tempfile.TemporaryDirectory(prefix="sandgate-bench-") as tmp:
        procs = Procs(Path(tmp))
        try:
            procs.start()
            if args.profile:
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-f", "raw", "-r", "200",
                                        "-p", str(procs.sandgate.pid), "-o", args.profile],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i in range(0 if args.https_only else runs):
                if spy is not None and i == 1:
                    _stop_spy(spy)
                results.append(asyncio.run(run(mode, procs, f"{'quick' if args.quick else 'full'}, run {i + 1}/{runs}")))
            if not args.no_https:
                procs.start_https()
                https_rows = https_run(https_mode, procs)
        except (BenchError, RuntimeError, OSError, asyncio.TimeoutError) as exc:
            print(f"egress bench failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            for name in ("sandgate", "mitmdump", "upstream", "mitmdump-eager", "tls-upstream", "h2-upstream"):
                tail = procs.log_tail(name, 1500)
                if tail.strip():
                    print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)
            return 1
        finally:
            if args.profile and spy is not None:
                _stop_spy(spy)
            procs.stop()
    if results:
        print(f"\nSummary (the README's table; ours and baseline are medians over the runs):\n\n{summary(results)}\n")
    if https_rows:
        print(f"\nHTTPS (curl through each proxy, the same CA bundle size; median of {https_mode.rounds} round(s)):\n\n"
              f"{https_table(https_rows)}\n")
        print(f"- load average after the HTTPS rows: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs.")
    print(f"- total wall time {time.perf_counter() - t0:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
