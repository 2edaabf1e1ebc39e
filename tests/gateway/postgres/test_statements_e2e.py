"""Every statement decided before the upstream sees it: real psql, psycopg (extended protocol, server-side
parameters) and asyncpg (prepared statements) through the gateway, against a cluster of the test's own."""
from __future__ import annotations

import asyncio
import datetime
import decimal
import subprocess
import threading
import time

import psycopg
import pytest

from tests.conftest import need_binary
from tests.gateway.postgres.conftest import db_session, decide, pending
from tests.support.pgcluster import APP_PASSWORD


def psql(url: str, sql: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([need_binary("psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          capture_output=True, text=True, timeout=timeout)


def in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def test_delete_without_where_asks_and_runs_once_approved(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    th, out = in_thread(psql, url, "DELETE FROM t")
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and "DELETE FROM t" in str(items[0]["action"]) and "prod" in str(items[0]["action"])
    assert cluster.count() == 10                         # held: nothing ran yet
    decide(pg_gateway, items[0]["id"], "approve")
    th.join(30)
    assert out["result"].returncode == 0, out["result"].stderr
    assert out["result"].stdout.strip() == "DELETE 10" or cluster.count() == 0
    assert cluster.count() == 0


def test_a_cancel_request_withdraws_a_held_statement(pg_gateway, cluster):
    """A statement held for approval and cancelled by its client (CancelRequest) gets 57014, its approval is
    withdrawn (approving it later runs nothing), and the connection goes on."""
    sess, url = db_session(pg_gateway)
    conn = psycopg.connect(url, autocommit=True)
    th, out = in_thread(conn.execute, "DELETE FROM t")
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and cluster.count() == 10
    conn.cancel()
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.QueryCanceled), out
    assert out["error"].sqlstate == "57014"
    row = pg_gateway.call("GET", f"/v1/approvals/{items[0]['id']}").json()
    assert row["status"] == "cancelled", row
    assert pg_gateway.call("POST", f"/v1/approvals/{items[0]['id']}/approve", token=pg_gateway.approver,
                           json={"reason": "too late"}).status_code != 200
    assert cluster.count() == 10                          # nothing ran
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
    conn.close()


def test_a_pipeline_with_a_refused_statement_gets_its_answers_without_waiting(pg_gateway, cluster):
    """psycopg's pipeline mode (Parse/Bind/Execute of several statements, answers asked with Flush before the
    Sync): a refused statement's error and the statements before it come back while the client waits (the
    gateway sends what it queued when the client has nothing more to send); what follows it up to the Sync
    does not run, and the next pipeline works."""
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with conn.pipeline():
                first = conn.execute("SELECT count(*) FROM t WHERE id < %s", (5,))
                conn.execute("SELECT count(*) FROM t WHERE 1=1")
                conn.execute("INSERT INTO t VALUES (%s, %s)", (99, "after"))
                assert first.fetchone() == (4,)
        with conn.pipeline():
            a = conn.execute("SELECT count(*) FROM t")
            b = conn.execute("SELECT v FROM t WHERE id = %s", (3,))
        assert a.fetchone() == (10,) and b.fetchone() == ("row3",)
    assert cluster.count() == 10


def test_drop_table_asks_and_a_denial_is_42501(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    th, out = in_thread(psql, url, "DROP TABLE t")
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and "DROP TABLE t" in str(items[0]["action"])
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert out["result"].returncode != 0
    assert "sandgate: denied" in out["result"].stderr
    assert cluster.table_exists()


def test_deny_rule_is_42501_and_the_connection_stays_usable(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
            conn.execute("TRUNCATE t")
        assert err.value.diag.message_primary == "sandgate: denied: TRUNCATE is not allowed here"
        assert err.value.diag.message_detail == "code: site.no_truncate"
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
    assert cluster.count() == 10


def test_multi_statement_query_with_one_denied_runs_none(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    out = psql(url, "INSERT INTO t VALUES (100, 'a'); UPDATE t SET v = 'b' WHERE id = 1; TRUNCATE t")
    assert out.returncode != 0 and "TRUNCATE is not allowed here" in out.stderr
    assert cluster.count() == 10
    assert cluster.psql_local("SELECT v FROM t WHERE id = 1").strip() == "row1"


def test_denial_inside_a_transaction_fails_it_and_commit_rolls_back(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO t VALUES (200, 'inside')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE t")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        cur = conn.execute("COMMIT")
        assert cur.statusmessage == "ROLLBACK"
    assert cluster.count() == 10
    assert cluster.psql_local("SELECT count(*) FROM t WHERE id = 200").strip() == "0"


def test_psycopg_server_side_parameters(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT v FROM t WHERE id = %s", (3,)).fetchone() == ("row3",)
        conn.execute("INSERT INTO t VALUES (%s, %s)", (300, "it's"))
        assert conn.execute("SELECT v FROM t WHERE id = %s", (300,), prepare=True).fetchone() == ("it's",)
        assert conn.execute("SELECT v FROM t WHERE id = %s", (300,), prepare=True).fetchone() == ("it's",)
    assert cluster.count() == 11


def test_bound_parameters_are_decided_with_their_values(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)

    def delete() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM t WHERE id = %s OR %s", (1, True))
    th, out = in_thread(delete)
    deadline = time.time() + 20          # (the template's own ask at Parse is withdrawn at once: not this one)
    while not (items := [i for i in pending(pg_gateway, sess["id"]) if "OR (true)" in str(i["action"])]):
        assert time.time() < deadline, "no approval for the statement with its values"
    assert len(items) == 1
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege)
    assert cluster.count() == 10


def test_asyncpg_prepared_statements(pg_gateway, cluster):
    import asyncpg                                       # a test dependency
    _, url = db_session(pg_gateway)

    async def go() -> None:
        conn = await asyncpg.connect(url)
        try:
            stmt = await conn.prepare("SELECT v FROM t WHERE id = $1")
            assert await stmt.fetchval(4) == "row4"
            assert await stmt.fetchval(5) == "row5"
            await conn.execute("INSERT INTO t VALUES ($1, $2)", 400, "four hundred")
            assert await conn.fetchval("SELECT count(*) FROM t") == 11
            with pytest.raises(asyncpg.exceptions.InsufficientPrivilegeError):
                await conn.execute("TRUNCATE t")
            assert await conn.fetchval("SELECT v FROM t WHERE id = $1", 400) == "four hundred"
            # binary parameters of common types are read (written into the statement the policy sees)
            day, amount = datetime.date(2024, 2, 29), decimal.Decimal("-12.50")
            assert await conn.fetchval("SELECT $1::date + 1", day) == datetime.date(2024, 3, 1)
            assert await conn.fetchval("SELECT $1::numeric * 2", amount) == decimal.Decimal("-25.00")
            assert await conn.fetchval("SELECT count(*) FROM t WHERE id = ANY($1::int[])", [1, 2, 400]) == 3
        finally:
            await conn.close()
    asyncio.run(go())
    assert cluster.count() == 11


def test_statements_differing_only_in_constants_are_decided_apart(pg_gateway, cluster):
    """A site rule reads the statement's text: `WHERE 1=2` allowed never lets `WHERE 1=1` through (no shared
    cached decision), on the simple protocol and with bound values alike."""
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(2):
            assert conn.execute("SELECT count(*) FROM t WHERE 1=2").fetchone() == (0,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
                conn.execute("SELECT count(*) FROM t WHERE 1=1")
            assert err.value.diag.message_detail == "code: site.tautology"
        assert conn.execute("SELECT count(*) FROM t WHERE 1 = %s", (2,)).fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM t WHERE 1 = %s", (1,))


def test_a_statement_that_does_not_parse_asks(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    th, out = in_thread(psql, url, "DELET FROM t")
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and "DELET FROM t" in str(items[0]["action"])
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert "sandgate: denied" in out["result"].stderr and cluster.count() == 10


@pytest.mark.parametrize("change", ["SET standard_conforming_strings = off",
                                    "SELECT set_config('client_encoding', 'SJIS', false)"])
@pytest.mark.parametrize("pipelined", [True, False])
def test_a_connection_that_changes_how_statements_lex_is_closed(pg_gateway, cluster, change, pipelined):
    """With standard_conforming_strings off (or another client encoding) the server would read the next statement
    otherwise than pglast: `SELECT 'a\\', 'b'' ; DELETE FROM t; --'` is two strings to pglast, a DELETE to the
    server. Pipelined right behind the change it is refused (a backslash before ReadyForQuery); sent after it, the
    connection is closed first."""
    sess, url = db_session(pg_gateway)
    evil = "SELECT 'a\\', 'b'' ; DELETE FROM t; --'"
    errors = []

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            try:
                if pipelined:
                    with conn.pipeline():
                        conn.execute(change)
                        conn.execute(evil)
                else:
                    conn.execute(change)
                    conn.execute(evil)
            except psycopg.Error as exc:
                errors.append(exc)
            if pipelined:       # the refusal failed the pipeline's implicit transaction: the change is rolled back
                assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("on",)
            else:
                with pytest.raises(psycopg.OperationalError):
                    conn.execute("SELECT 1")
    th, out = in_thread(run)
    deadline = time.monotonic() + 60
    while th.is_alive() and time.monotonic() < deadline:        # the change may ask: approve it, until run ends
        for item in pg_gateway.call("GET", f"/v1/approvals?status=pending&session={sess['id']}").json():
            decide(pg_gateway, item["id"], "approve")
        th.join(0.1)
    assert not th.is_alive(), "the statements never ended"
    assert "error" not in out, out
    if pipelined:
        assert errors and errors[0].diag.message_detail == "code: postgres.pipelined_text", errors
    else:
        assert errors and isinstance(errors[0], psycopg.OperationalError), errors
    assert cluster.count() == 10


def test_each_run_of_a_prepared_statement_is_decided(pg_gateway, cluster):
    """`id = $1` cannot change what the statement does: the Parse's decision covers its first run (the audit rows
    show the values), and each later run is a statement of its own, decided again (it joins the session's history
    and counts: test_gate_e2e's budget test); `id = $1 OR $2` can: each Bind is decided with its values."""
    sess, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        for i in (1, 2, 3):
            assert conn.execute("SELECT v FROM t WHERE id = %s", (i,), prepare=True).fetchone() == (f"row{i}",)
        for i in (4, 5):
            assert conn.execute("SELECT v FROM t WHERE id = %s OR %s", (i, False), prepare=True).fetchone() == \
                (f"row{i}",)
    rows = [e for e in pg_gateway.events(sess["id"]) if e["kind"] == "sql"]
    plain = [e for e in rows if " OR " not in e["detail"]["statement"]]
    either = [e for e in rows if " OR " in e["detail"]["statement"]]
    assert [e["detail"]["statement"] for e in plain] == [f"SELECT v FROM t WHERE id = ({i})" for i in (1, 2, 3)]
    assert len({e["request_id"] for e in plain}) == 3                # the Parse's, then one per later run
    assert len({e["request_id"] for e in either}) == 2               # one per Bind


def test_an_approval_covers_one_run_of_a_prepared_statement(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    conn = psycopg.connect(url, autocommit=True)
    pg = conn.pgconn

    def prepare() -> object:
        return pg.prepare(b"del", b"DELETE FROM t WHERE id > 8")
    th, out = in_thread(prepare)
    items = pending(pg_gateway, sess["id"])
    decide(pg_gateway, items[0]["id"], "approve")
    th.join(30)
    assert out["result"].status == psycopg.pq.ExecStatus.COMMAND_OK
    assert pg.exec_prepared(b"del", []).command_status == b"DELETE 2"
    th, out = in_thread(pg.exec_prepared, b"del", [])          # a second run asks again
    again = [i for i in pending(pg_gateway, sess["id"]) if i["id"] != items[0]["id"]]
    assert len(again) == 1
    decide(pg_gateway, again[0]["id"], "deny")
    th.join(30)
    assert out["result"].error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"42501"
    conn.close()
    assert cluster.count() == 8


@pytest.mark.parametrize("statement", [
    "MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE",
    "UPDATE t SET v = 'gone' WHERE id > 0 OR true",
    "ALTER TABLE t RENAME TO t_old",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE false",
])
def test_what_is_not_known_to_be_safe_is_held(pg_gateway, cluster, statement):
    """The wire reads SQL as the sql tool does (one classification): these ask, and nothing runs until decided."""
    sess, url = db_session(pg_gateway)
    th, out = in_thread(psql, url, statement)
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and statement[:30] in str(items[0]["action"])
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert "sandgate: denied" in out["result"].stderr
    assert cluster.table_exists() and cluster.count() == 10
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'gone'").strip() == "0"


def test_bounded_writes_and_transactions_flow(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    with psycopg.connect(url) as conn:           # psycopg's implicit BEGIN, then COMMIT
        conn.execute("UPDATE t SET v = 'one' WHERE id = 1")
        conn.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (11, "eleven"))
        conn.execute("SET statement_timeout = '5s'")
        assert conn.execute("SELECT lower(v) FROM t WHERE id = %s", (11,)).fetchone() == ("eleven",)
    assert cluster.count() == 11


def _pipeline_results(pg, syncs: int) -> list[list]:
    """(status, SQLSTATE) of each result of a libpq pipeline, one list per Sync."""
    import select

    out: list[list] = [[]]
    deadline = time.time() + 60
    while len(out) <= syncs:
        pg.consume_input()
        while pg.is_busy():
            assert time.time() < deadline, out
            select.select([pg.socket], [], [], 1)
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            continue
        if res.status == psycopg.pq.ExecStatus.PIPELINE_SYNC:
            out.append([])
            continue
        out[-1].append((res.status, res.error_field(psycopg.pq.DiagnosticField.SQLSTATE)))
    return out[:syncs]


@pytest.mark.parametrize("name", [b"", b"s1"])
def test_a_parse_the_server_skipped_never_carries_a_bind(pg_gateway, cluster, name):
    """A Parse after a failing statement of its pipeline is skipped by the server, which keeps its older statement
    of that name: the gateway's decision of the skipped text (a read of its values) must not cover a Bind of the
    older one (an UPDATE whose `OR $2` made every Bind decided). Sent as one write: the Bind reaches the gateway
    before the server's answer to the Parse, and waits for it."""
    _, url = db_session(pg_gateway)
    pg = psycopg.pq.PGconn.connect(url.encode())
    pg.enter_pipeline_mode()
    pg.send_prepare(name, b"UPDATE t SET v = 'gone' WHERE id = $1::int OR $2::bool")
    pg.pipeline_sync()
    pg.send_prepare(b"bad", b"SELECT * FROM no_such_table")      # parses, allowed; the server fails it
    if name:
        pg.send_close_prepared(name)
    pg.send_prepare(name, b"SELECT $1::int, $2::bool")
    pg.pipeline_sync()
    pg.send_query_prepared(name, [b"1", b"t"])
    pg.pipeline_sync()
    results = _pipeline_results(pg, 3)
    pg.finish()
    assert results[2] == [(psycopg.pq.ExecStatus.FATAL_ERROR, b"42501")], results
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'gone'").strip() == "0"


def test_a_prepared_statement_is_decided_again_when_the_session_changes(pg_gateway, cluster):
    """A statement prepared while the session was not frozen asks once it is (its Parse's decision read the
    session as it was); a LIKE's bound pattern is decided with its value (`%` matches every row)."""
    sess, url = db_session(pg_gateway)
    conn = psycopg.connect(url, autocommit=True)
    update = "UPDATE t SET v = %s WHERE id = %s"
    assert conn.execute(update, ("one", 1), prepare=True).rowcount == 1
    th, out = in_thread(conn.execute, "UPDATE t SET v = 'gone' WHERE v LIKE %s", ("%",))
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1 and "LIKE (E'%')" in str(items[0]["action"]), items
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    resp = pg_gateway.call("PATCH", f"/v1/sessions/{sess['id']}", json={"frozen": True})
    assert resp.status_code == 200, resp.text
    th, out = in_thread(lambda: conn.execute(update, ("gone", 2), prepare=True))
    items = [i for i in pending(pg_gateway, sess["id"]) if "frozen" in str(i)]
    assert len(items) == 1, items
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    conn.close()
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'gone'").strip() == "0"


def test_a_sync_the_server_ignores_during_copy_shifts_nothing(pg_gateway, cluster):
    """libpq's COPY FROM STDIN in the extended protocol sends a Sync the server ignores while it reads COPY data.
    Counted as answered, it shifted which pipeline the gateway took a server error to end: a Parse the server
    skipped stayed pending and took a later Parse's ParseComplete, and a Bind ran the server's older `UPDATE ...
    OR $2` unasked. asyncpg's COPY (Parse, Describe, Flush, then a Query) still works."""
    import asyncpg                                       # a test dependency
    import select

    _, url = db_session(pg_gateway)
    pg = psycopg.pq.PGconn.connect(url.encode())
    pg.send_query_params(b"COPY t FROM STDIN", None)
    deadline = time.time() + 60
    while (res := pg.get_result()) is None or res.status != psycopg.pq.ExecStatus.COPY_IN:
        assert time.time() < deadline
        select.select([pg.socket], [], [], 1)
        pg.consume_input()
    pg.put_copy_data(b"11\tcopied\n")
    pg.put_copy_end()
    while pg.is_busy() or pg.get_result() is not None:
        assert time.time() < deadline
        select.select([pg.socket], [], [], 1)
        pg.consume_input()
    pg.enter_pipeline_mode()
    pg.send_prepare(b"s1", b"UPDATE t SET v = 'gone' WHERE id = $1::int OR $2::bool")
    pg.pipeline_sync()
    pg.send_prepare(b"bad", b"SELECT * FROM no_such_table")
    pg.send_close_prepared(b"s1")
    pg.send_prepare(b"s1", b"SELECT $1::int, $2::bool")
    pg.pipeline_sync()
    pg.send_prepare(b"s2", b"SELECT 1")            # two ParseCompletes: the skipped Parses' places
    pg.send_prepare(b"s3", b"SELECT 2")
    pg.pipeline_sync()
    pg.send_query_prepared(b"s1", [b"1", b"t"])
    pg.pipeline_sync()
    results = _pipeline_results(pg, 4)
    pg.finish()
    assert results[3] == [(psycopg.pq.ExecStatus.FATAL_ERROR, b"42501")], results
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'gone'").strip() == "0"

    async def copy() -> int:
        conn = await asyncpg.connect(url)
        try:
            await conn.copy_records_to_table("t", records=[(12, "a"), (13, "b")])
            return await conn.fetchval("SELECT count(*) FROM t")
        finally:
            await conn.close()
    assert asyncio.run(asyncio.wait_for(copy(), 30)) == 13


def test_pipelined_binds_never_run_what_was_not_decided(pg_gateway, cluster):
    """One libpq pipeline: a denied Parse (the site rule's TRUNCATE) between allowed ones runs nothing after it up to
    its Sync; the unnamed statement after that denied Parse, a statement name never parsed, and one Closed are
    not bound (42501); the connection still runs a SELECT."""
    _, url = db_session(pg_gateway)
    pg = psycopg.pq.PGconn.connect(url.encode())
    pg.enter_pipeline_mode()
    pg.send_prepare(b"ok", b"SELECT 1")
    pg.send_query_prepared(b"ok", [])
    pg.send_prepare(b"", b"TRUNCATE t")
    pg.send_query_prepared(b"", [])
    pg.send_prepare(b"ins", b"INSERT INTO t (id, v) VALUES (50, 'after')")
    pg.send_query_prepared(b"ins", [])
    pg.pipeline_sync()
    pg.send_query_prepared(b"", [])               # the unnamed statement: its Parse was refused
    pg.pipeline_sync()
    pg.send_query_prepared(b"ghost", [])          # never parsed
    pg.pipeline_sync()
    pg.send_prepare(b"s3", b"SELECT $1::int")
    pg.pipeline_sync()
    pg.send_close_prepared(b"s3")
    pg.send_query_prepared(b"s3", [b"1"])         # closed
    pg.pipeline_sync()
    pg.send_query_params(b"SELECT count(*) FROM t", None)
    pg.pipeline_sync()
    results = _pipeline_results(pg, 6)
    pg.finish()
    ok, err = psycopg.pq.ExecStatus.COMMAND_OK, psycopg.pq.ExecStatus.FATAL_ERROR
    assert results[0][:3] == [(ok, None), (psycopg.pq.ExecStatus.TUPLES_OK, None), (err, b"42501")], results
    assert all(r[0] == psycopg.pq.ExecStatus.PIPELINE_ABORTED for r in results[0][3:]), results
    assert results[1] == [(err, b"42501")] and results[2] == [(err, b"42501")], results
    assert results[4][-1] == (err, b"42501"), results
    assert results[5] == [(psycopg.pq.ExecStatus.TUPLES_OK, None)], results
    assert cluster.count() == 10 and cluster.psql_local("SELECT count(*) FROM t WHERE id = 50").strip() == "0"


def test_transaction_tricks_after_a_denial_commit_nothing_denied(pg_gateway, cluster):
    """After a denied statement (the site rule's TRUNCATE) inside BEGIN: COMMIT AND CHAIN commits nothing of the
    failed transaction; ROLLBACK TO a savepoint taken before it recovers the transaction exactly as after a
    statement the server failed (what came before the savepoint commits, the denied statement never ran); a
    savepoint named like a statement is only a name; PREPARE TRANSACTION asks (denied here)."""
    sess, url = db_session(pg_gateway)
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t (id, v) VALUES (60, 'chained')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("TRUNCATE t")
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        conn.execute("SELECT 1")
    conn.execute("COMMIT AND CHAIN")
    conn.execute("ROLLBACK")
    assert cluster.psql_local("SELECT count(*) FROM t WHERE id = 60").strip() == "0"
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t (id, v) VALUES (61, 'kept')")
    conn.execute('SAVEPOINT "TRUNCATE t"')
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("TRUNCATE t")
    conn.execute('ROLLBACK TO SAVEPOINT "TRUNCATE t"')
    conn.execute("COMMIT")
    assert cluster.count() == 11
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t (id, v) VALUES (62, 'prepared')")
    th, out = in_thread(conn.execute, "PREPARE TRANSACTION 'tx1'")
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1, items
    decide(pg_gateway, items[0]["id"], "deny")
    th.join(30)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    conn.execute("COMMIT")                      # answered ROLLBACK: the transaction failed
    conn.close()
    assert cluster.psql_local("SELECT count(*) FROM t WHERE id = 62").strip() == "0"
    assert cluster.psql_local("SELECT count(*) FROM pg_prepared_xacts", db="postgres").strip() == "0"
    assert cluster.count() == 11


def _take(pg, n: int) -> list[tuple]:
    """The next `n` results of a libpq pipeline (status, SQLSTATE, first value), read as they come."""
    import select

    out: list[tuple] = []
    deadline = time.time() + 30
    while len(out) < n:
        pg.consume_input()
        while pg.is_busy():
            assert time.time() < deadline, out
            select.select([pg.socket], [], [], 1)
            pg.consume_input()
        res = pg.get_result()
        if res is not None:
            out.append(_described(res))
    return out


def _described(res) -> tuple:
    first = res.get_value(0, 0) if res.status == psycopg.pq.ExecStatus.TUPLES_OK and res.ntuples else None
    return res.status, res.error_field(psycopg.pq.DiagnosticField.SQLSTATE), first


def _segments_after_an_error(url: str, failing: bytes, rounds: int = 5) -> list:
    """Several pipeline segments in flight where the first fails: its answers are asked for with a Flush and read
    (the error then reaches the client before the server has the segment's Sync), and the Sync and the next
    segments are sent at once, without waiting for the server's ReadyForQuery."""
    import select

    pg = psycopg.pq.PGconn.connect(url.encode())
    assert pg.status == psycopg.pq.ConnStatus.OK, pg.error_message
    pg.enter_pipeline_mode()
    seen: list = []
    for r in range(rounds):
        pg.send_query_params(b"SELECT count(*) FROM t WHERE id < 5", None)
        pg.send_query_params(failing, None)
        pg.send_query_params(f"INSERT INTO t (id, v) VALUES ({100 + r}, 'skipped')".encode(), None)
        pg.send_flush_request()
        pg.flush()
        seen.append(_take(pg, 2))                   # the SELECT's rows, the error
        pg.pipeline_sync()
        pg.send_query_params(b"SELECT v FROM t WHERE id = 3", None)
        pg.send_query_params(f"INSERT INTO t (id, v) VALUES ({200 + r}, 'later')".encode(), None)
        pg.pipeline_sync()
        pg.send_query_params(b"SELECT count(*) FROM t WHERE id >= 200", None)
        pg.pipeline_sync()
        rest: list[list] = [[]]
        deadline = time.time() + 30
        while len(rest) <= 3:
            pg.consume_input()
            while pg.is_busy():
                assert time.time() < deadline, (seen, rest)
                select.select([pg.socket], [], [], 1)
                pg.consume_input()
            res = pg.get_result()
            if res is None:
                continue
            if res.status == psycopg.pq.ExecStatus.PIPELINE_SYNC:
                rest.append([])
                continue
            rest[-1].append(_described(res))
        seen.append(rest[:3])
    pg.consume_input()
    assert not pg.is_busy(), seen               # no answer is still to come
    pg.exit_pipeline_mode()
    seen.append(pg.exec_(b"SELECT count(*) FROM t").get_value(0, 0))     # the connection is still usable
    pg.finish()
    return seen


@pytest.mark.parametrize("failing, sqlstate", [(b"SELECT 1/0", b"22012"),
                                               (b"INSERT INTO t (id, v) VALUES (1, 'dup')", b"23505")])
def test_segments_after_a_server_error_get_their_answers(pg_gateway, cluster, failing, sqlstate):
    """A server error in one pipeline segment ends that segment only: the segments the client sent after its Sync,
    before the server's ReadyForQuery for it, run and get their answers, the same sequence PostgreSQL gives a
    client connected to it directly; what followed the error up to its Sync did not run."""
    direct = _segments_after_an_error(f"postgresql://app:{APP_PASSWORD}@127.0.0.1:{cluster.port}/app"
                                      f"?sslmode=require", failing)
    cluster.reset()
    sess, url = db_session(pg_gateway)
    through = _segments_after_an_error(url, failing)
    assert through == direct, (through, direct)
    ok, rows, err = (psycopg.pq.ExecStatus.COMMAND_OK, psycopg.pq.ExecStatus.TUPLES_OK,
                     psycopg.pq.ExecStatus.FATAL_ERROR)
    assert through[0] == [(rows, None, b"4"), (err, sqlstate, None)], through
    assert through[1][1:] == [[(rows, None, b"row3"), (ok, None, None)], [(rows, None, b"1")]], through
    assert through[-1] == b"15"
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'skipped'").strip() == "0"
    audit = {e["detail"]["statement"]: e["detail"] for e in pg_gateway.events(sess["id"]) if e["kind"] == "sql"}
    for r in range(5):          # each statement's row says how it ended, whatever segment it was in
        assert audit[f"INSERT INTO t (id, v) VALUES ({200 + r}, 'later')"]["tag"] == "INSERT 0 1", audit
        assert audit[f"INSERT INTO t (id, v) VALUES ({100 + r}, 'skipped')"]["error"] == "not run", audit


def test_segments_after_a_denied_statement_get_their_answers(pg_gateway, cluster):
    """The same where the gateway denies the failing statement (the site rule's TRUNCATE, 42501): its segment skips
    to its Sync as the server's would, and every later segment gets its answers."""
    direct = _segments_after_an_error(f"postgresql://app:{APP_PASSWORD}@127.0.0.1:{cluster.port}/app"
                                      f"?sslmode=require", b"SELECT 1/0")
    cluster.reset()
    _, url = db_session(pg_gateway)
    through = _segments_after_an_error(url, b"TRUNCATE t")
    denied = [[(s, b"42501" if c == b"22012" else c, v) for s, c, v in part] if i % 2 == 0 else part
              for i, part in enumerate(direct[:-1])] + [direct[-1]]
    assert through == denied, (through, direct)
    assert cluster.count() == 15
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'skipped'").strip() == "0"


def _psycopg_pipelines(url: str, failing: str) -> list:
    """psycopg's pipeline mode (`with conn.pipeline()`): a statement the server fails between others, its answers
    read with a Flush before the Sync; then pipelines after it. What the client saw, in order."""
    out: list = []
    with psycopg.connect(url, autocommit=True) as conn:
        for r in range(3):
            try:
                with conn.pipeline() as p:
                    a = conn.execute("SELECT count(*) FROM t WHERE id < %s", (5,))
                    conn.execute(failing)
                    conn.execute("INSERT INTO t (id, v) VALUES (%s, 'skipped')", (100 + r,))
                    out.append(a.fetchone())
                    p.sync()
            except psycopg.Error as exc:
                out.append(exc.sqlstate)
            with conn.pipeline():
                b = conn.execute("INSERT INTO t (id, v) VALUES (%s, 'later')", (200 + r,))
                c = conn.execute("SELECT v FROM t WHERE id = %s", (3,))
            out.append((b.rowcount, c.fetchone()))
        out.append(conn.execute("SELECT count(*) FROM t").fetchone())
    return out


@pytest.mark.parametrize("failing", ["SELECT 1/0", "INSERT INTO t (id, v) VALUES (1, 'dup')", "TRUNCATE t"])
def test_psycopg_pipelines_after_an_error_answer_as_postgresql_does(pg_gateway, cluster, failing):
    """The same sequence through the gateway as from PostgreSQL directly (a denied TRUNCATE stands for a statement
    the server fails: 42501 where PostgreSQL gave 22012); nothing after the error ran in its pipeline."""
    direct = _psycopg_pipelines(f"postgresql://app:{APP_PASSWORD}@127.0.0.1:{cluster.port}/app?sslmode=require",
                                "SELECT 1/0" if failing == "TRUNCATE t" else failing)
    cluster.reset()
    _, url = db_session(pg_gateway)
    through = _psycopg_pipelines(url, failing)
    if failing == "TRUNCATE t":
        direct = ["42501" if item == "22012" else item for item in direct]
    assert through == direct, (through, direct)
    assert through[-1] == (13,) and (1, ("row3",)) in through, through
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'skipped'").strip() == "0"
