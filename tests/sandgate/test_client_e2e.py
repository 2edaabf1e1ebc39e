"""The harness SDK against a real sandgate: sessions, checks (allow, deny, ask → approve / timeout / cancel),
guarded tools, events, scrubbing, and the sync wrapper."""
from __future__ import annotations

import asyncio
import time

import pytest
import requests

from sandgate.client import Client, Conflict, NotFound, ToolDenied, Unauthorized, Unavailable, resolve_endpoint
from sandgate.sync import SyncClient
from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.upstream import free_port

DEPLOY = ("deploy", {"target": "production"})     # the default policy asks


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    config = {**LOOPBACK_CONFIG, "secrets": {"demo": {"source": "env:SG_DEMO_SECRET", "hosts": ["allowed.test"]}}}
    with Sandgate(tmp_path_factory.mktemp("sdk"), config, env={"SG_DEMO_SECRET": "real-demo-value-0123456789"}) as g:
        g.approver = g.token("approver", "alice")
        yield g


@pytest.fixture
async def client(sg):
    async with Client(sg.api, sg.harness_token) as c:
        yield c


async def pending_approval(sg, sid: str) -> dict:
    for _ in range(200):
        rows = (await asyncio.to_thread(sg.call, "GET", f"/v1/approvals?status=pending&session={sid}")).json()
        if rows:
            return rows[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no approval was filed")


async def decide(sg, aid: str, verdict: str, reason: str = "") -> None:
    resp = await asyncio.to_thread(sg.call, "POST", f"/v1/approvals/{aid}/{verdict}", sg.approver,
                                   json={"reason": reason} if reason else {})
    assert resp.status_code == 200, resp.text


async def test_allow_and_deny(client):
    async with client.session(workload="ephemeral", workspace="/work") as s:
        allowed = await s.check("shell", {"command": "ls -la"})
        assert allowed.allowed and allowed.action == "allow" and not allowed.asked
        denied = await s.check("shell", {"command": "rm -rf /"})
        assert denied.action == "deny" and not denied.allowed and denied.codes and denied.reasons


async def test_ask_then_approve(sg, client):
    async with client.session() as s:
        task = asyncio.create_task(s.check(*DEPLOY, wait_s=60))
        item = await pending_approval(sg, s.id)
        assert item["kind"] == "toolcall" and item["action"]["tool"] == "deploy"
        await decide(sg, item["id"], "approve")
        decision = await asyncio.wait_for(task, 30)
        assert decision.allowed and decision.asked and "approval.approved" in decision.codes
        assert decision.approval.status == "approved" and decision.approval.decided_by == "approver:alice"


async def test_ask_then_deny_carries_the_reason(sg, client):
    async with client.session() as s:
        task = asyncio.create_task(s.check(*DEPLOY, wait_s=60))
        item = await pending_approval(sg, s.id)
        await decide(sg, item["id"], "deny", "not on a friday")
        decision = await asyncio.wait_for(task, 30)
        assert not decision.allowed and "approval.denied" in decision.codes
        assert "not on a friday" in decision.reasons


async def test_ask_then_timeout_is_a_deny_and_the_item_stays_pending(sg, client):
    async with client.session() as s:
        decision = await s.check(*DEPLOY, wait_s=0.3)
        assert decision.action == "deny" and decision.asked and "approval.timeout" in decision.codes
        assert decision.approval.status == "pending"
        # Approved later, the identical call goes through once.
        await decide(sg, decision.approval.id, "approve")
        assert (await s.check(*DEPLOY, wait_s=0)).allowed
        again = await s.check(*DEPLOY, wait_s=0)
        assert again.action == "deny" and "approval.timeout" in again.codes


async def test_cancelling_a_waiting_check(sg, client):
    async with client.session() as s:
        task = asyncio.create_task(s.check(*DEPLOY, wait_s=120))
        item = await pending_approval(sg, s.id)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        still = (await asyncio.to_thread(sg.call, "GET", f"/v1/approvals/{item['id']}")).json()
        assert still["status"] == "pending"
        # The client still works after a cancelled long poll.
        assert (await s.check("shell", {"command": "true"})).allowed


async def test_guard_runs_only_allowed_calls(sg, client):
    ran: list[str] = []
    async with client.session(workspace="/work") as s:
        @s.guard()
        async def shell(command: str, cwd: str = "/work") -> str:
            ran.append(command)
            return "ok"

        @s.guard("deploy", wait_s=0.2)
        async def ship(target: str) -> None:
            ran.append(target)

        assert await shell("echo hi") == "ok"
        with pytest.raises(ToolDenied) as denied:
            await shell(command="rm -rf /")
        assert denied.value.decision.action == "deny"
        with pytest.raises(ToolDenied) as timed_out:
            await ship("production")
        assert "approval.timeout" in timed_out.value.decision.codes
        assert ran == ["echo hi"]
        calls = [e for e in await s.events() if e.kind == "toolcall"]
        assert [e.action for e in calls] == ["allow", "deny", "ask"]
    with pytest.raises(TypeError):
        client.guard("s_x")(lambda: None)


async def test_renew_patch_end(sg, client):
    s = await client.create_session(ttl_s=60)
    first = await client.get_session(s.id)
    renewed = await s.renew(3600)
    assert renewed.expires_at > first.expires_at and renewed.status == "active"
    frozen = await s.patch(frozen=True, labels={"step": "2"})
    assert frozen.frozen and frozen.labels == {"step": "2"}
    with pytest.raises(Exception) as bad:
        await s.renew(10 ** 9)
    assert getattr(bad.value, "status", None) == 400
    await s.end()
    assert (await client.get_session(s.id)).status == "deleted"
    with pytest.raises(Conflict):
        await s.renew(60)
    with pytest.raises(NotFound):
        await client.get_session("s_doesnotexist")


def test_renewed_session_keeps_its_proxy_token_working(sg, upstream):
    with SyncClient(sg.api, sg.harness_token) as c, c.session(allow=["allowed.test"], ttl_s=2) as s:
        c.renew_session(s.id, 600)
        time.sleep(2.5)
        proxies = {"http": s.info.proxy_url, "https": s.info.proxy_url}
        resp = requests.get(f"http://allowed.test:{upstream.port}/x", proxies=proxies, timeout=20)
        assert resp.status_code == 200


async def test_events_long_poll_returns_new_events(sg, client):
    async with client.session(allow=["allowed.test"]) as s:
        seen = await s.events()
        last = max(e.seq for e in seen)
        assert await s.events(after=last) == []
        waiter = asyncio.create_task(s.events(after=last, wait_s=30))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await s.check("shell", {"command": "pwd"})
        new = await asyncio.wait_for(waiter, 30)
        assert new and new[0].seq == last + 1 and new[0].kind == "toolcall"


async def test_stream_events_yields_in_order(sg, client):
    async with client.session() as s:
        for cmd in ("a", "b", "c"):
            await s.check("shell", {"command": f"echo {cmd}"})
        got = []
        async for event in s.stream_events():
            got.append(event)
            if sum(e.kind == "toolcall" for e in got) == 3:
                break
        assert [e.seq for e in got] == sorted(e.seq for e in got)


async def test_scrub_replaces_real_values_with_the_session_placeholder(sg, client):
    async with client.session(secrets=["demo"]) as s:
        placeholder = s.env["DEMO"]
        real = "real-demo-value-0123456789"
        import base64
        import json as _json
        texts = [f"token={real}", _json.dumps({"t": real}), base64.b64encode(real.encode()).decode(), "plain"]
        out = await client.scrub(s.id, texts)
        assert all(real not in t for t in out) and out[0] == f"token={placeholder}"
        assert base64.b64decode(out[2]).decode() == placeholder and out[3] == "plain"
    async with client.session() as other:
        assert await client.scrub(other.id, [real]) == [real]     # no secrets in this session


async def test_errors_are_typed(sg):
    async with Client(sg.api, "not-a-token") as bad:
        with pytest.raises(Unauthorized):
            await bad.create_session()
    async with Client(f"http://127.0.0.1:{free_port()}", "x") as nobody:
        with pytest.raises(Unavailable):
            await nobody.health()
    approver = sg.token("approver", "bob")
    async with Client(sg.api, approver) as wrong_role:
        with pytest.raises(Unauthorized) as exc:
            await wrong_role.create_session()
        assert exc.value.status == 403


async def test_other_harness_cannot_read_events_or_scrub(sg, client):
    other_token = sg.token("harness", "someone-else")
    async with client.session(secrets=["demo"]) as s, Client(sg.api, other_token) as other:
        with pytest.raises(NotFound):
            await other.events(s.id)
        with pytest.raises(NotFound):
            await other.scrub(s.id, ["real-demo-value-0123456789"])


def test_sync_client_guard_and_session(sg):
    with SyncClient(sg.api, sg.harness_token) as c:
        with c.session(workspace="/work") as s:
            @s.guard()
            def shell(command: str) -> str:
                return command.upper()

            assert shell("echo x") == "ECHO X"
            with pytest.raises(ToolDenied):
                shell("rm -rf /")
            sid = s.id
        assert c.get_session(sid).status == "deleted"


def test_resolve_endpoint_from_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("SANDGATE_TOKEN", raising=False)
    monkeypatch.delenv("SANDGATE_API_URL", raising=False)
    (tmp_path / "listen.json").write_text('{"api": "127.0.0.1:9999", "proxy": "127.0.0.1:9998"}')
    (tmp_path / "harness.token").write_text("tok\n")
    assert resolve_endpoint(data_dir=tmp_path) == ("http://127.0.0.1:9999", "tok")
    monkeypatch.setenv("SANDGATE_TOKEN", "env-tok")
    assert resolve_endpoint("http://x:1/", data_dir=tmp_path) == ("http://x:1", "env-tok")
    assert resolve_endpoint(data_dir=tmp_path / "none")[0] == "http://127.0.0.1:8700"


async def test_on_ask_gets_the_approval_id_and_its_page_while_the_call_waits(sg, client):
    seen: list[tuple[str, str]] = []

    async def tell_the_user(aid: str, url: str) -> None:
        seen.append((aid, url))
        await decide(sg, aid, "approve")            # somebody looks at the page and approves

    async with client.session() as s:
        decision = await asyncio.wait_for(s.check(*DEPLOY, wait_s=60, on_ask=tell_the_user), 60)
        assert decision.allowed and decision.approval.status == "approved"
        [(aid, url)] = seen
        assert aid == decision.approval.id and url == f"{sg.api}/approvals/{aid}"
        page = await asyncio.to_thread(requests.get, url, allow_redirects=False, timeout=10)
        assert page.status_code in (302, 303) and "/login" in page.headers["Location"]   # the approval page
        # a plain function works too, and an allowed call never calls it
        plain: list[str] = []
        assert (await s.check("shell", {"command": "ls"}, on_ask=lambda a, u: plain.append(a))).allowed
        assert plain == []


def test_sync_guard_passes_on_ask(sg):
    seen: list[str] = []

    def approve_it(aid: str, url: str) -> None:
        seen.append(url)
        resp = sg.call("POST", f"/v1/approvals/{aid}/approve", sg.approver, json={})
        assert resp.status_code == 200, resp.text

    with SyncClient(sg.api, sg.harness_token) as c:
        with c.session() as s:
            @s.guard("deploy", wait_s=60, on_ask=approve_it)
            def deploy(target: str) -> str:
                return f"deployed {target}"

            assert deploy("production") == "deployed production"
            assert len(seen) == 1 and seen[0].startswith(f"{sg.api}/approvals/a_")
