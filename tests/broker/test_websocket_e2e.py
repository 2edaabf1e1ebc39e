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
def ws_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ws")
    cert = make_cert(tmp / "certs", ["bound.test", "other.test"])
    cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                      "resolve": {"bound.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}},
           "secrets": {"api": {"source": "env:SG_WS_KEY", "hosts": ["bound.test"]}}}
    with WsUpstream(cert) as up, Sandgate(tmp / "gw", cfg, env={"SG_WS_KEY": REAL}) as sg:
        yield sg, up


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
