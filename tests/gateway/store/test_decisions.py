"""The decision-log tables on real SQLite and real PostgreSQL: batched inserts, time and kind filters, order."""
from __future__ import annotations

import time
import uuid

import pytest

from gateway.store import Store
from gateway.store.decisions import DecisionStore
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available


@pytest.fixture(params=["sqlite", "postgresql"])
async def decisions(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sandgate.db'}"
    else:
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
        url = PG_URL
    store = Store(url)
    await store.open()
    yield DecisionStore(store)
    store.close()


async def test_decisions_roundtrip_in_order_with_filters(decisions):
    run = uuid.uuid4().hex[:8]
    base = time.time() + 10_000 + hash(run) % 1000        # a time window of this test's own rows
    rows = [{"id": f"{run}-{i}", "ts": base + i, "kind": "egress" if i % 2 else "toolcall", "session": "s",
             "input": {"request": {"path": f"/{i}", "q": "it's \"quoted\" \u00e9"}},
             "result": {"action": "allow", "reasons": ["r"], "codes": ["c"]}, "policy_rev": "rev",
             "engine": "embedded", "latency_us": i} for i in range(10)]
    await decisions.store.run(decisions.append_decisions_sync, rows)
    mine = lambda found: [r for r in found if r["id"].startswith(run)]  # noqa: E731 - earlier runs share the DB
    got = mine(await decisions.list_decisions(since=base, until=base + 100))
    assert [r["id"] for r in got] == [r["id"] for r in rows]
    assert got[3]["input"] == rows[3]["input"] and got[3]["result"]["codes"] == ["c"]
    egress = mine(await decisions.list_decisions(since=base + 2, until=base + 100, kind="egress"))
    assert [r["id"] for r in egress] == [f"{run}-{i}" for i in (3, 5, 7, 9)]


async def test_divergences_roundtrip(decisions):
    base = time.time() + 20_000
    row = {"decision_id": uuid.uuid4().hex, "ts": base, "kind": "egress", "session": "s", "input": {"a": 1},
           "live": {"action": "allow"}, "shadow": {"action": "deny"}, "live_rev": "a", "shadow_rev": "b"}
    await decisions.store.run(decisions.append_divergences_sync, [row])
    got = [r for r in await decisions.list_divergences(since=base - 1) if r["decision_id"] == row["decision_id"]]
    assert len(got) == 1 and got[0]["shadow"] == {"action": "deny"} and got[0]["live_rev"] == "a"


async def test_history_references_roundtrip_and_entries_are_kept_once(decisions):
    """`decisions.history` references entries of `decision_history`; an entry written again (another batch naming
    it) is left as it is; reading puts the entries back into `input.history` with each row's ages."""
    run = uuid.uuid4().hex[:8]
    base = time.time() + 30_000 + hash(run) % 1000
    entry = {"id": "t_1", "step": 1, "age_s": 0.0, "tool": "shell", "summary": "shell: ls \u00e9", "decision": "allow",
             "codes": [], "frozen": False, "writes": []}
    ref = f"{run}{'0' * 24}"
    text = __import__("json").dumps(entry)
    for n in range(2):
        rows = [{"id": f"{run}-{n}", "ts": base + n, "kind": "toolcall", "session": "s", "input": {"tool": {"name": "x"}},
                 "result": {"action": "allow"}, "policy_rev": "rev", "engine": "embedded", "latency_us": 1,
                 "history": [[ref, 1.5 + n]]}]
        await decisions.store.run(decisions.append_decisions_sync, rows, [(ref, text)])
    got = [r for r in await decisions.list_decisions(since=base, until=base + 100) if r["id"].startswith(run)]
    assert [r["input"]["history"] for r in got] == [[{**entry, "age_s": 1.5}], [{**entry, "age_s": 2.5}]]
    assert all(r["input"]["tool"] == {"name": "x"} and "history" not in r for r in got)
