"""`sandgate mcp` end to end: a real upstream MCP server (the SDK's MCPServer) behind the proxy, driven by the
SDK's client, decided by a real sandgate through the tool-call API."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.gateway import ROOT, Sandgate
from tests.support.forked import (MCP_IMPORT_TIME_ENV, MCP_PRELOAD, mcp_run, mcp_stdio, relay_command, spawn_mcp,
                                  spawn_python)

HERE = Path(__file__).parent
UPSTREAM = HERE / "upstream_server.py"
REAL = "real-demo-secret-4f2a9c1d7e"
MCP_ALLOW = ["up/echo", "up/whoami"]
MCP_DENY = ["up/boom"]


def mcp_policy_dir(tmp: Path) -> Path:
    """The shipped policies with mcp_allow / mcp_deny set."""
    out = tmp / "policies"
    shutil.copytree(ROOT / "policies", out, ignore=shutil.ignore_patterns("*_test.rego", "__pycache__", "*.md",
                                                                           "*.py"))
    data_path = out / "sandgate" / "config" / "toolcall" / "data.json"
    data = json.loads(data_path.read_text())
    data.update(mcp_allow=MCP_ALLOW, mcp_deny=MCP_DENY)
    data_path.write_text(json.dumps(data))
    return out


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    cfg = {"policy": {"dir": str(mcp_policy_dir(tmp))},
           "secrets": {"demo": {"source": "env:SG_DEMO_SECRET", "hosts": ["api.demo.test"]}}}
    with Sandgate(tmp / "gw", cfg, env={"SG_DEMO_SECRET": REAL}) as g:
        g.approver = g.token("approver", "alice")
        yield g


@pytest.fixture
def session(sg):
    sess = sg.session(secrets=["demo"])
    yield sess
    sg.call("DELETE", f"/v1/sessions/{sess['id']}")


def upstream_command() -> list[str]:
    """The stdio upstream for `sandgate mcp` to start: a real process it spawns (tests/support/relay_launcher.py)
    whose server, `python UPSTREAM`, is forked from the MCP zygote (the SDK imported once, not 0.9 s of CPU for
    each server); test_proxy_end_to_end's proxy starts `python UPSTREAM` itself."""
    return relay_command(str(UPSTREAM), [], MCP_PRELOAD, MCP_IMPORT_TIME_ENV)


def proxy_args(sg, sid: str, log: Path, *extra: str, upstream: list[str] | None = None) -> list[str]:
    return ["--session", sid, "--name", "up", "--api-url", sg.api, "--token", sg.harness_token, "--env",
            f"DEMO_REAL={REAL}", "--env", f"UPSTREAM_LOG={log}", *extra, "--",
            *(upstream or upstream_command())]


def proxy_params(sg, sid: str, log: Path, *extra: str):
    """The real process, as an MCP client starts it (the SDK's stdio_client execs it)."""
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "gateway", "mcp", *proxy_args(sg, sid, log, *extra,
                                                                           upstream=[sys.executable, str(UPSTREAM)])],
                                 env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT))


def forked_proxy(sg, sid: str, log: Path, *extra: str):
    """The same `sandgate mcp` over the same stdio, forked from the MCP zygote (tests/support/forked.py): for the
    tests of what the proxy does; test_proxy_end_to_end runs the real process."""
    return mcp_stdio(proxy_args(sg, sid, log, *extra), {"PYTHONPATH": str(ROOT)}, ROOT)


