"""PostgreSQL gateway benchmark: pgbench select-only through the gateway, a bare uvloop byte relay and direct,
in one run.

Run from the repository root as root (the cluster runs as the `postgres` user; initdb refuses root):

    .venv/bin/python tests/bench/postgres.py             # 20 s per run
    .venv/bin/python tests/bench/postgres.py --quick     # 5 s per run

It starts a PostgreSQL cluster of its own (tests/support/pgcluster.py: initdb, scram-sha-256, TLS), fills it
with `pgbench -i -s 10`, and runs `pgbench -S -c 8 -j 2 -n` (select-only, 8 clients) with `-M simple` and
`-M prepared` three ways:
- direct: to the cluster (TLS, `sslmode=require`);
- relay: through tests/bench/pgrelay.py, a bare uvloop byte relay (TLS end to end through it);
- adapter: tests/bench/pgadapter.py, the gateway's protocol adapter with every statement allowed at once by an
  in-process judge (what the wire protocol costs before any decision);
- gateway: through `sandgate serve`'s PostgreSQL gateway with a session's URL (TLS to the gateway, TLS from the
  gateway to the cluster: two TLS legs; every statement decided by the tool-call policy).
Figures: transactions/s and p50 latency (pgbench `-l` per-transaction log); the gateway's RSS before and after
(the statements it served divided into the growth: bytes kept per statement). Ratios are gateway / relay.
`--memory N` (default 100,000; 0 skips it) then sends N more select-only statements through the gateway
(`pgbench -S -M simple -c 8 -t N/8`: a new text each time) and samples the gateway's RSS every second: flat
means the RSS after the first tenth of them stays where it is to the end; `sandgate_audit_pending` is sampled
beside it (bounded means the store's writer keeps up). `--profile DIR` records the gateway with py-spy during
its runs (`DIR/gateway-MODE.txt`, raw stacks; py-spy installed beside the interpreter, not a dependency): the
sampling slows the gateway, so take figures from a run without it.
CPU ms a statement: the process's CPU time (user + system, the gateway's policy workers included) over the
statements it served: what the load of the machine moves least.
Goals (issue N): >= 0.7x the relay's throughput; <= 0.2 ms p50 added over the relay for a cached decision.
Nothing is asserted.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.gateway import Sandgate  # noqa: E402
from tests.support.pgcluster import APP_PASSWORD, PgCluster  # noqa: E402
from tests.support.upstream import free_port  # noqa: E402


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children (the gateway's policy workers), so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds so far of the process's event-loop thread (`loop`: the main thread) and of its other threads
    together (`threads`: the store's writers, the decision log's, the policy's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"loop": 0.0, "threads": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out["loop" if int(task.name) == pid else "threads"] += (int(fields[11]) + int(fields[12])) / ticks
    return out


def pgbench(conninfo: dict, mode: str, seconds: int, env: dict, logdir: Path) -> dict:
    for old in logdir.glob("pgbench_log.*"):
        old.unlink()
    cmd = ["pgbench", "-n", "-S", "-c", "8", "-j", "2", "-T", str(seconds), "-M", mode, "-l",
           "--log-prefix", str(logdir / "pgbench_log"), "-h", conninfo["host"], "-p", str(conninfo["port"]),
           "-U", conninfo["user"], conninfo["dbname"]]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, cwd=logdir,
                         timeout=seconds + 120)
    if res.returncode != 0:
        raise RuntimeError(f"pgbench failed: {res.stderr[-2000:]}")
    tps = float(re.search(r"tps = ([\d.]+) \(without initial", res.stdout).group(1))
    txns = int(re.search(r"number of transactions actually processed: (\d+)", res.stdout).group(1))
    latencies = []
    for path in logdir.glob("pgbench_log.*"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                latencies.append(int(parts[2]))
    return {"tps": tps, "txns": txns, "p50_ms": statistics.median(latencies) / 1000 if latencies else float("nan")}


def memory(sg: Sandgate, path: tuple[dict, dict], statements: int, logdir: Path) -> None:
    """N statements through the gateway, its RSS sampled every second (printed as a row of the table)."""
    conninfo, env = path
    cmd = ["pgbench", "-n", "-S", "-c", "8", "-j", "2", "-t", str(max(1, statements // 8)), "-M", "simple",
           "-h", conninfo["host"], "-p", str(conninfo["port"]), "-U", conninfo["user"], conninfo["dbname"]]
    samples = [(0.0, sg.rss_kb())]
    pending = [audit_pending(sg)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env}, cwd=logdir)
    while proc.poll() is None:
        time.sleep(1.0)
        samples.append((time.monotonic() - started, sg.rss_kb()))
        pending.append(audit_pending(sg))
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed: {err[-2000:]}")
    elapsed = samples[-1][0] or 1.0
    settled = next((kb for t, kb in samples if t >= elapsed / 10), samples[-1][1])
    last, peak = samples[-1][1], max(kb for _, kb in samples)
    growth = (last - settled) * 1024 / (statements * 0.9)
    quarters = " -> ".join(str(next((kb for t, kb in samples if t >= elapsed * q), last) // 1024)
                           for q in (0.25, 0.5, 0.75))
    print(f"| gateway RSS over {statements:,} more statements ({elapsed:.0f} s, sampled every second) | "
          f"{samples[0][1] // 1024} -> {settled // 1024} (a tenth) -> {quarters} (quarters) -> {last // 1024} MiB, "
          f"peak {peak // 1024} | | | | {growth:.1f} B/statement after the first tenth | |")
    print(f"| sandgate_audit_pending over them (sampled every second) | max {max(pending):,}, last "
          f"{pending[-1]:,}, quarters {' -> '.join(f'{pending[int((len(pending) - 1) * q)]:,}' for q in (0.25, 0.5, 0.75))}"
          f" | | | | | |")


def audit_pending(sg: Sandgate) -> int:
    """The gateway's audit rows waiting to be written (`sandgate_audit_pending` on /metrics)."""
    text = sg.call("GET", "/metrics").text
    found = re.search(r"^sandgate_audit_pending (\S+)$", text, re.M)
    return int(float(found.group(1))) if found else -1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--memory", type=int, default=100_000)
    ap.add_argument("--paths", default="direct,relay,relay-tls,gateway,adapter",
                    help="which paths to run (comma-separated; the table shows only runs that were made)")
    ap.add_argument("--modes", default="simple,prepared")
    ap.add_argument("--profile", default="", help="a directory: py-spy records the gateway during its runs "
                                                  "(py-spy installed beside the interpreter, not a dependency)")
    args = ap.parse_args()
    seconds = args.seconds or (5 if args.quick else 20)
    tmp = Path(tempfile.mkdtemp(prefix="sandgate-pgbench-"))
    os.chmod(tmp, 0o777)
    cluster = PgCluster().start()
    relay = relay_tls = sg = adapter = None
    try:
        cluster._as_pg("pgbench", "-i", "-s", "10", "-q", "-h", str(cluster.sockdir), "-p", str(cluster.port),
                       "-U", "postgres", "app")
        cluster.psql_local("ALTER TABLE pgbench_accounts OWNER TO app; ALTER TABLE pgbench_branches OWNER TO app; "
                           "ALTER TABLE pgbench_tellers OWNER TO app; ALTER TABLE pgbench_history OWNER TO app")
        relay_port = free_port()
        relay = subprocess.Popen([sys.executable, str(ROOT / "tests/bench/pgrelay.py"), str(relay_port),
                                  "127.0.0.1", str(cluster.port)], stdout=subprocess.PIPE, text=True)
        assert relay.stdout is not None and relay.stdout.readline().strip() == "relay ready"
        sg = Sandgate(tmp / "sg", {
            "proxy": {"postgres_listen": f"127.0.0.1:{free_port()}"},
            "databases": {"prod": {"upstream": f"localhost:{cluster.port}", "dbname": "app", "user": "app",
                                   "password": "env:BENCH_DB_PASSWORD", "upstream_ca": cluster.ca_file}}},
            env={"BENCH_DB_PASSWORD": APP_PASSWORD}).start()
        adapter_port = free_port()
        (tmp / "adapter").mkdir()
        adapter = subprocess.Popen([sys.executable, str(ROOT / "tests/bench/pgadapter.py"), str(tmp / "adapter"),
                                    str(adapter_port), f"localhost:{cluster.port}", cluster.ca_file, APP_PASSWORD],
                                   stdout=subprocess.PIPE, text=True)
        assert adapter.stdout is not None and adapter.stdout.readline().strip() == "adapter ready"
        relay_tls_port = free_port()     # TLS ended and begun again, as the gateway does: like with like
        relay_tls = subprocess.Popen([sys.executable, str(ROOT / "tests/bench/pgrelay.py"), str(relay_tls_port),
                                      "localhost", str(cluster.port), "--tls", str(tmp / "adapter/postgres-tls.pem"),
                                      str(tmp / "adapter/postgres-tls.key"), cluster.ca_file],
                                     stdout=subprocess.PIPE, text=True)
        assert relay_tls.stdout is not None and relay_tls.stdout.readline().strip() == "relay ready"
        sess = sg.session(databases=["prod"])
        from urllib.parse import urlsplit
        u = urlsplit(sess["env"]["PROD_DATABASE_URL"])
        plain = {"PGPASSWORD": APP_PASSWORD, "PGSSLMODE": "require"}
        paths = {
            "direct": ({"host": "127.0.0.1", "port": cluster.port, "user": "app", "dbname": "app"}, plain),
            "relay": ({"host": "127.0.0.1", "port": relay_port, "user": "app", "dbname": "app"}, plain),
            # the server's certificate is not the one the client sees, so no SCRAM channel binding (the gateway
            # offers none either)
            "relay-tls": ({"host": "127.0.0.1", "port": relay_tls_port, "user": "app", "dbname": "app"},
                          {**plain, "PGCHANNELBINDING": "disable"}),
            "gateway": ({"host": u.hostname, "port": u.port, "user": u.username, "dbname": "prod"},
                        {"PGPASSWORD": u.password, "PGSSLMODE": "require"}),
            "adapter": ({"host": "127.0.0.1", "port": adapter_port, "user": "s_bench000000000000", "dbname": "prod"},
                        {"PGPASSWORD": "bench-placeholder", "PGSSLMODE": "require"}),
        }
        paths = {name: paths[name] for name in args.paths.split(",")}
        modes = args.modes.split(",")
        results: dict = {}
        rss: dict = {}
        pids = {"gateway": sg.proc.pid, "adapter": adapter.pid, "relay": relay.pid, "relay-tls": relay_tls.pid}
        for mode in modes:
            for name, (conninfo, env) in paths.items():
                cpu_before = cpu_s(pids[name]) if name in pids else 0.0
                split_before = thread_cpu_s(pids[name]) if name in ("gateway", "adapter") else None
                if name == "gateway":
                    rss.setdefault("before", sg.rss_kb())
                if name == "adapter":
                    rss.setdefault("adapter_before", rss_kb(adapter.pid))
                spy = None
                if name == "gateway" and args.profile:
                    spy = subprocess.Popen([str(Path(sys.executable).with_name("py-spy")), "record", "-s", "-r",
                                            "200", "-f", "raw", "-o", f"{args.profile}/gateway-{mode}.txt",
                                            "-p", str(sg.proc.pid)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                result = results[(name, mode)] = pgbench(conninfo, mode, seconds, env, tmp)
                if spy is not None:
                    spy.send_signal(2)
                    spy.wait(60)
                n = max(result["txns"], 1)
                if name in pids:
                    result["cpu_ms"] = (cpu_s(pids[name]) - cpu_before) * 1000 / n
                if split_before is not None:
                    after = thread_cpu_s(pids[name])
                    result["loop_ms"] = (after["loop"] - split_before["loop"]) * 1000 / n
                    result["threads_ms"] = (after["threads"] - split_before["threads"]) * 1000 / n
                if name == "gateway":
                    rss["after"] = sg.rss_kb()
                if name == "adapter":
                    rss["adapter_after"] = rss_kb(adapter.pid)
        print(f"\npgbench -S -c 8 -j 2 -T {seconds} (select-only), {os.cpu_count()} cores, PostgreSQL "
              f"{cluster.psql_local('SHOW server_version').strip()}\n")
        names = [p for p in ("gateway", "adapter", "relay", "relay-tls", "direct") if p in paths]
        ratios = [(a, b) for a, b in (("gateway", "relay"), ("adapter", "relay"), ("gateway", "relay-tls"),
                                      ("adapter", "relay-tls")) if a in paths and b in paths]
        print("| figure | " + " | ".join(names) + "".join(f" | {a} / {b}" for a, b in ratios) + " |")
        print("|---" * (1 + len(names) + len(ratios)) + "|")

        def row(label: str, cell, ratio) -> None:
            cells = [cell(results[(p, mode)]) for p in names]
            print(f"| {label}, {mode} | " + " | ".join(cells)
                  + "".join(f" | {ratio(results[(a, mode)], results[(b, mode)])}" for a, b in ratios) + " |")

        def ms(key: str):
            return lambda r: f"{r[key]:.3f}" if key in r else ""

        for mode in modes:
            row("tps", lambda r: f"{r['tps']:,.0f}", lambda a, b: f"{a['tps'] / b['tps']:.2f}x")
            row("p50 ms", ms("p50_ms"), lambda a, b: f"+{a['p50_ms'] - b['p50_ms']:.3f} ms")
            row("CPU ms a statement", ms("cpu_ms"),
                lambda a, b: f"{a['cpu_ms'] / b['cpu_ms']:.1f}x" if "cpu_ms" in a and "cpu_ms" in b else "")
            row("of which the loop thread", ms("loop_ms"), lambda a, b: "")
        if "gateway" in paths:
            served = sum(results[("gateway", m)]["txns"] for m in modes)
            growth = (rss["after"] - rss["before"]) * 1024
            print(f"| gateway RSS over {served:,} statements: {rss['before'] // 1024} -> {rss['after'] // 1024} MiB, "
                  f"{growth / max(served, 1):.1f} B/statement |")
        if "adapter" in paths:
            adapted = sum(results[("adapter", m)]["txns"] for m in modes)
            a_growth = (rss["adapter_after"] - rss["adapter_before"]) * 1024
            print(f"| adapter RSS over {adapted:,} statements: {rss['adapter_before'] // 1024} -> "
                  f"{rss['adapter_after'] // 1024} MiB, {a_growth / max(adapted, 1):.1f} B/statement |")
        if args.memory and "gateway" in paths:
            memory(sg, paths["gateway"], args.memory, tmp)
        return 0
    finally:
        if sg is not None:
            sg.stop()
        for proc in (relay, relay_tls, adapter):
            if proc is not None:
                proc.terminate()
                proc.wait()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
