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
        assert st.decision.action == "allow" and st.session["id"] == session["id"]
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
