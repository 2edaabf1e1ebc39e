"""SQL is read for what it does: destructive or unknown SQL never comes back `allow`, through the product's
decision path (the facts sandgate builds, the shipped policy on the shipped engine: corpus.SessionSim), and the
`sql` tool and psql (`-c`, `-f` of a file the session wrote, stdin) read every statement alike.

None of these statements contains a bare DROP, TRUNCATE or unbounded DELETE alone: each is a member of a class
(rewrites, renames, server-side code, functions touching server state, trivially true WHERE clauses, ...).
"""
from __future__ import annotations

import shlex

import pytest

from gateway.toolcalls.sql import describe_sql
from tests.gateway.toolcalls.corpus import SessionSim, evaluator
from tests.gateway.toolcalls.test_corpus_benign import SQL_BENIGN

SQL_DESTRUCTIVE: list[str] = [
    # MERGE that deletes, or updates every row
    "MERGE INTO accounts a USING stale s ON a.id = s.id WHEN MATCHED THEN DELETE",
    "MERGE INTO accounts a USING accounts b ON true WHEN MATCHED THEN UPDATE SET balance = 0",
    "MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED AND t.x > 0 THEN DELETE "
    "WHEN NOT MATCHED THEN INSERT VALUES (1)",
    # replace / rewrite
    "CREATE OR REPLACE FUNCTION audit() RETURNS trigger AS $$ BEGIN RETURN NULL; END $$ LANGUAGE plpgsql",
    "CREATE OR REPLACE VIEW v_users AS SELECT 1 AS id LIMIT 0",
    "CREATE OR REPLACE RULE r AS ON INSERT TO t DO INSTEAD NOTHING",
    "CREATE TABLE users_new AS SELECT * FROM users LIMIT 0",
    "SELECT * INTO TEMP backup FROM users",
    # renames and drops inside ALTER
    "ALTER TABLE users RENAME TO users_old",
    "ALTER TABLE users RENAME COLUMN email TO email_old",
    "ALTER TABLE users DROP COLUMN email",
    "ALTER TABLE users DROP CONSTRAINT users_pkey CASCADE",
    "ALTER TABLE orders ALTER COLUMN total TYPE int USING 0",
    "ALTER SCHEMA public RENAME TO attic",
    "ALTER DATABASE app RENAME TO app_old",
    "ALTER SYSTEM SET fsync = off",
    # privileges and ownership
    "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM app",
    "DROP OWNED BY app CASCADE",
    "REASSIGN OWNED BY app TO nobody",
    "GRANT ALL ON users TO PUBLIC",
    # server-side code
    "CALL purge_all()",
    "DO $$ BEGIN EXECUTE 'DROP TABLE users'; END $$",
    "DO LANGUAGE plpgsql $$ BEGIN DELETE FROM users; END $$",
    "PREPARE wipe AS DELETE FROM users",
    "EXECUTE wipe",
    "PREPARE TRANSACTION 'held'",
    # COPY to and from the server's files and programs
    "COPY users TO '/tmp/users.csv'",
    "COPY users FROM '/etc/passwd'",
    "COPY (SELECT 1) TO PROGRAM 'sh -c id'",
    # functions that run SQL from strings or touch server state
    "SELECT dblink_exec('dbname=app', 'DROP TABLE users')",
    "SELECT * FROM dblink('dbname=app', 'DELETE FROM users RETURNING id') AS t(id int)",
    "SELECT lo_unlink(oid) FROM pg_largeobject_metadata",
    "SELECT lo_import('/etc/shadow')",
    "SELECT lo_export(16400, '/tmp/x')",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename = 'app'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "SELECT pg_reload_conf()",
    "SELECT query_to_xml('DELETE FROM users RETURNING *', true, true, '')",
    "SELECT set_config('session_replication_role', 'replica', false)",
    "SELECT my_schema.cleanup_everything()",
    "SELECT pg_advisory_lock(1)",
    "SELECT ts_rewrite('a'::tsquery, 'SELECT t, s FROM aliases')",
    # trivially true WHERE clauses
    "UPDATE users SET active = false WHERE id > 0 OR true",
    "UPDATE users SET active = false WHERE 1 = 1",
    "UPDATE users SET active = false WHERE true",
    "UPDATE users SET role = 'x' WHERE id = id",
    "UPDATE users SET role = 'x' WHERE users.id = id",
    "UPDATE users SET role = 'x' WHERE email IS NULL OR email IS NOT NULL",
    "UPDATE users SET role = 'x' WHERE NOT (id <> id)",
    "UPDATE users SET role = 'x' WHERE id < 10 OR id >= 10",
    "UPDATE users SET role = 'x' WHERE name LIKE '%'",
    "UPDATE users SET role = 'x' WHERE id > 0 OR id < 10",
    "UPDATE users SET role = 'x' WHERE active OR NOT active",
    "UPDATE users SET role = 'x' WHERE 't'",
    "UPDATE users SET role = 'x' WHERE (id = 5) OR ('a' = 'a')",
    "UPDATE users SET role = 'x' WHERE CASE WHEN id > 0 THEN true ELSE true END",
    "WITH gone AS (UPDATE users SET active = false WHERE 2 > 1 RETURNING id) SELECT count(*) FROM gone",
    # deletes in disguise
    "DELETE FROM users WHERE id = 3",
    "WITH d AS (DELETE FROM sessions WHERE expires < now() RETURNING id) SELECT count(*) FROM d",
    "EXPLAIN ANALYZE DELETE FROM users WHERE id > 0",
    "TRUNCATE users RESTART IDENTITY",
    "DROP SCHEMA public CASCADE",
    # locking, settings, two-phase
    "SELECT * FROM users FOR UPDATE",
    "LOCK TABLE users IN ACCESS EXCLUSIVE MODE",
    "SET session_replication_role = replica",
    "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres",
    "SET standard_conforming_strings = off",
    "COMMIT PREPARED 'held'",
    "VACUUM FULL users",
    "CLUSTER users USING users_pkey",
    "NOTIFY jobs, 'drop'",
    "LOAD 'plpython3u'",
    "CREATE EXTENSION dblink",
    "INSERT INTO t SELECT dblink_exec('dbname=x', 'DROP TABLE y')",
    "INSERT INTO users SELECT * FROM users ON CONFLICT (id) DO UPDATE SET role = 'x'",
    # does not parse: asks
    "DELET FROM users",
    "UPDATE users SET x = 1 WHERE",
]