async def approve_when_filed(sg, sid: str, verdict: str = "approve", reason: str = "") -> dict:
    for _ in range(400):
        rows = (await asyncio.to_thread(sg.call, "GET", f"/v1/approvals?status=pending&session={sid}")).json()
        if rows:
            resp = await asyncio.to_thread(sg.call, "POST", f"/v1/approvals/{rows[0]['id']}/{verdict}", sg.approver,
                                           json={"reason": reason} if reason else {})
            assert resp.status_code == 200, resp.text
            return rows[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no approval was filed")


def text_of(result) -> str:
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def stdio_client(params):
    from mcp import stdio_client as client

    return client(params)


def ClientSession(r, w):  # noqa: N802 - the SDK's class, imported when a test runs
    from mcp import ClientSession as session

    return session(r, w)


async def test_proxy_end_to_end(sg, session, tmp_path):
    log = tmp_path / "upstream.log"
    log.write_text("")
    async with stdio_client(proxy_params(sg, session["id"], log)) as (r, w), ClientSession(r, w) as client:
        init = await client.initialize()
        assert init.server_info.name == "upstream-demo" and init.instructions == "a test server"

        names = [t.name for t in (await client.list_tools()).tools]
        assert "boom" not in names, "a tool the policy always denies is not listed"
        assert {"echo", "deploy", "whoami"} <= set(names)

        allowed = await client.call_tool("echo", {"text": "hello"})
        assert not allowed.is_error and text_of(allowed) == "hello"

        denied = await client.call_tool("boom", {"target": "prod"})
        assert denied.is_error and "sandgate denied" in text_of(denied) and "toolcall.mcp_denied" in text_of(denied)

        approver = asyncio.create_task(approve_when_filed(sg, session["id"]))
        asked = await asyncio.wait_for(client.call_tool("deploy", {"target": "staging"}), 60)
        item = await approver
        assert not asked.is_error and text_of(asked) == "deployed staging"
        assert {k: item["action"][k] for k in ("tool", "args", "mcp_server")} == \
            {"tool": "deploy", "args": {"target": "staging"}, "mcp_server": "up"}
        assert item["action"]["codes"] == ["toolcall.mcp_unlisted"]      # the approver's view: why it asks

        refuser = asyncio.create_task(approve_when_filed(sg, session["id"], "deny", "not today"))
        refused = await asyncio.wait_for(client.call_tool("deploy", {"target": "prod"}), 60)
        await refuser
        assert refused.is_error and "not today" in text_of(refused)

    assert log.read_text().splitlines() == ["deploy staging"], "denied and refused calls never reach upstream"
    events = [e for e in sg.events(session["id"]) if e["kind"] == "toolcall"]
    assert [(e["detail"]["tool"], e["action"]) for e in events] == [
        ("echo", "allow"), ("boom", "deny"), ("deploy", "ask"), ("deploy", "ask")]
    assert all(e["detail"]["mcp_server"] == "up" for e in events)


async def test_results_and_upstream_errors_are_scrubbed_of_the_sessions_secrets(sg, session, tmp_path):
    """What the upstream returns (results, resources, prompts) and its errors: one proxy, one upstream."""
    from mcp.shared.exceptions import MCPError

    placeholder = session["env"]["DEMO"]
    async with forked_proxy(sg, session["id"], tmp_path / "log") as (r, w), ClientSession(r, w) as client:
        await client.initialize()
        result = await client.call_tool("whoami", {})
        assert not result.is_error
        assert REAL not in result.model_dump_json() and text_of(result) == f"token={placeholder} ok"
        resource = await client.read_resource("config://token")
        assert REAL not in resource.model_dump_json() and placeholder in resource.model_dump_json()
        prompt = await client.get_prompt("greet", {"name": REAL})
        assert REAL not in prompt.model_dump_json()

        with pytest.raises(MCPError) as err:
            await client.read_resource(f"missing://{REAL}")
        assert REAL not in repr(err.value.error.model_dump()) and session["env"]["DEMO"] in err.value.message
        failed = await client.call_tool("echo", {"text": 3})     # the upstream refuses the argument type
        assert REAL not in failed.model_dump_json()


async def test_annotations_never_turn_ask_into_allow(sg, session, tmp_path):
    # boom claims readOnlyHint, deploy claims nothing: both still go by the policy (deny, ask).
    async with forked_proxy(sg, session["id"], tmp_path / "log", "--approval-wait-s", "0.2") as (r, w), \
            ClientSession(r, w) as client:
        await client.initialize()
        timed_out = await client.call_tool("deploy", {"target": "x"})
        assert timed_out.is_error and "approval.timeout" in text_of(timed_out)


def test_toolcall_api_binds_approvals_per_server(sg, session):
    def call(server):
        return sg.call("POST", "/v1/toolcalls", json={"session": session["id"], "tool": "deploy",
                                                      "args": {"target": "p"}, "mcp": {"server": server}}).json()
    first, other = call("a"), call("b")
    assert first["decision"] == other["decision"] == "ask"
    assert first["approval_id"] != other["approval_id"]
    assert sg.call("POST", f"/v1/approvals/{first['approval_id']}/approve", sg.approver, json={}).status_code == 200
    assert call("b")["decision"] == "ask", "an approval for server a does not let server b's tool run"
    assert call("a")["decision"] == "allow"
    bad = sg.call("POST", "/v1/toolcalls", json={"session": session["id"], "tool": "x", "mcp": {"server": "a/b"}})
    assert bad.status_code == 400


def test_listing_probe_files_nothing(sg, session):
    resp = sg.call("POST", "/v1/mcp/tools", json={"session": session["id"], "server": "up",
                                                   "tools": [{"name": "boom"}, {"name": "deploy"}, {"name": "echo"}]})
    assert resp.status_code == 200, resp.text
    got = {t["name"]: (t["decision"], t["hidden"]) for t in resp.json()["tools"]}
    assert got == {"boom": ("deny", True), "deploy": ("ask", False), "echo": ("allow", False)}
    assert sg.call("GET", f"/v1/approvals?session={session['id']}").json() == []
    other = sg.token("harness", "other")
    assert sg.call("POST", "/v1/mcp/tools", other, json={"session": session["id"], "server": "up",
                                                          "tools": []}).status_code == 404


def test_bad_invocations_exit_2(sg, session):
    base = [sys.executable, "-m", "gateway", "mcp", "--api-url", sg.api, "--token", sg.harness_token]
    # a bad invocation is refused before any upstream runs: in this process (gateway.cli.main, as the process runs
    # it; an exception escaping it fails the test), after one real process; an upstream that fails, below, runs in
    # a `sandgate mcp` process each, forked from the MCP zygote (mcp_run: its own stdin, stdout and stderr pipes;
    # its log lines go to the process's stderr)
    for i, args in enumerate((["--session", session["id"]],                       # no upstream
                              ["--session", "s_nope", "--", "true"],               # unknown session
                              ["--session", session["id"], "--env", "SANDGATE_TOKEN", "--", "true"])):
        if i == 0:
            out = subprocess.run(base + args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        else:
            out = run_cli(*base[3:], *args)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr
    for upstream in (["false"], ["sh", "-c", "echo not-json"], ["/nonexistent/server"]):
        out = mcp_run([*base[4:], "--session", session["id"], "--", *upstream], timeout=60)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("sandgate mcp: ")


# -- streamable HTTP: the front, and a remote upstream ---------------------------------------------------
def start_proxy(sg, sid: str, log: Path, *upstream: str, token: str = "front-token-123") -> tuple:
    """`sandgate mcp --listen` forked from the MCP zygote (tests/support/forked.py), its stdout and stderr on
    pipes."""
    env = {**os.environ, "SANDGATE_MCP_TOKEN": token, "UPSTREAM_LOG": str(log), "DEMO_REAL": REAL}
    proc = spawn_mcp(["--session", sid, "--name", "up", "--api-url", sg.api, "--token", sg.harness_token,
                      "--listen", "127.0.0.1:0", "--env", "DEMO_REAL", "--env", "UPSTREAM_LOG", *upstream], env,
                     ROOT)
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError(proc.stderr.read())
    return proc, json.loads(line)["url"]


async def drive_http(url: str, token: str) -> tuple[list[str], str, bool]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
            streamable_http_client(url, http_client=http) as (r, w), ClientSession(r, w) as client:
        await client.initialize()
        names = [t.name for t in (await client.list_tools()).tools]
        echoed = text_of(await client.call_tool("whoami", {}))
        denied = (await client.call_tool("boom", {"target": "x"})).is_error
        return names, echoed, denied


@pytest.fixture(scope="module")
def http_front(sg, tmp_path_factory):
    """One `sandgate mcp --listen` proxy (and its stdio upstream) for the streamable HTTP front's tests, on a
    session of its own; each test ends the MCP sessions it opened (the SDK's client DELETEs its own on exit)."""
    sess = sg.session(secrets=["demo"])
    proc, url = start_proxy(sg, sess["id"], tmp_path_factory.mktemp("front") / "log", "--", *upstream_command())
    try:
        yield sess, url
    finally:
        proc.terminate()
        proc.wait(15)
        sg.call("DELETE", f"/v1/sessions/{sess['id']}")


def test_streamable_http_front(http_front):
    import requests

    sess, url = http_front
    names, whoami, denied = asyncio.run(drive_http(url, "front-token-123"))
    assert "boom" not in names and "echo" in names
    assert whoami == f"token={sess['env']['DEMO']} ok" and denied
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "front-token-123"}):
        resp = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers, timeout=10)
        assert resp.status_code == 401


