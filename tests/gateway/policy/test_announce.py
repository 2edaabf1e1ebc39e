"""Policy revisions across replicas: a new revision here is published once; a revision announced elsewhere makes
this replica reload now (the real embedded engine on a policy directory)."""
from __future__ import annotations

import asyncio

from gateway.store.changes import Change, LocalChangeFeed
from gateway.policy.announce import PolicyRevisions
from gateway.policy.embedded import EmbeddedEngine
from tests.gateway.policy.test_engine import write_policy


class Published(LocalChangeFeed):
    def __init__(self):
        super().__init__()
        self.sent: list[Change] = []

    def publish(self, change: Change) -> None:
        self.sent.append(change)


async def test_reload_on_a_peer_revision_and_announce_own(tmp_path):
    write_policy(tmp_path, 'decision := {"action": "allow", "reasons": [], "codes": []}\n')
    engine = EmbeddedEngine(tmp_path, timeout_s=2.0, workers=1)
    await engine.start()
    feed = Published()
    revs = PolicyRevisions(engine, feed)
    task = asyncio.create_task(revs.announce(interval_s=0.01))
    try:
        first = engine.rev
        await revs.on_change(Change("policy", first, "reloaded"))        # the revision it runs: nothing to do
        assert engine.rev == first
        write_policy(tmp_path, 'decision := {"action": "deny", "reasons": ["x"], "codes": ["x"]}\n')
        await revs.on_change(Change("policy", "somebody-elses-rev", "reloaded"))
        assert engine.rev != first
        assert (await engine.decide("egress", {"request": {"host": "x"}})).action == "deny"
        await asyncio.sleep(0.1)
        assert feed.sent == []            # a reload caused by a peer is not announced back
        write_policy(tmp_path, 'decision := {"action": "allow", "reasons": ["y"], "codes": []}\n')
        await engine.reload()             # this replica's own reload (its directory watch)
        await asyncio.sleep(0.1)
        assert feed.sent == [Change("policy", engine.rev, "reloaded")]
    finally:
        task.cancel()
        await engine.close()
