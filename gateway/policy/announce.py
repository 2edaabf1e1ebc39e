"""Policy revisions across replicas: a replica whose policy changed says so; the others reload at once.

Each replica reads its own policy directory (a shared volume, a ConfigMap) and notices changes by watching it;
the change notification (gateway/store/changes.py) makes the others look now instead of at their next watch tick.
A reload that finds the same files keeps the same revision, so two replicas never bounce a revision around.
"""
from __future__ import annotations

import asyncio
import logging

from gateway.store.changes import Change, ChangeFeed
from gateway.policy.base import PolicyEngine

log = logging.getLogger("sandgate.policy")


class PolicyRevisions:
    def __init__(self, engine: PolicyEngine, feed: ChangeFeed):
        self._engine = engine
        self._feed = feed
        self._announced = engine.rev

    async def on_change(self, change: Change) -> None:
        """Another replica has a new revision: reload unless this one already runs it."""
        if change.id != self._engine.rev:
            await self._engine.reload()
            self._announced = self._engine.rev

    async def resync(self) -> None:
        return None                    # the directory watch covers a missed notification

    async def announce(self, interval_s: float = 0.2) -> None:
        """Forever: publish this replica's revision whenever it changes (an in-memory check, no I/O)."""
        while True:
            await asyncio.sleep(interval_s)
            rev = self._engine.rev
            if rev and rev != self._announced:
                self._announced = rev
                self._feed.publish(Change("policy", rev, "reloaded"))
