"""The package firewall at the size of the public data: 200k synthetic OSV records shaped like
ossf/malicious-packages (npm and PyPI; most npm records one range from `introduced: "0"`, most PyPI records a
`versions` list; a `details` text, references, database_specific), in one zip, loaded with the real CLI.

Run alone: `.venv/bin/python tests/bench/packages.py [--records N] [--pg]`. Rows:
- `sandgate packages load` of the zip (a subprocess, wall time, store included: SQLite in a temporary data dir,
  or the test PostgreSQL with --pg);
- a replica taking the load in (the firewall's refresh from revision 0: read + index build), and its RSS growth;
- one lookup (`advisories(ecosystem, name, version)`): a package no advisory names, a listed package's first
  lookup (compiles its entries), a listed package again, a PyPI download recognised and decided from its URL.
Prints a Markdown table; exits 0 whatever the numbers are (speed is measured, not asserted).
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gateway.packages.firewall import PackageFirewall  # noqa: E402
from gateway.packages.urls import registries_for  # noqa: E402
from gateway.store import Store  # noqa: E402
from gateway.store.packages import PackageStore  # noqa: E402

DETAILS = ("\n---\n_-= Per source details. Do not edit below this line.=-_\n\n## Source: ossf-package-analysis "
           "(%s)\nThe package executes code at install time that reads credentials and sends them to a remote host.\n")


def synthetic(i: int, rnd: random.Random) -> dict:
    npm = rnd.random() < 0.55
    eco = "npm" if npm else "PyPI"
    name = (f"@scope{i % 977}/pkg-{i}" if npm and i % 5 == 0 else f"pkg-{i}-{rnd.randrange(1 << 30):x}")
    affected: dict = {"package": {"ecosystem": eco, "name": name}}
    if npm and rnd.random() < 0.8:
        affected["ranges"] = [{"type": "SEMVER", "events": [{"introduced": "0"}]}]
    else:
        affected["versions"] = [f"{rnd.randrange(5)}.{rnd.randrange(10)}.{rnd.randrange(20)}"
                                for _ in range(rnd.randrange(1, 4))]
    affected["database_specific"] = {"cwes": [{"cweId": "CWE-506", "name": "Embedded Malicious Code"}]}
    return {"modified": "2025-09-17T00:29:08Z", "published": "2025-09-15T23:42:49Z", "schema_version": "1.5.0",
            "id": f"MAL-2025-{i}", "summary": f"Malicious code in {name} ({eco})",
            "details": DETAILS % f"{rnd.randrange(1 << 62):x}", "affected": [affected],
            "references": [{"type": "ARTICLE", "url": f"https://example.invalid/advisory/{i}"}]}


def build_zip(path: Path, n: int) -> None:
    rnd = random.Random(7)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for i in range(n):
            record = synthetic(i, rnd)
            eco = record["affected"][0]["package"]["ecosystem"].lower()
            zf.writestr(f"osv/malicious/{eco}/{record['affected'][0]['package']['name']}/{record['id']}.json",
                        json.dumps(record, indent=2))


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def per_call_us(fn, n: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--pg", action="store_true", help="load into the test PostgreSQL (SANDGATE_TEST_PG_DB)")
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "osv.zip"
        started = time.perf_counter()
        build_zip(archive, args.records)
        print(f"built {args.records} records ({archive.stat().st_size >> 20} MiB zip) in "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
        data = Path(tmp) / "data"
        env = dict(os.environ)
        if args.pg:
            from tests.support.pg import PG_URL
            env["SANDGATE_STORE__URL"] = PG_URL
        url = env.get("SANDGATE_STORE__URL") or f"sqlite:///{data / 'sandgate.db'}"
        started = time.perf_counter()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, "-m", "gateway", "packages", "load", str(archive), "--data-dir",
                              str(data)], capture_output=True, text=True, env=env)
        load_s = time.perf_counter() - started
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = cpu.ru_utime + cpu.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
        print(out.stdout.strip() or out.stderr.strip(), file=sys.stderr)
        rows.append((f"`packages load` {args.records // 1000}k records, wall", f"{load_s:.1f} s", "60 s",
                     f"{load_s / 60:.2f}"))
        rows.append((f"`packages load` {args.records // 1000}k records, CPU (the CLI's process)", f"{cpu_s:.1f} s",
                     "60 s", f"{cpu_s / 60:.2f}"))
        rows.append(("load average (1 min) while it ran", f"{os.getloadavg()[0]:.1f}", "", ""))
        store = Store(url)
        await store.open()
        try:
            firewall = PackageFirewall(PackageStore(store), registries_for([]), 1 << 25)
            before = rss_kb()
            started = time.perf_counter()
            await firewall.refresh()
            refresh_s = time.perf_counter() - started
            grown = (rss_kb() - before) / 1024
            rows.append(("a replica takes the load in (read + index)", f"{refresh_s:.1f} s", "", ""))
            rows.append(("its index in memory (RSS growth)", f"{grown:.0f} MiB", "", ""))
            index = firewall.index
            rnd = random.Random(7)
            listed = [synthetic(i, rnd) for i in range(2000)]
            npm_names = [r["affected"][0]["package"]["name"] for r in listed
                         if r["affected"][0]["package"]["ecosystem"] == "npm"]
            clean = per_call_us(lambda: index.advisories("npm", "left-pad", "1.3.0"))
            rows.append(("lookup, a package no advisory names", f"{clean:.2f} µs", "", ""))
            first_start = time.perf_counter()
            for name in npm_names[:1000]:
                index.advisories("npm", name, "1.0.0")
            first = (time.perf_counter() - first_start) / 1000 * 1e6
            rows.append(("lookup, a listed package, first time (compiles)", f"{first:.1f} µs", "", ""))
            again = per_call_us(lambda: index.advisories("npm", npm_names[0], "1.0.0"))
            rows.append(("lookup, a listed package again", f"{again:.2f} µs", "", ""))
            url_path = "/packages/ab/cd/ef/requests-2.31.0-py3-none-any.whl"
            decided = per_call_us(lambda: firewall.download("files.pythonhosted.org", "GET", url_path), 5000)
            rows.append(("a PyPI download recognised and looked up", f"{decided:.1f} µs", "", ""))
        finally:
            store.close()
    print("| figure | ours | goal | ratio |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    asyncio.run(main())
