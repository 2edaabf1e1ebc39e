"""Approval release latency: from the approver's POST .../approve to the held request reaching the upstream.

Run alone: `.venv/bin/python tests/bench/approval.py [--rounds N]`. Starts a real sandgate and a recording
upstream on loopback, holds N DELETE requests (the default policy asks for DELETE), approves each through the
API and measures approve->forwarded (upstream receipt) and approve->client response. Prints a table
(figure | sandgate | baseline | ratio) where the baseline is the goal (p99 <= 50 ms). Exits 0 whatever the
numbers are: speed is measured, not asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.gateway import Sandgate  # noqa: E402
from tests.support.upstream import Upstream  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Upstream() as up:
        cfg = {"egress": {"private_allow": ["127.0.0.0/8"], "resolve": {"allowed.test": ["127.0.0.1"]},
                          "hold_timeout_s": 60}}
        with Sandgate(Path(tmp), cfg) as sg:
            approver = sg.token("approver", "bench")
            sess = sg.session(allow=["allowed.test"])
            api = requests.Session()
            api.headers["Authorization"] = f"Bearer {approver}"
            forwarded, answered = [], []
            for i in range(args.rounds):
                done = {}

                def client(i=i):
                    r = requests.delete(f"http://allowed.test:{up.port}/bench/{i}", proxies=sess["proxies"],
                                        timeout=60)
                    done["at"], done["status"] = time.time(), r.status_code
                t = threading.Thread(target=client)
                t.start()
                while True:
                    items = api.get(f"{sg.api}/v1/approvals?status=pending&session={sess['id']}", timeout=10).json()
                    if items:
                        break
                    time.sleep(0.005)
                t0 = time.time()
                api.post(f"{sg.api}/v1/approvals/{items[0]['id']}/approve", json={}, timeout=10)
                t.join(30)
                seen = [r for r in up.recorder.requests if r.path == f"/bench/{i}"]
                assert done.get("status") == 200 and len(seen) == 1, (done, len(seen))
                forwarded.append((seen[0].at - t0) * 1000)
                answered.append((done["at"] - t0) * 1000)
    rows = [("approve -> forwarded p50 (ms)", statistics.median(forwarded)),
            ("approve -> forwarded p99 (ms)", pct(forwarded, 0.99)),
            ("approve -> client answered p50 (ms)", statistics.median(answered)),
            ("approve -> client answered p99 (ms)", pct(answered, 0.99))]
    print(f"\nApproval release latency, {args.rounds} held DELETE requests (baseline = goal 50 ms)\n")
    print("| figure | sandgate | baseline | ratio |")
    print("|---|---|---|---|")
    for name, value in rows:
        print(f"| {name} | {value:.1f} | 50.0 | {value / 50.0:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