@pytest.fixture(scope="module")
def ev():
    return evaluator()


def sql_tool(ev, query: str, **extra) -> dict:
    return SessionSim(ev).call("sql", {"query": query, **extra})


def test_corpus_size():
    assert len(SQL_DESTRUCTIVE) >= 40 and len(set(SQL_DESTRUCTIVE)) == len(SQL_DESTRUCTIVE)
    assert len(SQL_BENIGN) >= 25


@pytest.mark.parametrize("query", SQL_DESTRUCTIVE)
def test_destructive_sql_never_allowed(ev, query):
    for extra in ({}, {"dialect": "postgres"}):
        decision = sql_tool(ev, query, **extra)
        assert decision["action"] != "allow", (query, extra, decision)


@pytest.mark.parametrize("query", SQL_DESTRUCTIVE[:-2])
def test_destructive_sql_is_read_by_postgres_grammar(query):
    assert describe_sql(query)["dialect"] == "postgres"


# -- the same statement in every spelling ----------------------------------------------------------------------

def spellings(query: str) -> dict[str, tuple[list[tuple[str, dict]], tuple[str, dict]]]:
    """name -> (earlier calls, the call): the sql tool and psql's ways of being given SQL."""
    heredoc = f"psql \"$DATABASE_URL\" <<'EOF'\n{query}\nEOF"
    return {
        "sql": ([], ("sql", {"query": query})),
        "sql-postgres": ([], ("sql", {"query": query, "dialect": "postgres"})),
        "psql -c": ([], ("shell", {"command": f"psql \"$DATABASE_URL\" -c {shlex.quote(query)}"})),
        "psql -f": ([("write_file", {"path": "/workspace/q.sql", "content": query + "\n"})],
                    ("shell", {"command": "psql \"$DATABASE_URL\" -f /workspace/q.sql"})),
        "psql heredoc": ([], ("shell", {"command": heredoc})),
        "psql <<<": ([], ("shell", {"command": f"psql \"$DATABASE_URL\" <<< {shlex.quote(query)}"})),
    }


