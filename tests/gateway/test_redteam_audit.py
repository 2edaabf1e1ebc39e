"""Red team: one audit row the store cannot hold must not stop every audit write.

Rows are batched: a single bad value (an int past the column's range, as a harness's `"step": 2**70` or a
download past 2 GiB in `bytes_in` on PostgreSQL's int4; a lone surrogate or a NUL in a string; NaN in a JSON
detail) used to fail the whole batch forever. The writer retried it every half second, audit stayed
"degraded", every later row of every session waited behind it, and at `audit.max_pending` the gateway refused
all requests. Real AuditLog on real SQLite and PostgreSQL.
"""
from __future__ import annotations

import math
import uuid

import pytest

from gateway.audit.log import AuditLog
from gateway.store import Store
from tests.conftest import need
from tests.support.pg import PG_DB, PG_URL, pg_available
from tests.support.relay import Relay


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sandgate.db'}"
    else:
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
        url = PG_URL
    s = Store(url)
    await s.open()
    yield s
    s.close()


POISON = [
    {"step": 2 ** 70},
    {"step": -(2 ** 63) - 1},
    {"bytes_in": 3 * 2 ** 30},                      # a 3 GiB download: past int4
    {"http_status": 2 ** 40},
    {"path": "/x\udcff\udcfe"},                     # surrogateescape of invalid UTF-8
    {"host": "a\x00b"},                             # PostgreSQL text cannot hold NUL
    {"method": "G\ud800T"},
    {"detail": {"summary": "x\ud800", "n": math.nan, "k\x00": math.inf}},
    {"reasons": ["a\x00", "b\udc80"]},
]


@pytest.mark.parametrize("poison", POISON, ids=[next(iter(p)) + str(i) for i, p in enumerate(POISON)])
async def test_one_bad_row_does_not_stop_the_audit(store, poison):
    audit = AuditLog(store)
    bad, good = "s_" + uuid.uuid4().hex[:12], "s_" + uuid.uuid4().hex[:12]
    audit.record("toolcall", session=good, action="allow", request_id="before")
    audit.record("toolcall", session=bad, action="allow", request_id="poison", **poison)
    audit.record("toolcall", session=good, action="allow", request_id="after")
    assert await audit.flush() is True
    assert audit.status == "ok" and audit.pending == 0
    assert [e["request_id"] for e in await store.list_events(session=good)] == ["before", "after"]
    stored = await store.list_events(session=bad)
    assert [e["request_id"] for e in stored] == ["poison"]      # kept, with the bad value made storable
    audit.record("egress", session=good, action="deny", request_id="later")
    assert await audit.flush() is True
    assert [e["request_id"] for e in await store.list_events(session=good)] == ["before", "after", "later"]


async def test_a_store_that_is_down_still_keeps_rows():
    """Making bad values storable is not dropping rows: with the store unreachable every row waits, as before."""
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    with Relay(("127.0.0.1", 5432)) as relay:
        s = Store(f"postgresql+psycopg://postgres@127.0.0.1:{relay.port}/{PG_DB}")
        await s.open()
        audit = AuditLog(s)
        relay.cut()
        audit.record("toolcall", session="s_down", action="allow", step=2 ** 70)
        audit.record("toolcall", session="s_down", action="allow", request_id="plain")
        assert await audit.flush() is False
        assert audit.pending == 2 and audit.status == "degraded"
        relay.restore()
        assert await audit.flush() is True
        assert audit.pending == 0 and audit.status == "ok"
        assert [e["request_id"] for e in await s.list_events(session="s_down")][-1] == "plain"
        s.close()
