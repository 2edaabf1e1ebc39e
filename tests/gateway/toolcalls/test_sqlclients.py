"""SQL clients: statements from options, files, stdin; meta-commands; redis and mongo."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.sql import describe_sql, sql_side_effects
from gateway.toolcalls.sqlclients import sql_client


def use(name, values=None, operands=(), flags=(), stdin=None, given_=False, files=None):
    return sql_client(name, values or {}, list(operands), list(flags), stdin, given_,
                      lambda w: (files or {}).get(w))


def test_inline_file_and_stdin():
    assert use("psql", {"-c": ["DROP TABLE x"]}).facts() == {"parsed": True, "kinds": ["DROP"], "unbounded": [],
                                                              "visible": True, "kind": "delete", "functions": [],
                                                              "settings": [], "unsafe": ["DROP"]}
    assert use("psql", {"-f": ["x.sql"]}).facts()["visible"] is False
    assert use("psql", {"-f": ["x.sql"]}, files={"x.sql": "truncate t"}).facts()["kinds"] == ["TRUNCATE"]
    assert use("mysql", stdin="delete from t", given_=True).facts()["unbounded"] == ["DELETE"]
    assert use("mysql", given_=True).facts()["visible"] is False
    assert use("psql").facts()["visible"] is False
    assert use("sqlite3", operands=["db", "select 1"]).facts()["kinds"] == ["SELECT"]
    assert use("psql", flags=["-l"]) is None
    assert use("ls") is None


@pytest.mark.parametrize("text, spawns, writes, invisible", [
    ("\\! rm -rf ~", ["rm -rf ~"], [], False),
    ("select 1 \\g /tmp/out", [], ["/tmp/out"], False),
    ("\\o | sh", ["sh"], [], False),
    ("\\i other.sql", [], [], True),
    ("\\copy t to '/etc/x'", [], ["/etc/x"], False),
    ("\\copy t from program 'curl x'", ["curl x"], [], False),
    ("\\e", [None], [], False),
    ("COPY t TO PROGRAM 'rm -rf ~'", ["rm -rf ~"], [], False),
])
def test_psql_meta_commands(text, spawns, writes, invisible):
    got = use("psql", {"-c": [text]})
    assert (got.spawns, got.writes, got.invisible) == (spawns, writes, invisible)


@pytest.mark.parametrize("name, text, spawns, writes, invisible", [
    ("sqlite3", ".shell rm -rf ~", ["rm -rf ~"], [], False),
    ("sqlite3", ".system ls", ["ls"], [], False),
    ("sqlite3", ".output /etc/x", [], ["/etc/x"], False),
    ("sqlite3", ".once |sh", ["sh"], [], False),
    ("sqlite3", ".read x.sql", [], [], True),
    ("sqlite3", ".tables", [], [], False),
    ("mysql", "system rm -rf ~", ["rm -rf ~"], [], False),
    ("mysql", "\\! ls", ["ls"], [], False),
    ("mysql", "source /tmp/x.sql", [], [], True),
    ("mysql", "select 1 into outfile '/tmp/o'", [], ["/tmp/o"], False),
])
def test_other_meta_commands(name, text, spawns, writes, invisible):
    got = use(name, stdin=text, given_=True)
    assert (got.spawns, got.writes, got.invisible) == (spawns, writes, invisible)


def test_redis_and_mongo():
    assert use("redis-cli", operands=["FLUSHALL"]).facts()["kinds"] == ["FLUSHALL"]
    assert use("redis-cli", given_=True).facts()["visible"] is False
    assert use("mongosh", {"--eval": ["db.c.find()"]}).facts()["kinds"] == ["SELECT"]
    assert use("mongosh", {"--eval": ["db.c.deleteMany({})"]}).facts()["unbounded"] == ["DELETE"]
    assert use("mongosh", {"--eval": ["db.c.deleteMany({a: 1})"]}).facts()["unbounded"] == []


@pytest.mark.parametrize("query, unbounded", [
    ("DELETE FROM t", ["DELETE"]), ("DELETE FROM t WHERE a = 1", []), ("UPDATE t SET a = 1", ["UPDATE"]),
    ("UPDATE t SET a = 1 WHERE b = 2", []), ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", ["DELETE"]),
    ("SELECT 1", []),
])
def test_unbounded(query, unbounded):
    assert describe_sql(query)["unbounded"] == unbounded


def test_side_effects():
    assert sql_side_effects("COPY t FROM PROGRAM $$curl x$$; VACUUM INTO '/tmp/v'; ATTACH '/tmp/a.db' AS a") == (
        ["curl x"], ["/tmp/v", "/tmp/a.db"])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_never_raises(text):
    for name in ("psql", "mysql", "sqlite3", "mongosh", "redis-cli"):
        facts = use(name, {"-c": [text], "-e": [text], "--eval": [text]}, operands=["db", text], stdin=text,
                    given_=True).facts()
        assert isinstance(facts["parsed"], bool)


@pytest.mark.parametrize("query", ["UPDATE t SET a = 1 WHERE 1 = 1", "DELETE FROM t WHERE true", "UPDATE t SET a = 1 WHERE 'x' = 'x'"])
def test_a_where_naming_no_column_is_unbounded(query):
    assert describe_sql(query)["unbounded"] != []


@pytest.mark.parametrize("name, values, spawns, writes", [
    ("psql", {"-o": ["|sh"]}, ["sh"], []),
    ("psql", {"--output": ["| rm -rf ~"]}, ["rm -rf ~"], []),
    ("psql", {"-o": ["/etc/out"]}, [], ["/etc/out"]),
    ("psql", {"-L": ["/etc/log"], "--log-file": ["/tmp/l"]}, [], ["/etc/log", "/tmp/l"]),
    ("mysql", {"--pager": ["sh -c id"], "--tee": ["/etc/t"]}, ["sh -c id"], ["/etc/t"]),
])
def test_client_options_that_write_or_run(name, values, spawns, writes):
    """The client's own options: its output as a file or a pipe to a program (psql -o '|sh'), its log file."""
    got = use(name, {"-c": ["SELECT 1"], "-e": ["SELECT 1"], **values})
    assert (got.spawns, got.writes) == (spawns, writes)


@pytest.mark.parametrize("text, function, writes", [
    ("\\lo_unlink 16400", "lo_unlink", []),
    ("\\lo_import /etc/passwd", "lo_import", []),
    ("\\lo_export 16400 /etc/x", "lo_export", ["/etc/x"]),
])
def test_psql_large_object_meta_commands(text, function, writes):
    """psql's \\lo_* call the server's large-object functions (lo_unlink deletes one): read as those calls."""
    got = use("psql", {"-c": [text]})
    assert function in got.facts()["functions"] and got.writes == writes


@pytest.mark.parametrize("text, kind", [
    ("\\copy t from /etc/passwd", "write"),
    ("\\copy (DELETE FROM t RETURNING *) to /tmp/out", "delete"),
    ("\\copy (SELECT * FROM t) to stdout with csv", "read"),
])
def test_psql_copy_is_read_as_its_statement(text, kind):
    assert use("psql", {"-c": [text]}).facts()["kind"] == kind
