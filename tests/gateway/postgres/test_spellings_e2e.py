"""Spellings of destructive statements the gateway's own tests were not written around, through real clients
(psql's simple protocol, psycopg's extended protocol): each is decided (denied, or held until an approver answers,
then denied here), and the cluster shows that nothing ran."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.gateway.postgres.conftest import db_session, decide
from tests.gateway.postgres.test_statements_e2e import psql

DESTRUCTIVE = [
    "WITH d AS (DELETE FROM t RETURNING *) SELECT count(*) FROM d",
    "EXPLAIN ANALYZE DELETE FROM t",
    "COPY (DELETE FROM t RETURNING id) TO STDOUT",
    "DO $$BEGIN DELETE FROM t; END$$",
    "delete/**/from t",
    "DeLeTe FROM ONLY public.t",
    "DELETE FROM t WHERE id IS NOT NULL",
    "DELETE FROM t WHERE true",
    "UPDATE t SET v = 'gone'",
    "UPDATE t SET v = 'gone' WHERE id = id",
    "ALTER TABLE t DROP COLUMN v",
    "DROP TABLE IF EXISTS t CASCADE",
    "CREATE OR REPLACE FUNCTION wipe() RETURNS void LANGUAGE sql AS 'DELETE FROM t'",
    # every row, through a comparison with NULL under IS NOT FALSE / IS NOT TRUE / IS UNKNOWN / coalesce
    "UPDATE t SET v = 'gone' WHERE (id = NULL) IS NOT FALSE",
    "UPDATE t SET v = 'gone' WHERE (id = NULL) IS NOT TRUE",
    "UPDATE t SET v = 'gone' WHERE (id < NULL::int) IS UNKNOWN",
    "UPDATE t SET v = 'gone' WHERE coalesce(id = NULL, true)",
    # every row, each meeting itself through a subquery of its own table
    "UPDATE t SET v = 'gone' WHERE id IN (SELECT id FROM t)",
    "UPDATE t SET v = 'gone' WHERE id = ANY (SELECT u.id FROM t AS u)",
    "UPDATE t SET v = 'gone' WHERE EXISTS (SELECT 1 FROM t AS u WHERE u.id = t.id)",
    # every row: a test compared with a boolean, a cast of itself, an array holding itself, a pattern of `%`
    "UPDATE t SET v = 'gone' WHERE (id = id) = true",
    "UPDATE t SET v = 'gone' WHERE false <> (t.id = id)",
    "UPDATE t SET v = 'gone' WHERE id = id::int",
    "UPDATE t SET v = 'gone' WHERE CAST(id AS bigint) = id",
    "UPDATE t SET v = 'gone' WHERE id = ANY (ARRAY[-1, id])",
    "UPDATE t SET v = 'gone' WHERE v SIMILAR TO '%'",
    # every row: a WHERE that names no column of the table's own rows (true or false for all of them at once)
    "UPDATE t SET v = 'gone' FROM pg_class AS c WHERE c.relname = 't'",
    "UPDATE t SET v = 'gone' WHERE EXISTS (SELECT 1 FROM pg_class AS c WHERE c.relname = 't')",
    "UPDATE t SET v = 'gone' WHERE EXISTS (SELECT 1 FROM t WHERE t.id = 5)",
    "UPDATE t SET v = 'gone' WHERE 5 IN (SELECT u.id FROM t AS u)",
    # every row whose column is not NULL (a key: every row)
    "UPDATE t SET v = 'gone' WHERE id IS NOT NULL",
    "UPDATE t SET v = 'gone' WHERE NOT (id ISNULL)",
]
SIMPLE_ONLY = [
    "SELECT 1; DELETE FROM t",
    "PREPARE p AS DELETE FROM t; EXECUTE p",
    "BEGIN; DELETE FROM t; COMMIT",
]


def decided_not_run(sg, sid: str, run, timeout: float = 40.0) -> dict:
    """Run `run` on a thread; deny any approval it files; return what it ended with."""
    out: dict = {}

    def go() -> None:
        try:
            out["result"] = run()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
    th = threading.Thread(target=go, daemon=True)
    th.start()
    deadline = time.time() + timeout
    while th.is_alive() and time.time() < deadline:
        for item in sg.call("GET", f"/v1/approvals?status=pending&session={sid}").json():
            out.setdefault("asked", []).append(item["summary"])
            decide(sg, item["id"], "deny")
        th.join(0.1)
    assert not th.is_alive(), "the statement neither finished nor filed an approval"
    return out


def intact(cluster) -> None:
    assert cluster.table_exists() and cluster.count() == 10
    assert cluster.psql_local("SELECT count(*) FROM t WHERE v = 'gone' OR v IS NULL").strip() == "0"


@pytest.mark.parametrize("statement", DESTRUCTIVE + SIMPLE_ONLY)
def test_simple_protocol(pg_gateway, cluster, statement):
    sess, url = db_session(pg_gateway)
    out = decided_not_run(pg_gateway, sess["id"], lambda: psql(url, statement))
    assert out["result"].returncode != 0 and "sandgate: denied" in out["result"].stderr, out
    intact(cluster)


@pytest.mark.parametrize("statement", DESTRUCTIVE)
def test_extended_protocol(pg_gateway, cluster, statement):
    sess, url = db_session(pg_gateway)

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(statement, prepare=True)
    out = decided_not_run(pg_gateway, sess["id"], run)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    intact(cluster)


def test_a_prepared_delete_is_decided_at_execute(pg_gateway, cluster):
    """SQL-level PREPARE then EXECUTE on one connection: the EXECUTE runs the DELETE and is decided as such."""
    sess, url = db_session(pg_gateway)

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            try:
                conn.execute("PREPARE p AS DELETE FROM t")
            except psycopg.errors.InsufficientPrivilege:
                return
            conn.execute("EXECUTE p")
    decided_not_run(pg_gateway, sess["id"], run)
    intact(cluster)


def test_a_function_made_earlier_does_not_carry_a_delete_through(pg_gateway, cluster):
    """A function created outside the gateway whose body deletes: calling it is not a plain read."""
    cluster.psql_local("CREATE OR REPLACE FUNCTION wipe() RETURNS void LANGUAGE sql AS 'DELETE FROM t'; "
                       "ALTER FUNCTION wipe() OWNER TO app", db="app")
    sess, url = db_session(pg_gateway)
    out = decided_not_run(pg_gateway, sess["id"], lambda: psql(url, "SELECT wipe()"))
    assert out["result"].returncode != 0, out
    intact(cluster)


@pytest.mark.parametrize("where", ["(id = %s) IS NOT FALSE", "(id = %s) IS UNKNOWN", "coalesce(id = %s, true)",
                                   "(id = %s::int) IS NOT TRUE"])
def test_a_bound_null_does_not_reach_every_row(pg_gateway, cluster, where):
    """A parameter compared with a column, under IS NOT FALSE / IS NOT TRUE / IS UNKNOWN / coalesce: bound NULL,
    the test holds for every row (the comparison is NULL); each Bind is decided with its value."""
    sess, url = db_session(pg_gateway)
    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"UPDATE t SET v = 'gone' WHERE {where}", (None,), prepare=True)
    out = decided_not_run(pg_gateway, sess["id"], run)
    assert isinstance(out.get("error"), psycopg.errors.InsufficientPrivilege), out
    intact(cluster)


# What already held, by family: each statement asks (or is denied) and, denied, never reaches the server; one
# connection per family, usable after every refusal.
FAMILIES = {
    "server functions": [
        "SELECT lo_import('/etc/hostname')", "SELECT lo_from_bytea(0, 'x')", "SELECT lo_unlink(1)",
        "SELECT lowrite(lo_open(1, 131072), 'x')", "SELECT pg_read_file('/etc/passwd')",
        "SELECT * FROM pg_ls_dir('.')", "SELECT pg_terminate_backend(pg_backend_pid())",
        "SELECT pg_cancel_backend(1)", "SELECT pg_reload_conf()", "SELECT dblink_exec('x', 'DROP TABLE t')",
        "SELECT query_to_xml('DELETE FROM t RETURNING 1', true, true, '')",
        "SELECT * FROM ts_stat('SELECT to_tsvector(v) FROM t')", "SELECT pg_advisory_lock(1)",
        "SELECT pg_notify('c', 'x')", "SELECT \"pg_read_file\"('/etc/passwd')",
        "SELECT U&\"pg_read_fil\\0065\"('/etc/passwd')", "SELECT pg_catalog . pg_read_file ( '/etc/passwd' )",
        "SELECT * FROM t FOR UPDATE", "SELECT * INTO t2 FROM t",
    ],
    "roles and settings": [
        "SET ROLE postgres", "SET SESSION AUTHORIZATION postgres", "SET session_replication_role = replica",
        "SELECT set_config('role', 'postgres', false)", "SELECT set_config(E'rol\\x65', 'postgres', false)",
        "SELECT set_config('sea' || 'rch_path', 'x', false)", "ALTER SYSTEM SET work_mem = '1MB'",
        "UPDATE pg_settings SET setting = 'replica' WHERE name = 'session_replication_role'",
        "SET client_encoding = 'SJIS'", "SET NAMES 'SJIS'", "SET standard_conforming_strings = off",
        "ALTER ROLE app SET search_path = evil", "ALTER DATABASE app SET default_transaction_read_only = off",
    ],
    "definitions, locks, files, programs": [
        "CALL p()", "CREATE RULE r AS ON INSERT TO t DO INSTEAD DELETE FROM t",
        "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $f$BEGIN DELETE FROM t; RETURN NULL; END$f$",
        "GRANT ALL ON t TO PUBLIC", "REVOKE ALL ON t FROM app", "LOCK t", "COPY t TO '/tmp/t.csv'",
        "COPY t FROM PROGRAM 'true'", "COPY (SELECT 1) TO PROGRAM 'true'", "NOTIFY c", "PREPARE TRANSACTION 'x'",
        "TRUNCATE ONLY t", "DELETE FROM ONLY t WHERE NOT false", "DELETE FROM t WHERE id = id",
        "ALTER TABLE t DISABLE TRIGGER ALL", "CREATE TEMP TABLE x AS SELECT 1", "VACUUM t", "CHECKPOINT",
        "PREPARE p AS SELECT 1", "EXECUTE p", "DROP TABLE t", "D\u0052OP TABLE t", "/* x */ DROP /* y */ TABLE\tt",
        "MERGE INTO t USING t AS s ON t.id = s.id WHEN MATCHED THEN DELETE",
    ],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_of_spellings_held(pg_gateway, cluster, family):
    sess, url = db_session(pg_gateway)

    def run() -> list:
        got = []
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in FAMILIES[family]:
                try:
                    conn.execute(statement)
                    got.append((statement, "ran"))
                except psycopg.Error as exc:
                    got.append((statement, exc.sqlstate, exc.diag.message_primary or ""))
            got.append(("check", conn.execute("SELECT current_user, current_setting('search_path'), "
                                              "current_setting('session_replication_role')").fetchone()))
        return got
    out = decided_not_run(pg_gateway, sess["id"], run, timeout=240)
    assert "error" not in out, out
    *results, check = out["result"]
    refused = [r for r in results if r[1] == "42501" and r[2].startswith("sandgate: denied")]
    assert refused == results, [r for r in results if r not in refused]
    assert check[1] == ("app", '"$user", public', "origin"), check
    intact(cluster)
    assert cluster.psql_local("SELECT count(*) FROM pg_largeobject_metadata").strip() == "0"


def test_several_statements_in_one_parse_are_decided_whole(pg_gateway, cluster):
    """The server refuses a Parse of several statements, but the gateway decides first: the least safe of them
    (the site rule's TRUNCATE: denied) is what the client hears; a Parse of reads only gets the server's refusal."""
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
            conn.execute("SELECT 1; TRUNCATE t", prepare=True)
        assert "sandgate: denied" in str(err.value)
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("SELECT 1; SELECT 2", prepare=True)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (10,)
    intact(cluster)
