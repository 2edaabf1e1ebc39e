"""audit.max_pending counts every row not yet stored, the batch being written included: while a write to an
unreachable store hangs, the rows it carries still count, so new decisions stay refused (before: the batch
left the count while it was in flight, and a request could slip through the cap until the write failed)."""
from __future__ import annotations

import asyncio

from gateway.audit.log import AuditLog


class HangingStore:
    def __init__(self):
        self.release = asyncio.Event()
        self.calls = 0

    async def append_events(self, rows):
        self.calls += 1
        await self.release.wait()
        raise ConnectionError("store unreachable")


async def test_rows_in_flight_still_count_against_the_cap():
    store = HangingStore()
    audit = AuditLog(store, max_batch=100, max_pending=5)
    for i in range(5):
        audit.record("egress", session="s", action="allow", request_id=f"r{i}")
    assert not audit.accepting and audit.pending == 5
    flush = asyncio.create_task(audit.flush())
    await asyncio.sleep(0.05)                         # the batch is in flight, the write hangs
    assert store.calls == 1
    assert audit.pending == 5 and not audit.accepting and audit.status == "refusing"
    store.release.set()
    assert await flush is False                       # failed: the rows wait again
    assert audit.pending == 5 and not audit.accepting
