"""Token revocation across replicas: revoke here (at once); other replicas learn it from the change notification
(gateway/store/changes.py), and from the store (`poll`, the backstop)."""
from __future__ import annotations

import asyncio
import logging

from gateway.audit.log import AuditLog
from gateway.auth.tokens import Revocations
from gateway.store.changes import Change, ChangeFeed, LocalChangeFeed
from gateway.store import Store
from gateway.store.records import Revocation

log = logging.getLogger("sandgate")

POLL_S = 0.25


class RevocationService:
    def __init__(self, store: Store, revocations: Revocations, audit: AuditLog, feed: ChangeFeed | None = None):
        self._store = store
        self._feed: ChangeFeed = feed if feed is not None else LocalChangeFeed()
        self._revocations = revocations
        self._audit = audit

    async def load(self) -> None:
        self._revocations.merge(await self._store.list_revocations())

    async def revoke(self, jti: str, by: str) -> Revocation:
        """Revoke one token id: on this replica at once, on the others within a second (`poll`)."""
        row = await self._store.revoke(jti, by)
        self._revocations.add(jti)
        self._feed.publish(Change("revocation", jti, "revoked"))
        self._audit.record("token.revoked", action="revoke", detail={"jti": jti, "by": by})
        return row

    async def on_change(self, change: Change) -> None:
        """A token revoked on another replica (ChangeHandler): refused here from now on."""
        self._revocations.add(change.id)

    async def resync(self) -> None:
        self._revocations.merge(await self._store.list_revocations())

    async def list(self) -> list[Revocation]:
        return await self._store.list_revocations()

    async def poll(self, interval_s: float = POLL_S) -> None:
        """Forever: merge revocations made on any replica."""
        failing = False
        while True:
            await asyncio.sleep(interval_s)
            try:
                # Re-read a few ids below the last one seen: a concurrent insert may commit out of id order.
                self._revocations.merge(await self._store.list_revocations(max(0, self._revocations.last_id - 50)))
                failing = False
            except Exception:  # noqa: BLE001 - keep polling; the store may come back
                if not failing:
                    log.warning("cannot read token revocations from the store; retrying")
                failing = True
