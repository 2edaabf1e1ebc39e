"""EgressAddon in process, the way mitmproxy tests its own addons (`taddons.context`, `tflow`): each hook called
with a flow, on real services (SQLite store, audit, session registry, approval queue, the shipped policies)."""
from __future__ import annotations

import base64
import json
from contextlib import AsyncExitStack

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow

from gateway.config import EgressSettings
from gateway.net.addresses import parse_networks
from gateway.egress.flows import flow_state
from tests.support.services import egress_addons, open_services

LOOPBACK = EgressSettings(private_allow=parse_networks(["127.0.0.0/8"]))
NAMES = {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}


@pytest.fixture
async def world(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        addons = await egress_addons(stack, svc, LOOPBACK, NAMES)
        yield svc, addons


def proxy_auth(token: str) -> str:
    return "Basic " + base64.b64encode(f"sandgate:{token}".encode()).decode()


def make_flow(url: str, method: str = "GET", token: str | None = None, headers: dict | None = None,
              body: bytes = b"") -> http.HTTPFlow:
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Proxy-Authorization"] = proxy_auth(token)
    flow = tflow.tflow(req=http.Request.make(method, url, body, all_headers))
    flow.client_conn.sni = None
    return flow


def answer(flow: http.HTTPFlow) -> tuple[int, dict]:
    assert flow.response is not None
    return flow.response.status_code, json.loads(flow.response.content or b"{}")


async def test_no_credentials_is_407(world):
    _, addons = world
    with taddons.context(addons.egress):
        f = make_flow("http://allowed.test/")
        await addons.egress.requestheaders(f)
    status, body = answer(f)
    assert status == 407 and body["code"] == "auth.proxy" and flow_state(f) is None


async def test_an_allowed_request_goes_on_and_is_audited_once(world):
    svc, addons = world
    session, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        f = make_flow("http://allowed.test/x?q=1", token=token)
        await addons.egress.requestheaders(f)
        assert f.response is None and "Proxy-Authorization" not in f.request.headers
        st = flow_state(f)
        assert st.decision.action == "allow" and st.session.id == st.session_id == session.id
        await addons.egress.request(f)
        f.response = http.Response.make(200, b"hello")
        addons.egress.responseheaders(f)
        addons.egress.response(f)
        addons.egress.response(f)
    rows = [e for e in await svc.events(session["id"], kind="egress")]
    assert [(r["action"], r["http_status"], r["host"], r["path"]) for r in rows] == [("allow", 200, "allowed.test",
                                                                                        "/x?q=1")]
    assert svc.sessions.with_stats(session)["stats"]["requests"] == 1


async def test_a_host_off_the_allow_list_is_403_with_the_policys_reason(world):
    svc, addons = world
    session, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        f = make_flow("http://other.test/", token=token)
        await addons.egress.requestheaders(f)
    status, body = answer(f)
    assert status == 403 and f.response.headers["X-Sandgate-Decision"] == "deny"
    assert body["error"] == "denied" and body["request_id"] == f.id and "other.test" in body["reason"]
    assert [e["action"] for e in await svc.events(session["id"], kind="egress")] == ["deny"]


async def test_the_address_is_checked_after_the_policy(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        addons = await egress_addons(stack, svc, EgressSettings(), NAMES)     # loopback not allowed
        _, token = await svc.session(allow=["allowed.test"])
        with taddons.context(addons.egress):
            f = make_flow("http://allowed.test/", token=token)
            await addons.egress.requestheaders(f)
        assert answer(f)[0] == 403 and answer(f)[1]["code"] == "address.loopback"


@pytest.mark.parametrize("url, code", [
    ("http://unknown.test/", "address.unresolvable"),
    ("http://[::1]:8080/", "address.loopback"),
    ("http://169.254.169.254/latest/meta-data", "address.link_local"),
])
async def test_addresses_that_may_not_be_reached(world, url, code):
    svc, addons = world
    _, token = await svc.session(allow=["unknown.test", "[::1]", "169.254.169.254"])
    with taddons.context(addons.egress):
        f = make_flow(url, token=token)
        await addons.egress.requestheaders(f)
    assert answer(f)[1]["code"] == code


async def test_an_ask_is_marked_for_the_hold_and_not_answered(world):
    svc, addons = world
    _, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        f = make_flow("http://allowed.test/thing", method="DELETE", token=token)
        await addons.egress.requestheaders(f)
    assert f.response is None and flow_state(f).ask


async def test_a_placeholder_of_another_session_is_refused_before_the_policy(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path, secrets={"github": {"source": "env:GH", "hosts": ["allowed.test"]}},
                                  environ={"GH": "ghp_" + "R" * 36})
        addons = await egress_addons(stack, svc, LOOPBACK, NAMES)
        other, _ = await svc.session(secrets=["github"])
        mine, token = await svc.session(allow=["allowed.test"])
        with taddons.context(addons.egress):
            f = make_flow("https://allowed.test/", token=token,
                          headers={"Authorization": f"Bearer {other['placeholders']['github']}"})
            await addons.egress.requestheaders(f)
        assert answer(f)[1]["code"] == "secret.exfiltration"
        exfil = await svc.events(mine["id"], kind="exfiltration")
        assert exfil[0]["detail"] == {"secrets": [], "foreign": True}


async def test_identity_is_per_connection_and_an_ended_session_is_refused(world):
    svc, addons = world
    session, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        first = make_flow("http://allowed.test/", token=token)
        await addons.egress.requestheaders(first)
        again = make_flow("http://allowed.test/")          # same connection, no credentials: still that session
        again.client_conn = first.client_conn
        await addons.egress.requestheaders(again)
        assert again.response is None and addons.egress.session_of(first.client_conn) == session["id"]
        await svc.sessions.delete(session, "harness:test")
        assert not addons.egress.connection_valid(first.client_conn)
        late = make_flow("http://allowed.test/")
        late.client_conn = first.client_conn
        await addons.egress.requestheaders(late)
    assert answer(late)[0] == 407


async def test_a_connect_opens_a_tunnel_and_requests_inside_stay_in_it(world):
    svc, addons = world
    _, token = await svc.session(allow=["allowed.test", "other.test"])
    with taddons.context(addons.egress):
        connect = make_flow("http://allowed.test:443/", token=token)
        connect.request.method, connect.request.authority = "CONNECT", "allowed.test:443"
        await addons.egress.http_connect(connect)
        assert connect.response is None and addons.egress.conns[connect.client_conn].tunnel == ("allowed.test", 443)
        inside = make_flow("https://other.test:443/")
        inside.client_conn = connect.client_conn
        await addons.egress.requestheaders(inside)
    assert answer(inside)[1]["code"] == "egress.authority_mismatch"


async def test_a_failing_hook_denies(world):
    svc, addons = world
    _, token = await svc.session(allow=["allowed.test"])

    class Broken:
        async def resolve(self, host: str, port: int) -> list[str]:
            raise RuntimeError("resolver bug")

    object.__setattr__(addons.egress.deps, "resolver", Broken())
    with taddons.context(addons.egress):
        f = make_flow("http://allowed.test/", token=token)
        await addons.egress.requestheaders(f)
    assert answer(f)[0] == 403 and answer(f)[1]["code"] == "internal_error"


async def test_a_gateway_that_cannot_record_does_not_decide(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        addons = await egress_addons(stack, svc, LOOPBACK, NAMES)
        _, token = await svc.session(allow=["allowed.test"])
        svc.audit.max_pending = 0
        with taddons.context(addons.egress):
            f = make_flow("http://allowed.test/", token=token)
            await addons.egress.requestheaders(f)
        assert answer(f)[0] == 503 and answer(f)[1]["code"] == "audit.unavailable"


def on(conn_flow: http.HTTPFlow, flow: http.HTTPFlow) -> http.HTTPFlow:
    flow.client_conn = conn_flow.client_conn
    return flow


async def test_the_same_credentials_again_are_checked_for_revocation_every_time(world):
    """A keep-alive client sends the same Proxy-Authorization on every request: its token is checked again each
    time (revoked after the first request: the next one is 407)."""
    svc, addons = world
    _, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        first = make_flow("http://allowed.test/", token=token)
        await addons.egress.requestheaders(first)
        second = on(first, make_flow("http://allowed.test/", token=token))
        await addons.egress.requestheaders(second)
        assert first.response is None and second.response is None
        assert "Proxy-Authorization" not in second.request.headers
        svc.tokens.revocations.add(svc.tokens.verify(token).jti)
        third = on(first, make_flow("http://allowed.test/", token=token))
        await addons.egress.requestheaders(third)
    status, body = answer(third)
    assert status == 407 and "revoked" in body["reason"] and "Proxy-Authorization" not in third.request.headers


async def test_the_same_credentials_again_are_checked_for_expiry_every_time(world, monkeypatch):
    svc, addons = world
    _, token = await svc.session(allow=["allowed.test"])
    exp = svc.tokens.verify(token).exp
    with taddons.context(addons.egress):
        first = make_flow("http://allowed.test/", token=token)
        await addons.egress.requestheaders(first)
        assert first.response is None
        import gateway.auth.tokens
        monkeypatch.setattr(gateway.auth.tokens.time, "time", lambda: exp + 1)
        later = on(first, make_flow("http://allowed.test/", token=token))
        await addons.egress.requestheaders(later)
    status, body = answer(later)
    assert status == 407 and "expired" in body["reason"]


async def test_each_request_is_the_session_its_credentials_name(world):
    """Credentials switching on one connection (A, B, A; a fresh token of A, then A's old one again): every
    request is the session, and the token, its own header names; a revoked one is refused even when it was the
    connection's first."""
    svc, addons = world
    a, token_a = await svc.session(allow=["allowed.test"])
    b, token_b = await svc.session(allow=["allowed.test"])
    fresh_a = svc.signer.mint("session", a["id"], 3600, session_id=a["id"], workload=a["workload"])
    seen = []
    with taddons.context(addons.egress):
        conn = make_flow("http://allowed.test/", token=token_a)
        await addons.egress.requestheaders(conn)
        seen.append(flow_state(conn).session["id"])
        for token in (token_b, token_a, fresh_a, token_a, fresh_a):
            f = on(conn, make_flow("http://allowed.test/", token=token))
            await addons.egress.requestheaders(f)
            assert f.response is None
            seen.append(flow_state(f).session["id"])
            assert addons.egress.conns[conn.client_conn].principal == svc.tokens.verify(token)
        svc.tokens.revocations.add(svc.tokens.verify(token_a).jti)
        refused = on(conn, make_flow("http://allowed.test/", token=token_a))
        await addons.egress.requestheaders(refused)
        still = on(conn, make_flow("http://allowed.test/", token=fresh_a))
        await addons.egress.requestheaders(still)
    assert seen == [a["id"], b["id"], a["id"], a["id"], a["id"], a["id"]]
    assert answer(refused)[0] == 407 and still.response is None and flow_state(still).session["id"] == a["id"]


async def test_every_proxy_authorization_field_is_removed_and_the_first_counts(world):
    svc, addons = world
    a, token_a = await svc.session(allow=["allowed.test"])
    _, token_b = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        for _ in range(2):                          # the second time, the connection knows the first field
            f = tflow.tflow(req=http.Request.make("GET", "http://allowed.test/", b"", [
                (b"proxy-AUTHORIZATION", proxy_auth(token_a).encode()), (b"X-Other", b"1"),
                (b"Proxy-Authorization", proxy_auth(token_b).encode())]))
            f.client_conn.sni = None
            if _:
                f.client_conn = first.client_conn
            else:
                first = f
            await addons.egress.requestheaders(f)
            assert f.response is None and flow_state(f).session["id"] == a["id"]
            assert [k for k, _ in f.request.headers.fields if k.lower().startswith(b"proxy")] == []
            assert f.request.headers["X-Other"] == "1"


async def test_credentials_inside_a_tunnel_change_nothing(world):
    """Inside a tunnel no header can change the connection's identity (the CONNECT's credentials count)."""
    svc, addons = world
    a, token_a = await svc.session(allow=["allowed.test"])
    _, token_b = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress):
        connect = make_flow("http://allowed.test:443/", token=token_a)
        connect.request.method, connect.request.authority = "CONNECT", "allowed.test:443"
        await addons.egress.http_connect(connect)
        for token in (token_b, token_a, "not-a-token"):
            inside = on(connect, make_flow("https://allowed.test:443/", token=token))
            await addons.egress.requestheaders(inside)
            assert inside.response is None and flow_state(inside).session["id"] == a["id"]
            assert "Proxy-Authorization" not in inside.request.headers
        svc.tokens.revocations.add(svc.tokens.verify(token_a).jti)
        late = on(connect, make_flow("https://allowed.test:443/", token=token_a))
        await addons.egress.requestheaders(late)
    assert answer(late)[0] == 407
