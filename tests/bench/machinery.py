"""What the speed machinery buys and costs, in process (docs/architecture.md, "Speed machinery and its boundaries").

Run alone: `.venv/bin/python tests/bench/machinery.py`. Prints CPU time per operation:
- an egress decision through the embedded engine with the decision cache on and off (2,000 requests of one
  session shape, the shipped policies), and the cost of one cache key;
- the read set of the shipped policies (regorus's parse and the walk: once per policy revision);
- dispatching a request's 8 mitmproxy events on sandgate's master (HookTable) and on mitmproxy's own master.
Exits 0 whatever the numbers are: measured, not asserted.
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from mitmproxy import hooks
from mitmproxy.options import Options
from mitmproxy.test import tflow
from mitmproxy.tools.dump import DumpMaster

from gateway.egress.proxy import MasterSettings, build_master, drop_inert_addons
from gateway.policy.cache import _READS, read_set
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.inputs import build_egress_input
from gateway.policy.loader import default_policy_dir, load_policy_dir
from gateway.policy.rego import ENTRYPOINTS


def egress_input(i: int) -> dict:
    session = {"id": f"s{i % 7}", "workload": "ephemeral", "labels": {}, "allow": ["api.example.com"], "secrets": [],
               "placeholders": {}, "workspace": "/w", "frozen": False, "created_at": 0, "expires_at": 9e9}
    return build_egress_input(session=session, now=time.time(), method="GET", scheme="https", host="api.example.com",
                              port=443, path=f"/v1/items/{i % 3}",
                              headers=[("user-agent", "x"), ("accept", "*/*"), ("x-request-id", str(i))])


async def cache() -> None:
    engine = EmbeddedEngine(default_policy_dir(), workers=1)
    await engine.start()
    try:
        docs = [egress_input(i) for i in range(2000)]
        for enabled in (True, False):
            engine.cache.enabled = enabled
            engine.cache.set_reads(engine.cache.reads)          # empty
            cpu = time.process_time()
            for doc in docs:
                await engine.decide_quietly("egress", doc)
            print(f"egress decision, cache {'on' if enabled else 'off'}: "
                  f"{1e6 * (time.process_time() - cpu) / len(docs):.0f} us cpu")
        engine.cache.enabled = True
        cpu = time.process_time()
        for doc in docs:
            engine.cache.key("egress", doc)
        print(f"cache key: {1e6 * (time.process_time() - cpu) / len(docs):.1f} us cpu")
    finally:
        await engine.close()
    source = load_policy_dir(default_policy_dir())
    for _ in range(3):
        _READS.clear()
        cpu = time.process_time()
        read_set(source.modules, tuple(ENTRYPOINTS.values()))
        print(f"read set of the shipped policies: {1e3 * (time.process_time() - cpu):.0f} ms cpu")


async def dispatch(n: int = 3000) -> None:
    confdir = Path(tempfile.mkdtemp())
    table, _ = build_master([], MasterSettings(listen=("127.0.0.1", 0), confdir=confdir))
    plain = DumpMaster(Options(confdir=str(confdir)), with_termlog=False, with_dumper=False)
    plain.options.update(onboarding=False, rawtcp=False)
    plain.addons.remove(plain.addons.get("nextlayer"))
    drop_inert_addons(plain)
    events = [hooks.all_hooks[name] for name in ("requestheaders", "request", "responseheaders", "response")]
    flow = tflow.tflow(resp=True)

    async def run(master) -> float:
        cpu = time.process_time()
        for _ in range(n):
            for event in events:
                await master.addons.trigger_event(event(flow))
                await master.addons.trigger_event(hooks.UpdateHook([flow]))
        return 1e6 * (time.process_time() - cpu) / n

    for _ in range(2):
        print(f"8 events per request: mitmproxy's dispatch {await run(plain):.0f} us cpu, "
              f"HookTable {await run(table):.0f} us cpu ({len(table.addons.chain)} top-level addons)")


async def main() -> None:
    await cache()
    await dispatch()


if __name__ == "__main__":
    asyncio.run(main())
