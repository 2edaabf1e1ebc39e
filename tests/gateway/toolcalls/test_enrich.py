"""build_toolcall_input and its fact builders: paths, shell command facts, URLs, SQL."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.toolcalls.enrich import (build_toolcall_input, describe_path, describe_shell, describe_sql, describe_url,
                                      parse_options)

WS = "/workspace"
SESSION = {"id": "s1", "workload": "persistent", "created_at": 100.0, "workspace": WS, "allow": ["example.com"],
           "labels": {"team": "a"}, "secrets": ["github"], "frozen": False}
PATH_KEYS = {"raw", "normalized", "in_workspace", "is_root", "is_home", "is_workspace_parent", "dynamic", "glob"}


def build(tool: str, args: dict, **session) -> dict:
    return build_toolcall_input(session={**SESSION, **session}, tool=tool, args=args, step=3, now=160.0)


def flags_of(info: dict) -> tuple:
    return (info["normalized"], info["in_workspace"], info["is_root"], info["is_home"], info["is_workspace_parent"],
            info["dynamic"])


# -- paths ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, cwd, expected", [
    ("a.txt", WS, ("/workspace/a.txt", True, False, False, False, False)),
    ("build/", WS, ("/workspace/build", True, False, False, False, False)),
    (".", WS, ("/workspace", True, False, False, False, False)),
    ("..", WS, ("/", False, True, False, True, False)),
    ("../..", WS, ("/", False, True, False, True, False)),
    ("../x", WS, ("/x", False, False, False, False, False)),
    ("/", WS, ("/", False, True, False, True, False)),
    ("//", WS, ("/", False, True, False, True, False)),
    ("/workspace/../etc", WS, ("/etc", False, False, False, False, False)),
    ("/workspace2", WS, ("/workspace2", False, False, False, False, False)),
    ("*", "/", ("/*", False, False, False, False, False)),
    ("*", WS, ("/workspace/*", True, False, False, False, False)),
    ("~", WS, ("~", False, False, True, False, False)),
    ("~/", WS, ("~", False, False, True, False, False)),
    ("~/x", WS, ("~/x", False, False, False, False, False)),
    ("~/x/..", WS, ("~", False, False, True, False, False)),
    ("$HOME", WS, ("~", False, False, True, False, False)),
    ("${HOME}", WS, ("~", False, False, True, False, False)),
    ("${HOME}/", WS, ("~", False, False, True, False, False)),
    ("~bob", WS, ("~bob", False, False, True, False, False)),
    ("/root", WS, ("/root", False, False, True, False, False)),
    ("/home/bob/", WS, ("/home/bob", False, False, True, False, False)),
    ("/home/bob/x", WS, ("/home/bob/x", False, False, False, False, False)),
    ("$PWD/x", WS, ("/workspace/x", True, False, False, False, False)),
    ("$X/y", WS, ("", False, False, False, False, True)),
    ("$(pwd)", WS, ("", False, False, False, False, True)),
    ("a", None, ("", False, False, False, False, True)),
    ("/etc/x", None, ("/etc/x", False, False, False, False, False)),
    ("", WS, ("", False, False, False, False, True)),
    ("x", "~/proj", ("~/proj/x", False, False, False, False, False)),
])
def test_describe_path(raw, cwd, expected):
    info = describe_path(raw, cwd, WS)
    assert set(info) == PATH_KEYS
    assert info["raw"] == raw
    assert flags_of(info) == expected


def test_home_relative_path_is_unknown_when_the_workspace_is_in_a_home():
    assert describe_path("~/proj/x", "/home/u/proj", "/home/u/proj")["dynamic"] is True
    assert describe_path("~", "/home/u/proj", "/home/u/proj")["is_home"] is True
    assert describe_path("/home/u", "/home/u/proj", "/home/u/proj")["is_workspace_parent"] is True


def test_glob_flag():
    assert describe_path("*.py", WS, WS)["glob"] is True
    assert describe_path("a.py", WS, WS)["glob"] is False


# -- the input document -----------------------------------------------------------------------------------
def test_document_shape_for_shell():
    doc = build("shell", {"command": "ls"})
    assert set(doc) == {"kind", "session", "tool", "step", "shell"}
    assert doc["kind"] == "toolcall"
    assert doc["step"] == 3
    assert doc["tool"] == {"name": "shell", "args": {"command": "ls"}}
    assert doc["session"]["age_s"] == 60.0
    assert doc["session"]["workspace"] == WS
    assert doc["shell"]["parsed"] is True
    (cmd,) = doc["shell"]["commands"]
    assert {"argv", "op", "effective", "redirects", "name", "operands", "flags", "dynamic", "cwd", "paths",
            "writes"} <= set(cmd)


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
                          "path": "/a/b", "query": {"x": ["1", "2"]}}
    assert build("http_request", {})["url"]["parsed"] is False


def test_sql_tool():
    assert build("sql", {"query": "DROP TABLE x"})["sql"] == {"parsed": True, "kinds": ["DROP"]}
    assert build("sql", {})["sql"] == {"parsed": False, "kinds": []}
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
    ("mv a /tmp/b", ["/workspace/a", "/tmp/b"]),
    ("touch x", ["/workspace/x"]),
    ("chmod 600 ~/.ssh/id", ["~/.ssh/id"]),
    ("sed -i s/a/b/ f", ["/workspace/f"]),
    ("sed s/a/b/ f", []),
    ("dd if=/dev/zero of=/dev/sda", ["/dev/sda"]),
])
def test_writes(command, writes):
    assert [w["normalized"] for c in commands(command) for w in c["writes"]] == writes


@pytest.mark.parametrize("command, sql", [
    ("psql -c 'DROP TABLE x'", {"parsed": True, "kinds": ["DROP"]}),
    ("psql mydb --command='SELECT 1'", {"parsed": True, "kinds": ["SELECT"]}),
    ("mysql -u root -e 'DELETE FROM t'", {"parsed": True, "kinds": ["DELETE"]}),
    ("sqlite3 app.db 'TRUNCATE TABLE t'", {"parsed": True, "kinds": ["TRUNCATE"]}),
    ("psql <<EOF\nSELECT 1; DROP TABLE y;\nEOF", {"parsed": True, "kinds": ["SELECT", "DROP"]}),
    ("psql -c 'SELEC oops'", {"parsed": False, "kinds": []}),
    ("psql -f x.sql", None),
    ("sqlite3 app.db", None),
])
def test_sql_in_shell(command, sql):
    assert commands(command)[0].get("sql") == sql


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
    assert describe_sql(query) == {"parsed": True, "kinds": kinds}


@pytest.mark.parametrize("query", ["", "   ", "-- only a comment", "garbage here", "SELECT * FROM", "SELECT 1; x",
                                   "x" * 100_001, None])
def test_describe_sql_unparsed(query):
    assert describe_sql(query) == {"parsed": False, "kinds": []}


# -- properties -------------------------------------------------------------------------------------------
PATHISH = st.lists(st.sampled_from(["", ".", "..", "a", "b", "*", "~", "$HOME", "${HOME}", "$X", "root", "home",
                                    "workspace", "/"]), max_size=8).map("/".join)


@settings(max_examples=300, deadline=None)
@given(PATHISH, st.sampled_from([WS, "/", "~/p", None, "/workspace/sub"]))
def test_describe_path_properties(raw, cwd):
    info = describe_path(raw, cwd, WS)
    assert set(info) == PATH_KEYS
    if info["dynamic"]:
        assert not (info["in_workspace"] or info["is_root"] or info["is_workspace_parent"])
        return
    again = describe_path(info["normalized"], cwd, WS)          # normalising is idempotent
    assert again["normalized"] == info["normalized"]
    assert flags_of(again)[1:] == flags_of(info)[1:]
    if info["is_root"] or info["is_workspace_parent"] or info["is_home"]:
        assert info["in_workspace"] is False
    if info["in_workspace"]:
        assert info["normalized"] == WS or info["normalized"].startswith(WS + "/")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["shell", "sql", "http_request", "delete_file", "x"]))
def test_build_never_raises(text, tool):
    doc = build(tool, {"command": text, "query": text, "url": text, "path": text})
    assert doc["kind"] == "toolcall"
    for cmd in doc.get("shell", {}).get("commands", []):
        assert all(set(p) == PATH_KEYS for p in cmd["paths"] + cmd["writes"] + [cmd["cwd"]])


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120))
def test_describe_sql_never_raises(text):
    result = describe_sql(text)
    assert isinstance(result["parsed"], bool)
    assert all(isinstance(k, str) and k for k in result["kinds"])
