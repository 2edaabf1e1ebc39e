"""WebSockets (wss, intercepted) through the proxy: an injected value never comes back in a frame; placeholders never go out."""
from __future__ import annotations

import asyncio
import ssl
import threading

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.upstream import make_cert

REAL = "sk-ws-" + "Q" * 20 + "0123456789"


class WsUpstream:
    """An aiohttp WebSocket server on loopback: greets with the Authorization it got, records messages."""

    def __init__(self, cert=None):
        self.cert = cert
        self.received: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def handler(self, request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("hello " + request.headers.get("Authorization", "-"))
        async for msg in ws:
            self.received.append(msg.data)
            await ws.send_str("echo " + msg.data)
        return ws

    def _run(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/ws", self.handler)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        ctx = None
        if self.cert is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.cert.cert, self.cert.key)
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self):
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def ws_gw(tmp_path_factory):
    """One sandgate for the module: the TLS upstream's CA (what the wss tests need; the cleartext ws tests' upstream
    does not use it), `api` bound to bound.test."""
    tmp = tmp_path_factory.mktemp("ws")
    cert = make_cert(tmp / "certs", ["bound.test", "other.test"])
    cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                      "resolve": {"bound.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}},
           "secrets": {"api": {"source": "env:SG_WS_KEY", "hosts": ["bound.test"]}}}
    with Sandgate(tmp / "gw", cfg, env={"SG_WS_KEY": REAL}) as sg:
        sg.cert = cert
        yield sg


@pytest.fixture(scope="module")
def ws_env(ws_gw):
    with WsUpstream(ws_gw.cert) as up:
        yield ws_gw, up


async def talk(sess, url, headers, send):
    proxy = sess["proxy_url"].replace(f"sandgate:{sess['token']}@", "")
    ctx = ssl.create_default_context(cafile=sess["ca_file"])
    async with aiohttp.ClientSession() as client:
        async with client.ws_connect(url, proxy=proxy, proxy_auth=aiohttp.BasicAuth("sandgate", sess["token"]),
                                     headers=headers, timeout=10, ssl=ctx) as ws:
            greeting = await ws.receive_str(timeout=10)
            await ws.send_str(send)
            await ws.send_str("bye")
            replies = []
            while len(replies) < 2:
                try:
                    replies.append(await ws.receive_str(timeout=2))
                except (asyncio.TimeoutError, TypeError):
                    break
            return greeting, replies


def test_injected_value_scrubbed_from_frames(ws_env):
    sg, up = ws_env
    sess = sg.session(allow=["bound.test"], secrets=["api"])
    ph = sess["env"]["API"]
    greeting, replies = asyncio.run(talk(sess, f"wss://bound.test:{up.port}/ws", {"Authorization": f"Bearer {ph}"},
                                         "plain message"))
    assert greeting == f"hello Bearer {ph}", "the server saw the real value; the sandbox sees the placeholder"
    assert REAL not in greeting and all(REAL not in r for r in replies)


def test_placeholder_in_frame_to_unbound_host_is_dropped(ws_env):
    sg, up = ws_env
    sess = sg.session(allow=["other.test"], secrets=["api"])
    ph = sess["env"]["API"]
    before = list(up.received)
    greeting, replies = asyncio.run(talk(sess, f"wss://other.test:{up.port}/ws", {}, f"token={ph}"))
    new = up.received[len(before):]
    assert all(ph not in m for m in new)
    assert "bye" in new
    assert any(e["kind"] == "exfiltration" for e in sg.events(sess["id"]))


@pytest.fixture(scope="module")
def plain_ws(ws_gw):
    with WsUpstream() as up:
        yield ws_gw, up