def test_streamable_http_sessions_are_capped(http_front):
    """An agent that opens MCP sessions without end: the proxy keeps at most MAX_HTTP_SESSIONS (then 503); one
    ended by DELETE makes room."""
    import requests

    from sandgate.mcp.command import MAX_HTTP_SESSIONS

    _, url = http_front
    headers = {"Authorization": "Bearer front-token-123", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    ids = []
    with requests.Session() as http:
        try:
            for _ in range(MAX_HTTP_SESSIONS):
                resp = http.post(url, json=init, headers=headers, timeout=30)
                assert resp.status_code == 200, resp.text
                ids.append(resp.headers["mcp-session-id"])
            assert http.post(url, json=init, headers=headers, timeout=30).status_code == 503
            assert http.delete(url, headers={**headers, "mcp-session-id": ids.pop(0)}, timeout=30).status_code == 200
            resp = http.post(url, json=init, headers=headers, timeout=30)
            assert resp.status_code == 200
            ids.append(resp.headers["mcp-session-id"])
        finally:
            for sid in ids:          # the shared proxy is left with none of this test's sessions
                http.delete(url, headers={**headers, "mcp-session-id": sid}, timeout=30)


def test_remote_streamable_http_upstream(sg, session, tmp_path):
    from tests.support.upstream import free_port

    port = free_port()
    log = tmp_path / "log"
    # the upstream server (the SDK's MCPServer, which the MCP zygote has imported) forked from it: spawn_python is
    # `subprocess.Popen([python, UPSTREAM, ...])` with its output on /dev/null
    upstream = spawn_python(str(UPSTREAM), [str(port), "upstream-secret-token"],
                            {**os.environ, "DEMO_REAL": REAL, "UPSTREAM_LOG": str(log)}, MCP_PRELOAD,
                            MCP_IMPORT_TIME_ENV)
    try:
        import socket
        import time
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert upstream.poll() is None and time.monotonic() < deadline, "the MCP upstream did not start"
                time.sleep(0.05)
        proc, url = start_proxy(sg, session["id"], log, "--upstream", f"http://127.0.0.1:{port}/mcp",
                                "--upstream-header", "Authorization: Bearer upstream-secret-token")
        try:
            try:
                names, whoami, denied = asyncio.run(drive_http(url, "front-token-123"))
            except BaseException:
                proc.terminate()
                raise AssertionError(f"proxy failed: {proc.communicate(timeout=15)[1][-2000:]}") from None
            assert "boom" not in names and whoami == f"token={session['env']['DEMO']} ok" and denied
        finally:
            proc.terminate()
            proc.wait(15)
    finally:
        upstream.terminate()
        upstream.wait(15)

