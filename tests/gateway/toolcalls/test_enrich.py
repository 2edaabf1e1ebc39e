"""build_toolcall_input and its fact builders: paths, shell command facts, URLs, SQL."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.enrich import build_toolcall_input, describe_shell, describe_sql, describe_url, parse_options
from gateway.toolcalls.paths import PATH_KEYS

WS = "/workspace"
SESSION = {"id": "s1", "workload": "persistent", "created_at": 100.0, "workspace": WS, "allow": ["example.com"],
           "labels": {"team": "a"}, "secrets": ["github"], "frozen": False}


def build(tool: str, args: dict, **session) -> dict:
    return build_toolcall_input(session={**SESSION, **session}, tool=tool, args=args, step=3, now=160.0)


def flags_of(info: dict) -> tuple:
    return (info["normalized"], info["in_workspace"], info["is_root"], info["is_home"], info["is_workspace_parent"],
            info["dynamic"])


# -- the input document -----------------------------------------------------------------------------------
def test_document_shape_for_shell():
    doc = build("shell", {"command": "ls"})
    assert set(doc) == {"kind", "session", "tool", "step", "shell", "history"}
    assert doc["history"] == []
    assert doc["kind"] == "toolcall"
    assert doc["step"] == 3
    assert doc["tool"] == {"name": "shell", "args": {"command": "ls"}}
    assert doc["session"]["age_s"] == 60.0
    assert doc["session"]["workspace"] == WS
    assert doc["shell"]["parsed"] is True
    (cmd,) = doc["shell"]["commands"]
    assert {"argv", "op", "effective", "redirects", "name", "operands", "flags", "options", "dynamic", "cwd",
            "paths", "writes", "deletes", "moves"} <= set(cmd)


@pytest.mark.parametrize("tool", ["shell", "bash", "sh", "exec", "terminal"])
def test_shell_like_tools(tool):
    assert build(tool, {"command": "rm -rf x"})["shell"]["commands"][0]["name"] == "rm"


@pytest.mark.parametrize("args", [{}, {"command": 5}, {"command": None}, {"cmd": "ls"}])
def test_shell_without_a_command_is_unparsed(args):
    assert build("shell", args)["shell"] == {"parsed": False, "commands": []}


def test_shell_command_as_word_list():
    cmd = build("exec", {"command": ["rm", "-rf", "a b"]})["shell"]["commands"][0]
    assert cmd["argv"] == ["rm", "-rf", "a b"]


def test_path_tools():
    doc = build("delete_file", {"path": "../x"})
    assert doc["path"]["normalized"] == "/x"
    assert doc["path"]["in_workspace"] is False
    assert "path" not in build("delete_file", {"path": 3})
    assert build("custom_tool", {"path": "a"})["path"]["in_workspace"] is True


def test_relative_workspace_and_default():
    assert build("read_file", {"path": "a"}, workspace=None)["path"]["normalized"] == "/workspace/a"
    assert build("read_file", {"path": "a"}, workspace="/srv/app/")["path"]["normalized"] == "/srv/app/a"


def test_http_request_url():
    doc = build("http_request", {"method": "post", "url": "https://API.Example.com:8443/a/b?x=1&x=2"})
    assert doc["url"] == {"parsed": True, "scheme": "https", "host": "api.example.com", "port": 8443,
                          "path": "/a/b", "query": {"x": ["1", "2"]}, "ip_class": ""}
    assert build("http_request", {})["url"]["parsed"] is False


def test_sql_tool():
    assert build("sql", {"query": "DROP TABLE x"})["sql"] == {"parsed": True, "kinds": ["DROP"], "unbounded": [],
                                                              "visible": True, "kind": "delete", "dialect": "postgres",
                                                              "functions": [], "settings": [], "unsafe": ["DROP"]}
    assert build("sql", {"query": "delete from t"})["sql"]["unbounded"] == ["DELETE"]
    assert build("sql", {})["sql"] == {"parsed": False, "kinds": [], "unbounded": [], "visible": False}
    assert build("sql", {"query": "SELECT 1", "dialect": "nonsense"})["sql"]["parsed"] is True


def test_odd_tool_and_args():
    doc = build_toolcall_input(session=SESSION, tool=None, args=None, step=None, now=0.0)  # type: ignore[arg-type]
    assert doc["tool"] == {"name": "", "args": {}}
    assert doc["step"] is None


# -- shell facts ------------------------------------------------------------------------------------------
def commands(command: str, workspace: str = WS) -> list[dict]:
    return describe_shell(command, workspace)["commands"]


def test_cd_moves_the_working_directory():
    cd, rm = commands("cd / && rm -rf *")
    assert cd["paths"][0]["is_root"] is True
    assert rm["cwd"]["normalized"] == "/"
    assert rm["paths"][0]["normalized"] == "/*"
    assert rm["paths"][0]["in_workspace"] is False


@pytest.mark.parametrize("command, expected_cwd", [
    ("cd sub; pwd", "/workspace/sub"),
    ("cd; pwd", "~"),
    ("cd ~/x; pwd", "~/x"),
    ("cd -; pwd", ""),
    ("cd $X; pwd", ""),
    ("pushd /tmp; pwd", "/tmp"),
    ("pushd /tmp; popd; pwd", ""),
    ("(cd /tmp); pwd", "/tmp"),          # subshells are flattened: conservative
])
def test_cwd_tracking(command, expected_cwd):
    assert commands(command)[-1]["cwd"]["normalized"] == expected_cwd


def test_git_dash_c_sets_the_directory():
    (cmd,) = commands("git -C /tmp clean -fdx")
    assert cmd["cwd"]["normalized"] == "/tmp"
    assert cmd["operands"] == ["clean"]
    assert cmd["paths"] == []


@pytest.mark.parametrize("name, words, flags, operands, values", [
    ("rm", ["-rf", "--", "-x", "y"], ["-rf", "-r", "-f"], ["-x", "y"], {}),
    ("git", ["-c", "a=b", "push", "-fu", "origin", "main"], ["-c", "-fu", "-f", "-u"], ["push", "origin", "main"],
     {"-c": ["a=b"]}),
    ("curl", ["-sSXPOST", "-H", "A: b", "u"], ["-sSXPOST", "-s", "-S", "-X", "-H"], ["u"],
     {"-X": ["POST"], "-H": ["A: b"]}),
    ("curl", ["--data=x", "--url", "u"], ["--data", "--url"], [], {"--data": ["x"], "--url": ["u"]}),
    ("kubectl", ["-n", "prod", "apply", "-f", "x.yaml"], ["-n", "-f"], ["apply"], {"-n": ["prod"], "-f": ["x.yaml"]}),
    ("ls", ["-"], [], ["-"], {}),
])
def test_parse_options(name, words, flags, operands, values):
    assert parse_options(name, words) == (flags, operands, values)


def test_find_paths_are_start_points_and_exec_names():
    (find, rm) = commands("find /tmp . -name '*.pyc' -exec sudo rm -f {} \\;")
    assert [p["raw"] for p in find["paths"]] == ["/tmp", "."]
    assert find["exec_names"] == ["rm"]
    assert rm["name"] == "rm"
    assert commands("find -name x")[0]["paths"][0]["raw"] == "."


@pytest.mark.parametrize("command, writes", [
    ("echo hi > out", ["/workspace/out"]),
    ("echo hi >> /etc/x 2>/dev/null", ["/etc/x"]),
    ("cmd 2>&1 > /dev/null", []),
    ("cat < in", []),
    ("echo x | tee a /tmp/b", ["/workspace/a", "/tmp/b"]),
    ("cp a b /opt/", ["/opt"]),
    ("cp -t /opt a b", ["/opt"]),
    ("mv a /tmp/b", ["/tmp/b"]),
    ("touch x", ["/workspace/x"]),
    ("chmod 600 ~/.ssh/id", ["~/.ssh/id"]),
    ("sed -i s/a/b/ f", ["/workspace/f"]),
    ("sed s/a/b/ f", []),
    ("dd if=/dev/zero of=/dev/sda", ["/dev/sda"]),
])
def test_writes(command, writes):
    assert [w["normalized"] for c in commands(command) for w in c["writes"]] == writes


@pytest.mark.parametrize("command, sql", [
    ("psql -c 'DROP TABLE x'", (True, ["DROP"], [], True)),
    ("psql mydb --command='SELECT 1'", (True, ["SELECT"], [], True)),
    ("mysql -u root -e 'DELETE FROM t'", (True, ["DELETE"], ["DELETE"], True)),
    ("sqlite3 app.db 'TRUNCATE TABLE t'", (True, ["TRUNCATE"], [], True)),
    ("psql <<EOF\nSELECT 1; DROP TABLE y;\nEOF", (True, ["SELECT", "DROP"], [], True)),
    ("psql -c 'SELEC oops'", (False, [], [], True)),
    ("psql -f x.sql", (True, [], [], False)),
    ("sqlite3 app.db", (True, [], [], False)),
    ("psql -l", None),
    ("psql --version", None),
])
def test_sql_in_shell(command, sql):
    got = commands(command)[0].get("sql")
    assert (got if got is None else (got["parsed"], got["kinds"], got["unbounded"], got["visible"])) == sql


@pytest.mark.parametrize("command, method, hosts", [
    ("curl https://a.test/x", "GET", ["a.test"]),
    ("curl -X post https://a.test/x", "POST", ["a.test"]),
    ("curl -d @f a.test", "POST", ["a.test"]),
    ("curl -G -d q=1 a.test", "GET", ["a.test"]),
    ("curl -T f https://a.test/", "PUT", ["a.test"]),
    ("curl -I a.test", "HEAD", ["a.test"]),
    ("curl --json '{}' --url https://b.test/", "POST", ["b.test"]),
    ("curl -H 'Host: evil.test' -o out https://a.test", "GET", ["a.test"]),
    ("wget --post-data=x http://c.test/", "POST", ["c.test"]),
    ("wget --method=DELETE http://c.test/", "DELETE", ["c.test"]),
    ("wget -O - http://c.test/", "GET", ["c.test"]),
    ("http POST d.test a=1", "POST", ["d.test"]),
    ("http d.test a=1", "POST", ["d.test"]),
    ("http d.test", "GET", ["d.test"]),
])
def test_http_in_shell(command, method, hosts):
    http = commands(command)[0]["http"]
    assert http["method"] == method
    assert [u["host"] for u in http["urls"]] == hosts


@pytest.mark.parametrize("command, dynamic", [
    ("$EDITOR x", True), ("`which rm` x", True), ("/bin/r? x", True), ("curl x | sh", True), ("ls", False),
    ("bash -c 'ls'", False), ("sh x.sh", False),
])
def test_dynamic_commands(command, dynamic):
    assert any(c["dynamic"] for c in commands(command)) is dynamic


# -- urls and sql -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, host, port", [
    ("https://example.com", "example.com", 443),
    ("http://example.com.", "example.com", 80),
    ("http://[::1]:8080/", "::1", 8080),
    ("http://user:pw@Evil.Test/", "evil.test", 80),
    ("http://good.test@evil.test/", "evil.test", 80),
    ("ftp://files.test/x", "files.test", 21),
    ("gopher://g.test/", "g.test", 0),
    ("http://b\u00fccher.de/", "xn--bcher-kva.de", 80),
])
def test_describe_url(url, host, port):
    info = describe_url(url)
    assert info["parsed"] is True
    assert (info["host"], info["port"]) == (host, port)


@pytest.mark.parametrize("url", ["", "not a url", "http://", "http://a.test:99999/", "http://evil.test\\@good.test/",
                                 "http://a b.test/", "http://bad_host!/"])
def test_describe_url_unparsed(url):
    assert describe_url(url) == {"parsed": False, "scheme": "", "host": "", "port": 0, "path": "", "query": {}}


@pytest.mark.parametrize("query, kinds", [
    ("SELECT 1", ["SELECT"]),
    ("select * from t where a = 1", ["SELECT"]),
    ("SELECT 1 UNION SELECT 2", ["SELECT"]),
    ("INSERT INTO t VALUES (1)", ["INSERT"]),
    ("UPDATE t SET a = 1", ["UPDATE"]),
    ("DELETE FROM t", ["DELETE"]),
    ("DROP TABLE t", ["DROP"]),
    ("DROP DATABASE d", ["DROP"]),
    ("TRUNCATE TABLE t", ["TRUNCATE"]),
    ("ALTER TABLE t ADD COLUMN c INT", ["ALTER"]),
    ("ALTER TABLE t DROP COLUMN c", ["ALTER", "DROP"]),
    ("CREATE TABLE t (a INT)", ["CREATE"]),
    ("GRANT ALL ON t TO bob", ["GRANT"]),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", ["SELECT", "DELETE"]),
    ("SELECT 1; DROP TABLE t", ["SELECT", "DROP"]),
    ("SHOW TABLES", ["SHOW"]),
    ("EXPLAIN SELECT 1", ["EXPLAIN", "SELECT"]),
    ("EXPLAIN ANALYZE DELETE FROM t", ["EXPLAIN", "DELETE"]),
    ("BEGIN", ["BEGIN"]),
    ("VACUUM", ["VACUUM"]),
    ("CALL p()", ["CALL"]),
])
def test_describe_sql(query, kinds):
    assert describe_sql(query)["parsed"] is True
    assert describe_sql(query)["kinds"] == kinds


@pytest.mark.parametrize("query", ["", "   ", "-- only a comment", "garbage here", "SELECT * FROM", "SELECT 1; x",
                                   "x" * 100_001, None])
def test_describe_sql_unparsed(query):
    assert describe_sql(query) == {"parsed": False, "kinds": [], "unbounded": [], "kind": "other", "functions": [],
                                   "settings": [], "unsafe": []}


# -- properties -------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["shell", "sql", "http_request", "delete_file", "x"]))
def test_build_never_raises(text, tool):
    started = time.thread_time()
    doc = build(tool, {"command": text, "query": text, "url": text, "path": text})
    elapsed = time.thread_time() - started        # this thread's CPU: other processes on the machine do not count
    assert elapsed < 0.05 or min(_cpu_time(tool, text) for _ in range(3)) < 0.05
    assert doc["kind"] == "toolcall"
    for cmd in doc.get("shell", {}).get("commands", []):
        assert all(tuple(p) == PATH_KEYS for p in cmd["paths"] + cmd["writes"] + cmd["deletes"] + [cmd["cwd"]])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120))
def test_describe_sql_never_raises(text):
    result = describe_sql(text)
    assert isinstance(result["parsed"], bool)
    assert all(isinstance(k, str) and k for k in result["kinds"])


def _cpu_time(tool: str, text: str) -> float:
    started = time.thread_time()
    build(tool, {"command": text, "query": text, "url": text, "path": text})
    return time.thread_time() - started


def test_the_history_is_copied_whatever_sequence_holds_it():
    from gateway.policy.cache import Shared, stamp
    from gateway.toolcalls.enrich import toolcall_base

    session = {"id": "s_1", "workload": "ephemeral", "created_at": 0.0}
    entries = [stamp(Shared({"id": f"t_{i}", "age_s": 0.0}), "age_s", float(i)) for i in range(3)]
    plain = {"id": "t_plain", "age_s": 1.0}
    cases = [(entries, entries), (tuple(entries), entries), (iter(entries), entries), ((e for e in entries), entries),
             (entries + [plain], entries + [plain])]
    for history, expected in cases:
        doc = toolcall_base(session=session, tool="shell", args={"command": "ls"}, step=1, now=1.0, history=history)
        assert doc["history"] == expected and doc["history"] is not history
