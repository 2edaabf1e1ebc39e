"""Change notifications: the payload codec (pure), and PgChangeFeed on the real PostgreSQL (two feeds = two
replicas): delivery to the other feed only, resync after LISTEN (re)connects, nothing for malformed payloads."""
from __future__ import annotations

import asyncio

import psycopg
import pytest
from hypothesis import given, strategies as st

from gateway.store.changes import KINDS, Change, LocalChangeFeed, PgChangeFeed, decode_change, encode_change
from tests.conftest import need
from tests.support.pg import PG_DSN, pg_available
from tests.support.waiting import until


@given(st.sampled_from(KINDS), st.text(min_size=1), st.text(), st.text())
def test_codec_roundtrip(kind, ident, what, origin):
    assert decode_change(encode_change(Change(kind, ident, what), origin)) == (origin, Change(kind, ident, what))


@given(st.text())
def test_decode_never_raises(payload):
    decode_change(payload)


@pytest.mark.parametrize("payload", ['', 'null', '[]', '{"o": "x", "k": "nope", "id": "1"}',
                                     '{"o": "x", "k": "session", "id": ""}', '{"o": 1, "k": "session", "id": "a"}',
                                     '{"k": "session", "id": "a"}', '{"o": "x", "k": "session", "id": "a", "w": 3}'])
def test_decode_refuses_malformed(payload):
    assert decode_change(payload) is None


def test_subscribe_refuses_unknown_kinds():
    with pytest.raises(ValueError):
        LocalChangeFeed().subscribe("sessions", object())  # type: ignore[arg-type]


class Recorder:
    def __init__(self):
        self.changes: list[Change] = []
        self.resyncs = 0
        self.got = asyncio.Event()

    async def on_change(self, change: Change) -> None:
        self.changes.append(change)
        self.got.set()

    async def resync(self) -> None:
        self.resyncs += 1


async def test_pg_feed_carries_changes_to_the_other_replica_only():
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    a, b = PgChangeFeed(PG_DSN, channel="sandgate_test_feed"), PgChangeFeed(PG_DSN, channel="sandgate_test_feed")
    ra, rb = Recorder(), Recorder()
    a.subscribe("session", ra)
    b.subscribe("session", rb)
    b.subscribe("approval", rb)
    await a.start()
    await b.start()
    try:
        assert ra.resyncs == 0 or ra.resyncs == 1
        a.publish(Change("session", "s_1", "deleted"))
        a.publish(Change("approval", "a_1", "decided"))
        await asyncio.wait_for(rb.got.wait(), 5)
        await until(lambda: len(rb.changes) == 2, interval_s=0.02)
        assert rb.changes == [Change("session", "s_1", "deleted"), Change("approval", "a_1", "decided")]
        assert ra.changes == []                       # its own change is not applied twice
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute("SELECT pg_notify('sandgate_test_feed', 'not json')")
            # Cut b's listening connection: it reconnects and re-reads (resync) what it may have missed.
            before = rb.resyncs
            await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE query = 'LISTEN sandgate_test_feed' AND pid <> pg_backend_pid()")
        await until(lambda: rb.resyncs > before and b.connected, interval_s=0.02)
        assert rb.resyncs > before and b.reconnects >= 1
        rb.got.clear()
        a.publish(Change("session", "s_2", "created"))
        await asyncio.wait_for(rb.got.wait(), 5)
        assert rb.changes[-1] == Change("session", "s_2", "created")
    finally:
        await a.close()
        await b.close()
