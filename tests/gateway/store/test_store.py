"""The store layer on real SQLite and real PostgreSQL (127.0.0.1:5432, database `test`)."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from gateway.store import Store
from gateway.store.models import ApprovalRow, SessionRow
from tests.conftest import need
from tests.support.pg import PG_URL, pg_available



@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sandgate.db'}"
    else:
        need(pg_available(), "PostgreSQL at 127.0.0.1:5432 (database test)")
        url = PG_URL
    s = Store(url)
    await s.open()
    yield s
    s.close()


def session_row(sid: str) -> SessionRow:
    now = time.time()
    return SessionRow(id=sid, workload="ephemeral", labels={"a": "b"}, allow=["x.test"], secrets=[],
                      placeholders={}, created_at=now, expires_at=now + 60)


async def test_sessions_roundtrip(store):
    sid = "s_" + uuid.uuid4().hex[:12]
    await store.put_session(session_row(sid))
    got = await store.get_session(sid)
    assert got["labels"] == {"a": "b"} and got["allow"] == ["x.test"]
    updated = await store.update_session(sid, frozen=True)
    assert updated["frozen"] is True


async def test_approval_compare_and_set_has_one_winner(store):
    aid = "a_" + uuid.uuid4().hex[:12]
    now = time.time()
    await store.put_approval(ApprovalRow(id=aid, session="s_x", kind="toolcall", binding=uuid.uuid4().hex,
                                         created_at=now, expires_at=now + 60))
    results = await asyncio.gather(*(store.cas_approval(aid, "pending", {"status": st})
                                     for st in ("approved", "denied", "approved", "denied")))
    assert sorted(results) == [False, False, False, True]
    row = await store.get_approval(aid)
    assert row["status"] in ("approved", "denied")
    assert await store.mark_used(aid) is (row["status"] == "approved")
    assert await store.mark_used(aid) is False


async def test_events_are_ordered_per_session(store):
    sid = "s_" + uuid.uuid4().hex[:12]
    rows = [{"session": sid, "step": i, "kind": "egress", "action": "allow", "reasons": ['quote " ok'],
             "codes": ["c"], "request_id": f"r{i}", "method": "GET", "host": "x.test", "path": "/", "http_status": 200,
             "bytes_in": 1, "bytes_out": 0, "policy_rev": "r", "detail": {"k": [1, 2]}, "ts": time.time()}
            for i in range(5)]
    await store.append_events(rows[:2])
    await store.append_events(rows[2:])
    got = await store.list_events(session=sid)
    assert [e["seq"] for e in got] == [1, 2, 3, 4, 5]
    assert got[0]["reasons"] == ['quote " ok'] and got[0]["detail"] == {"k": [1, 2]}


async def test_open_adds_columns_an_older_schema_lacks(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE sessions (id VARCHAR PRIMARY KEY, workload VARCHAR NOT NULL, labels JSON NOT NULL,"
                   " allow JSON NOT NULL, secrets JSON NOT NULL, placeholders JSON NOT NULL, workspace VARCHAR,"
                   " ca_path VARCHAR, frozen BOOLEAN, created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL,"
                   " deleted_at FLOAT, created_by VARCHAR)")
        db.execute("INSERT INTO sessions VALUES ('s_old', 'ephemeral', '{}', '[]', '[]', '{}', '/w', '/ca', 0,"
                   " 1.0, 9999999999.0, NULL, 'h')")
    store = Store(f"sqlite:///{path}")
    await store.open()
    try:
        row = await store.get_session("s_old")
        assert row["updated_at"] == 0.0 and row["workload"] == "ephemeral"
        await store.put_session(session_row("s_new"))
        assert (await store.get_session("s_new"))["labels"] == {"a": "b"}
    finally:
        store.close()


async def test_session_paths_roundtrip(store):
    from gateway.toolcalls.history import paths_from_rows

    sid, other = "s_" + uuid.uuid4().hex[:12], "s_" + uuid.uuid4().hex[:12]
    await store.append_session_paths([
        {"session": sid, "path": "/workspace/h", "kind": "link", "target": "~", "content": None, "ts": 1.0},
        {"session": sid, "path": "/workspace/x.sh", "kind": "file", "target": None, "content": "rm -rf ~\n" * 500,
         "ts": 1.0},
        {"session": other, "path": "/workspace/y", "kind": "file", "target": None, "content": None, "ts": 1.0}])
    await store.append_session_paths([
        {"session": sid, "path": "/workspace/h", "kind": "file", "target": None, "content": None, "ts": 2.0}])
    await store.append_session_paths([])
    rows = await store.list_session_paths(sid)
    assert [r["path"] for r in rows] == ["/workspace/h", "/workspace/x.sh", "/workspace/h"]
    links, files = paths_from_rows(rows)
    assert links == {} and files == {"/workspace/x.sh": "rm -rf ~\n" * 500, "/workspace/h": None}
    assert [r["path"] for r in await store.list_session_paths(sid, limit=1)] == ["/workspace/h"]
    assert [r["path"] for r in await store.list_session_paths(other)] == ["/workspace/y"]


async def test_audit_pending_rows_are_visible_until_written(store):
    from gateway.audit.log import AuditLog

    audit = AuditLog(store)
    s1, s2 = "s_" + uuid.uuid4().hex[:12], "s_" + uuid.uuid4().hex[:12]
    audit.record("toolcall", session=s1, action="deny", request_id="t1")
    audit.record("egress", session=s1, action="allow")
    audit.record("toolcall", session=s2, action="allow")
    assert [r["request_id"] for r in audit.queued("toolcall", s1)] == ["t1"]
    await audit.flush()
    assert audit.queued("toolcall", s1) == []
    assert [e["request_id"] for e in await store.list_events(session=s1, kind="toolcall")] == ["t1"]


@pytest.mark.parametrize("seed", range(4))
async def test_toolcall_memory_keeps_what_the_full_reads_keep(store, seed):
    """One trip for a tool call's history and paths (driver-level, the last row per path only) gives the same
    history and the same links and files as the full reads."""
    import random

    from gateway.toolcalls.history import history_entries, paths_from_rows

    rnd = random.Random(seed)
    sid = "s_" + uuid.uuid4().hex[:12]
    now = time.time()
    await store.append_events([{"ts": now + i, "session": sid, "step": i, "kind": rnd.choice(["toolcall", "egress"]),
                                "action": rnd.choice(["allow", "deny"]), "reasons": ["r"], "codes": [f"c{i}"],
                                "request_id": f"t_{i}", "detail": {"tool": "shell", "summary": f"x{i}",
                                                                   "frozen": rnd.random() < 0.2, "writes": [f"/w/{i}"]}}
                               for i in range(60)])
    rows = [{"session": sid, "path": f"/w/p{rnd.randrange(12)}", "kind": rnd.choice(["link", "file"]),
             "target": rnd.choice([None, "/w/t"]), "content": rnd.choice([None, "echo hi", "x" * 50]), "ts": now}
            for _ in range(rnd.randrange(0, 80))]
    for i in range(0, len(rows), 7):
        await store.append_session_paths(rows[i:i + 7])
    every = await store.list_session_paths(sid, 10 ** 6)
    for limit in (500, 10):
        recent, paths = await store.run(store._toolcall_memory, sid, 20, limit)
        full_events = await store.list_events(session=sid, kind="toolcall", limit=20, newest=True)
        assert history_entries(recent, now) == history_entries(full_events, now)
        # Every path the session left, the content only of those whose last row is among the newest `limit`.
        links, files = paths_from_rows(every)
        newest = {r["path"] for r in every[len(every) - limit:]} if limit < len(every) else {r["path"] for r in every}
        assert paths_from_rows(paths) == (links, {p: c if p in newest else None for p, c in files.items()})
        assert not paths.truncated
    for max_paths in (1, 5):                 # past the bound: the newest paths, and `truncated`
        _, paths = await store.run(store._toolcall_memory, sid, 20, 500, max_paths)
        distinct = list(dict.fromkeys(r["path"] for r in reversed(every)))
        assert sorted(r["path"] for r in paths) == sorted(distinct[:max_paths])
        assert paths.truncated == (len(distinct) > max_paths)


async def test_toolcall_memory_reads_wire_statements_sql_rows_as_history(store):
    """A wire statement's decision has no `toolcall` row: its `sql` rows carry it (the call's id as request_id;
    a prepared statement run again repeats it). The history read from the store is the last 20 distinct
    decisions of both kinds, read past repeats; a refusal the gateway made before any decision (no request_id)
    is no entry."""
    from gateway.toolcalls.history import history_entries

    sid = "s_" + uuid.uuid4().hex[:12]
    now = time.time()
    rows = [{"ts": now, "session": sid, "kind": "toolcall", "action": "allow", "request_id": "t_api",
             "detail": {"tool": "shell", "summary": "shell: ls"}}]
    for i in range(30):
        for _ in range(1 if i < 25 else 40):                        # the last five run again and again
            rows.append({"ts": now, "session": sid, "kind": "sql", "action": "allow", "request_id": f"t_{i}",
                         "detail": {"tool": "sql", "summary": f"postgres sql: SELECT {i}", "decision": "allow"}})
    rows.append({"ts": now, "session": sid, "kind": "sql", "action": "deny", "request_id": "", "detail": {}})
    await store.append_events(rows)
    recent, _ = await store.run(store._toolcall_memory, sid, 20, 500)
    history = history_entries(recent, now)
    assert [h["id"] for h in history] == [f"t_{i}" for i in range(10, 30)]
    assert history[-1]["summary"] == "postgres sql: SELECT 29" and history[-1]["tool"] == "sql"


def _event(sid, i):
    return {"session": sid, "step": i, "kind": "egress", "action": "allow", "reasons": [], "codes": [],
            "request_id": f"r{i}", "detail": {}, "ts": time.time()}


async def test_two_writers_give_one_gap_free_trail_per_session(store):
    """Two stores on one database (two replicas): each session's sequence numbers come from the database, so
    batches written concurrently through both interleave into 1..N without a collision or a gap."""
    other = Store(store.url)
    await other.open()
    try:
        sid, sid2 = "s_" + uuid.uuid4().hex[:12], "s_" + uuid.uuid4().hex[:12]
        batches = [[_event(sid, 10 * b + i) for i in range(7)] + [_event(sid2, b), _event(None, b)]
                   for b in range(12)]
        await asyncio.gather(*((store if b % 2 else other).append_events(batch) for b, batch in enumerate(batches)))
        got = await store.list_events(session=sid)
        assert sorted(e["seq"] for e in got) == list(range(1, 85))
        assert sorted(e["seq"] for e in await other.list_events(session=sid2)) == list(range(1, 13))
        # each batch got one contiguous run of numbers
        by_batch: dict[int, list[int]] = {}
        for e in got:
            by_batch.setdefault(e["step"] // 10, []).append(e["seq"])
        assert all(sorted(v) == list(range(min(v), min(v) + 7)) for v in by_batch.values())
    finally:
        other.close()


async def test_sequence_continues_from_events_written_before_the_counter(store):
    """Events stored by an older sandgate (no audit_seqs row yet): numbering continues past their maximum."""
    from sqlalchemy import text

    sid = "s_" + uuid.uuid4().hex[:12]

    def old_rows():
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO events (seq, ts, session, kind, action, reasons, codes, detail) "
                              "VALUES (1, 0, :s, 'egress', '', '[]', '[]', '{}'), "
                              "(2, 0, :s, 'egress', '', '[]', '[]', '{}')"), {"s": sid})
    await store.run(old_rows)
    await store.append_events([_event(sid, 1), _event(sid, 2)])
    assert [e["seq"] for e in await store.list_events(session=sid)] == [1, 2, 3, 4]


async def test_session_counters_add_up_across_writers(store):
    other = Store(store.url)
    await other.open()
    try:
        sid = "s_" + uuid.uuid4().hex[:12]
        one = {sid: {"requests": 1, "bytes_out": 2 ** 33}}          # byte counters pass 32 bits
        await asyncio.gather(*((store if i % 2 else other).sync_stats(one, []) for i in range(10)))
        totals = await store.sync_stats({}, [sid, "s_unknown"])
        assert totals == {sid: {"requests": 10, "denied": 0, "asked": 0, "bytes_out": 10 * 2 ** 33, "bytes_in": 0,
                                "toolcalls": 0}}
    finally:
        other.close()


async def test_list_approvals_filters_orders_and_decodes_like_the_rows_stored(store):
    """The approval lookups an "ask" makes (driver-level): each filter, oldest first (then by id), the limit, and
    every column as put_approval returned it (JSON columns decoded, floats, None)."""
    sid, other, binding = ("s_" + uuid.uuid4().hex[:12]), ("s_" + uuid.uuid4().hex[:12]), uuid.uuid4().hex
    now = time.time()
    stored = []
    for i, (session, kind, status, bind) in enumerate([
            (sid, "toolcall", "pending", binding), (sid, "egress", "approved", binding),
            (other, "toolcall", "pending", binding), (sid, "toolcall", "pending", uuid.uuid4().hex)]):
        stored.append(await store.put_approval(ApprovalRow(
            id=f"a_{i}_{uuid.uuid4().hex[:8]}", session=session, kind=kind, status=status, binding=bind,
            summary="shell: git push 'x'", action={"tool": "shell", "args": {"command": "git push"}},
            reasons=["pushes", "é"], votes=[{"by": "ann", "verdict": "approve", "at": 1.5, "reason": ""}],
            created_at=now + i, expires_at=now + 60, decided_at=None if i % 2 == 0 else now + 2,
            decided_by=None if i % 2 == 0 else "ann", requested_by="harness:h")))
    assert await store.list_approvals(binding=binding) == stored[:3]
    assert await store.list_approvals(status="pending", binding=binding) == [stored[0], stored[2]]
    assert await store.list_approvals(status="pending", binding=binding, session=other) == [stored[2]]
    assert await store.list_approvals(kind="egress", binding=binding) == [stored[1]]
    assert await store.list_approvals(session=sid, limit=2) == stored[:2]
    assert await store.list_approvals(status="approved", binding=stored[3]["binding"]) == []
    row = (await store.list_approvals(binding=binding))[1]
    assert isinstance(row["created_at"], float) and row["action"]["args"] == {"command": "git push"}
    assert row["votes"][0]["at"] == 1.5 and row["used_at"] is None and row["version"] == 0


@pytest.mark.parametrize("table,call", [
    ("approvals", lambda s: s.list_approvals(status="pending", binding="b")),
    ("session_paths", lambda s: s.toolcall_memory("s_x", 20)),
    ("session_stats", lambda s: s.sync_stats({"s_x": {"requests": 1}}, ["s_x"])),
], ids=["approval-lookup", "toolcall-memory", "counter-sync"])
async def test_a_failing_driver_level_call_is_a_store_error(tmp_path, table, call):
    """The driver-level reads and the counter sync raise StoreError like the others (callers answer 503, never
    500 or allow)."""
    from gateway.store import StoreError

    s = Store(f"sqlite:///{tmp_path / 'broken.db'}")
    await s.open()
    try:
        def drop():
            with s.engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE {table}")
        await s.run(drop)
        with pytest.raises(StoreError):
            await call(s)
    finally:
        s.close()


async def test_a_failing_hot_write_is_a_store_error(tmp_path):
    """The driver-level path insert raises StoreError too, and a later write still works."""
    from gateway.store import StoreError

    s = Store(f"sqlite:///{tmp_path / 'broken.db'}")
    await s.open()
    row = {"session": "s_x", "path": "/w/a", "kind": "file", "target": None, "content": None, "ts": 1.0}
    try:
        def rename(a, b):
            with s.engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE {a} RENAME TO {b}")
        await s.run(rename, "session_paths", "gone")
        with pytest.raises(StoreError):
            await s.append_session_paths([row])
        await s.run(rename, "gone", "session_paths")
        await s.append_session_paths([row])
        assert [r["path"] for r in await s.list_session_paths("s_x")] == ["/w/a"]
    finally:
        s.close()


async def test_concurrent_path_writes_share_transactions_and_all_land(store):
    """Many tool calls writing paths at once (group commit): every row is stored, each caller returns only
    after its own rows can be read back, and the writes took fewer transactions than callers."""
    sids = ["s_" + uuid.uuid4().hex[:12] for _ in range(40)]
    jobs = []
    original = store._append_session_paths

    def counted(rows):
        jobs.append(len(rows))
        return original(rows)
    store._append_session_paths = counted

    async def one(i, sid):
        rows = [{"session": sid, "path": f"/w/{i}/{j}", "kind": "file", "target": None, "content": f"c{j}",
                 "ts": 1.0} for j in range(1 + i % 3)]
        await store.append_session_paths(rows)
        stored = await store.list_session_paths(sid)          # durable when the call returns
        assert [r["path"] for r in stored] == [r["path"] for r in rows]

    await asyncio.gather(*(one(i, sid) for i, sid in enumerate(sids)))
    assert sum(jobs) == sum(1 + i % 3 for i in range(40))
    assert len(jobs) < len(sids)


async def test_session_counters_for_many_sessions(store):
    """Every session's delta is added and every asked total read back (reads go in chunks of 500)."""
    sids = ["s_" + uuid.uuid4().hex[:12] for _ in range(1201)]
    deltas = {sid: {"requests": i, "toolcalls": 1} for i, sid in enumerate(sids)}
    assert await store.sync_stats(deltas, []) == {}
    totals = await store.sync_stats({sids[0]: {"denied": 3}}, sids + ["s_unknown"])
    assert len(totals) == len(sids)
    assert totals[sids[7]] == {"requests": 7, "denied": 0, "asked": 0, "bytes_out": 0, "bytes_in": 0, "toolcalls": 1}
    assert totals[sids[0]]["denied"] == 3


def test_the_store_counts_what_a_session_spec_counts():
    """The store reads its counters off its own session_stats table; sessions name the same ones."""
    from gateway.sessions.spec import STAT_KEYS
    from gateway.store.store import STAT_KEYS as STORE_STAT_KEYS

    assert STORE_STAT_KEYS == STAT_KEYS


def test_the_store_keeps_as_many_paths_as_tool_calls_read():
    from gateway.store.store import MAX_PATHS
    from gateway.toolcalls.history import MAX_SESSION_PATHS

    assert MAX_PATHS == MAX_SESSION_PATHS
