"""OAuth2 secrets' shared state (broker/oauth2.py's TokenState), in the store so that replicas and restarts share it.

One row per secret: the newest access token (with the time it stops being used) and the newest rotated refresh
token, both encrypted with the data dir's key (`seal`/`unseal`, the local secret store's Fernet key), and a lease:
a replica refreshes only while it holds the lease (taken by one conditional UPDATE, so two replicas never burn
one refresh token); the others wait for it to end and then use what it stored. A lease a crashed replica left
ends by itself after LEASE_S.
"""
from __future__ import annotations

import asyncio
import secrets
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Optional

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

from broker.oauth2 import AccessToken
from gateway.store.bulk import placeholder
from gateway.store.store import Store, StoreError

LEASE_S = 30.0            # longer than a token request may take (broker.oauth2.TOKEN_TIMEOUT_S)
POLL_S = 0.05


class OAuth2TokenRow(SQLModel, table=True):
    __tablename__ = "oauth2_tokens"
    name: str = Field(primary_key=True)
    access: str = Field(default="", sa_column=Column(Text, nullable=False))          # sealed, or ""
    refresh_at: float = 0.0
    refresh_token: str = Field(default="", sa_column=Column(Text, nullable=False))   # sealed, or ""
    lease_owner: str = ""
    lease_until: float = 0.0
    updated_at: float = 0.0


class StoreTokenState:
    def __init__(self, store: Store, seal: Callable[[str], str], unseal: Callable[[str], str],
                 clock: Callable[[], float] = time.time):
        self.store = store
        self._seal, self._unseal = seal, unseal
        self._clock = clock
        self.owner = secrets.token_hex(8)           # this process

    @property
    def _mark(self) -> str:
        return placeholder(self.store.engine.dialect.paramstyle)

    def _take_sync(self, name: str, now: float) -> bool:
        m = self._mark

        def work(cur: Any) -> bool:
            cur.execute(f"INSERT INTO oauth2_tokens (name, access, refresh_at, refresh_token, lease_owner, "
                        f"lease_until, updated_at) VALUES ({m}, '', 0, '', '', 0, {m}) ON CONFLICT (name) DO NOTHING",
                        (name, now))
            cur.execute(f"UPDATE oauth2_tokens SET lease_owner = {m}, lease_until = {m} WHERE name = {m} AND "
                        f"(lease_until < {m} OR lease_owner = {m})", (self.owner, now + LEASE_S, name, now,
                                                                     self.owner))
            return cur.rowcount == 1
        return self.store.driver(work, commit=True)

    def _release_sync(self, name: str) -> None:
        m = self._mark
        self.store.driver(lambda cur: cur.execute(
            f"UPDATE oauth2_tokens SET lease_until = 0, lease_owner = '' WHERE name = {m} AND lease_owner = {m}",
            (name, self.owner)), commit=True)

    @asynccontextmanager
    async def lease(self, name: str) -> AsyncIterator[None]:
        deadline = self._clock() + LEASE_S + 5
        while not await self.store.run(self._take_sync, name, self._clock()):
            if self._clock() > deadline:
                raise StoreError("oauth2: another replica holds the refresh lease")
            await asyncio.sleep(POLL_S)
        try:
            yield
        finally:
            await self.store.run(self._release_sync, name)

    def _load_sync(self, name: str) -> Optional[tuple[str, float, str]]:
        rows = self.store.driver_rows(f"SELECT access, refresh_at, refresh_token FROM oauth2_tokens WHERE name = "
                                       f"{self._mark}", (name,))
        return (rows[0][0] or "", float(rows[0][1] or 0), rows[0][2] or "") if rows else None

    async def load(self, name: str) -> tuple[AccessToken | None, str | None]:
        row = await self.store.run(self._load_sync, name)
        if row is None:
            return None, None
        access, refresh_at, refresh = row
        try:
            token = AccessToken(self._unseal(access), refresh_at) if access else None
            rotated = self._unseal(refresh) if refresh else None
        except ValueError:
            return None, None            # another key (or a damaged row): mint afresh from the configured source
        return token, rotated

    def _save_sync(self, name: str, access: str, refresh_at: float, refresh: str, now: float) -> None:
        m = self._mark
        self.store.driver(lambda cur: cur.execute(
            f"UPDATE oauth2_tokens SET access = {m}, refresh_at = {m}, refresh_token = {m}, updated_at = {m} "
            f"WHERE name = {m}", (access, refresh_at, refresh, now, name)), commit=True)

    async def save(self, name: str, token: AccessToken, refresh_token: str | None) -> None:
        await self.store.run(self._save_sync, name, self._seal(token.value), token.refresh_at,
                             self._seal(refresh_token) if refresh_token else "", self._clock())