FACT_KEYS = ("parsed", "kind", "kinds", "unbounded", "functions", "settings", "unsafe")


def _sql_facts(doc: dict) -> dict:
    facts = doc.get("sql")
    if facts is None:
        facts = next(c["sql"] for c in doc["shell"]["commands"] if c.get("sql"))
    return {k: facts.get(k) for k in FACT_KEYS}


@pytest.mark.parametrize("query", [q for q in SQL_DESTRUCTIVE + SQL_BENIGN if not q.startswith("DELET ")])
def test_sql_tool_and_psql_agree(ev, query):
    from gateway.toolcalls.enrich import enrich_toolcall
    from tests.gateway.toolcalls.corpus import SESSION

    results = {}
    for name, (before, (tool, args)) in spellings(query).items():
        sim = SessionSim(ev)
        for earlier in before:
            sim.call(*earlier)
        decision = sim.call(tool, args)
        doc = enrich_toolcall(session=SESSION, tool=tool, args=args, step=0, now=0.0, history=[],
                              files={"/workspace/q.sql": query + "\n"} if before else {}).doc
        results[name] = (decision["action"], _sql_facts(doc))
    assert len({r[0] for r in results.values()}) == 1, (query, results)
    facts = [r[1] for r in results.values()]
    assert all(f == facts[0] for f in facts), (query, results)


def test_wire_statements_are_read_with_postgres_grammar_only():
    """The PostgreSQL gateway's statements (input.via = "postgres") never fall back to sqlglot: what PostgreSQL's
    grammar does not parse is unparsed (asks), even where another dialect would read it."""
    from gateway.toolcalls.enrich import toolcall_base, toolcall_facts
    from tests.gateway.toolcalls.corpus import SESSION

    mysql_only = "UPDATE t SET a = 1 WHERE id = 1 LIMIT 1"
    base = toolcall_base(session=SESSION, tool="sql", args={"query": mysql_only, "database": "prod"}, step=0, now=0.0)
    assert toolcall_facts(base)[0]["sql"]["parsed"] is True          # the sql tool: sqlglot reads MySQL's LIMIT
    facts = toolcall_facts({**base, "via": "postgres"})[0]["sql"]
    assert facts["parsed"] is False and facts["dialect"] == "postgres"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    from tests.conftest import LOOPBACK_CONFIG
    from tests.support.gateway import Sandgate

    with Sandgate(tmp_path_factory.mktemp("sqlcorpus"), {**LOOPBACK_CONFIG}) as sg:
        yield sg


@pytest.mark.e2e
def test_a_slice_through_the_api(gw):
    """POST /v1/toolcalls on a real sandgate: every fourth destructive statement asks, benign ones are allowed."""
    sid = gw.session(workload="persistent", workspace="/workspace")["id"]
    cases = [(q, False) for q in SQL_DESTRUCTIVE[::4]] + [(q, True) for q in SQL_BENIGN[::4]]
    for step, (query, benign) in enumerate(cases, start=1):
        resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "sql", "args": {"query": query},
                                                      "step": step})
        assert resp.status_code == 200, resp.text
        assert (resp.json()["decision"] == "allow") is benign, (query, resp.json())


@pytest.mark.parametrize("query, dialect", [
    ("SELECT 'a\\' , ' ; DROP TABLE users; -- '", None),      # MySQL: a backslash escapes the quote
    ("SELECT 'a\\' , ' ; DROP TABLE users; -- '", "mysql"),
    ("SELECT 1 /*! ; DROP TABLE users */", None),               # MySQL runs what is in /*! ... */
    ("SELECT 1 /*M! ; DELETE FROM users */", None),
    ("UPDATE users SET x = 1 WHERE id = 1 LIMIT 1 ; DROP TABLE users", "mysql"),
    ("selec 1", "mysql"),                                        # a dialect sqlglot knows: no other grammar tried
])
def test_other_servers_lexing_is_not_read_as_postgres(ev, query, dialect):
    args = {"query": query} if dialect is None else {"query": query, "dialect": dialect}
    assert SessionSim(ev).call("sql", args)["action"] != "allow", (query, dialect)