def ws_exchange(sock, target: str, host: str, send: str, headers=()) -> tuple[bytes, list[str]]:
    """A WebSocket handshake (request-target `target`) and one text message on `sock`, with wsproto.
    Returns (the handshake response head, the text messages received)."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, CloseConnection, Message, RejectConnection, Request, TextMessage

    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host=host, target=target, extra_headers=list(headers))))
    sock.settimeout(5)
    texts: list[str] = []
    status = b""
    sent = False
    try:
        while len(texts) < 2:
            data = sock.recv(65536)
            if not data:
                break
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    status = b"101"
                elif isinstance(event, RejectConnection):
                    return str(event.status_code).encode(), texts
                elif isinstance(event, TextMessage):
                    texts.append(event.data)
                elif isinstance(event, CloseConnection):
                    return status, texts
            if status == b"101" and not sent:
                sock.sendall(ws.send(Message(data=send)))
                sent = True
    except OSError:
        pass
    return status, texts


def test_ws_through_the_plain_proxy_works_like_wss(plain_ws):
    """ws:// through the plain proxy: the handshake as an absolute-form http:// request (mitmproxy 12 refuses a
    `ws://` request-target itself, with 400 "Invalid request scheme: ws", before any addon runs), or through
    a CONNECT tunnel as RFC 6455 asks of proxy-aware clients. Frames are relayed both ways and every client
    frame is still inspected."""
    import socket

    from tests.support.tunnel import open_tunnel, proxy_auth

    sg, up = plain_ws
    sess = sg.session(allow=["bound.test", "other.test"], secrets=["api"])
    authority = f"other.test:{up.port}"
    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
        status, texts = ws_exchange(sock, f"http://{authority}/ws", authority, "via plain proxy",
                                    [("Proxy-Authorization", proxy_auth(sess["token"]))])
    assert status == b"101" and texts == ["hello -", "echo via plain proxy"]
    with open_tunnel(sg.proxy_port, sess["token"], authority) as sock:
        status, texts = ws_exchange(sock, "/ws", authority, "via CONNECT")
    assert status == b"101" and texts == ["hello -", "echo via CONNECT"]
    before = list(up.received)
    with open_tunnel(sg.proxy_port, sess["token"], authority) as sock:
        ws_exchange(sock, "/ws", authority, f"token={sess['env']['API']}")
    assert all(sess["env"]["API"] not in m for m in up.received[len(before):])
    egress = [e for e in sg.events(sess["id"]) if e["kind"] == "egress" and e["path"] == "/ws"]
    assert len(egress) == 3 and all(e["http_status"] == 101 for e in egress)
    assert any(e["kind"] == "exfiltration" for e in sg.events(sess["id"]))


@pytest.mark.parametrize("via", ["plain", "connect"])
def test_ws_cleartext_placeholder_to_a_bound_host_is_refused(plain_ws, via):
    import socket

    from tests.support.tunnel import open_tunnel, proxy_auth

    sg, up = plain_ws
    sess = sg.session(allow=["bound.test"], secrets=["api"])
    authority = f"bound.test:{up.port}"
    auth = ("Authorization", f"Bearer {sess['env']['API']}")
    if via == "plain":
        with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
            status, _ = ws_exchange(sock, f"http://{authority}/ws", authority, "x",
                                    [("Proxy-Authorization", proxy_auth(sess["token"])), auth])
    else:
        with open_tunnel(sg.proxy_port, sess["token"], authority) as sock:
            status, _ = ws_exchange(sock, "/ws", authority, "x", [auth])
    assert status == b"403"
    assert any(e["codes"] == ["secret.plaintext"] for e in sg.events(sess["id"]))


def test_ws_scheme_request_target_is_refused_by_mitmproxy(plain_ws):
    """The documented limit: mitmproxy 12 answers a `ws://` absolute-form request-target with 400 before any
    addon hook (HttpStream.check_invalid allows only http/https), so nothing reaches the upstream."""
    import socket

    from tests.support.tunnel import proxy_auth, read_response

    sg, up = plain_ws
    sess = sg.session(allow=["other.test"])
    before = len(up.received)
    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
        sock.sendall(f"GET ws://other.test:{up.port}/ws HTTP/1.1\r\nHost: other.test:{up.port}\r\n"
                     f"Proxy-Authorization: {proxy_auth(sess['token'])}\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n".encode())
        reply = read_response(sock)
    assert reply.startswith(b"HTTP/1.1 400") and b"Invalid request scheme: ws" in reply
    assert len(up.received) == before
