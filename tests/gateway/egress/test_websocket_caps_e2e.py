"""What a WebSocket can make the proxy keep is bounded, through a real sandgate, a real aiohttp server and client.

mitmproxy keeps every message of a WebSocket in the flow for the connection's life, and assembles each message
whole in memory before it is screened: a long-lived socket, or one endless message, would grow the gateway
without end. sandgate keeps only the newest message, and closes a connection whose message passes 16 MiB (1009).
"""
from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate

KB = 1024
MB = 1024 * KB


class EchoServer:
    """A WebSocket echo server on loopback with no message size limit of its own."""

    def __init__(self):
        self.received: list[int] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def handler(self, request):
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        async for msg in ws:
            self.received.append(len(msg.data))
            await ws.send_bytes(b"ok")
        return ws

    def _run(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/ws", self.handler)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
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
def env(tmp_path_factory):
    with EchoServer() as up, Sandgate(tmp_path_factory.mktemp("wscaps"), LOOPBACK_CONFIG) as sg:
        yield sg, up


async def connect(client: aiohttp.ClientSession, sg: Sandgate, sess: dict, port: int):
    return await client.ws_connect(f"http://allowed.test:{port}/ws", proxy=f"http://127.0.0.1:{sg.proxy_port}",
                                   proxy_auth=aiohttp.BasicAuth("sandgate", sess["token"]), timeout=30,
                                   max_msg_size=0)


def test_many_messages_do_not_pile_up(env):
    sg, up = env
    sess = sg.session(allow=["allowed.test"])
    n, size = 2000, 32 * KB

    async def run() -> int:
        async with aiohttp.ClientSession() as client:
            ws = await connect(client, sg, sess, up.port)
            await ws.send_bytes(b"w" * size)
            assert (await ws.receive(timeout=30)).data == b"ok"
            before = sg.rss_kb()
            payload = b"m" * size
            for _ in range(n):
                await ws.send_bytes(payload)
                assert (await ws.receive(timeout=30)).data == b"ok"
            after = sg.rss_kb()
            await ws.close()
            return after - before

    grew_kb = asyncio.run(run())
    print(f"\n{n} messages of {size // KB} KiB ({n * size // MB} MiB) through one WebSocket: RSS +{grew_kb // 1024} MiB")
    assert len(up.received) >= n + 1
    assert grew_kb < 24 * 1024, "every message was kept"


CUT_WHILE_SENDING = -1


def test_a_message_past_the_cap_closes_the_socket(env):
    sg, up = env
    sess = sg.session(allow=["allowed.test"])
    seen = len(up.received)

    async def second_socket(client) -> int:
        # A new socket of the same session still works.
        ws2 = await connect(client, sg, sess, up.port)
        await ws2.send_bytes(b"small")
        reply = await ws2.receive(timeout=30)
        await ws2.close()
        return len(reply.data)

    async def run() -> tuple[int | None, int | None]:
        async with aiohttp.ClientSession() as client:
            ws = await connect(client, sg, sess, up.port)
            try:
                await ws.send_bytes(b"x" * (20 * MB))
            except ConnectionError:
                # sandgate closed the socket (1009) while the client was still writing the message: the client's
                # write then fails before it reads the close frame. The socket was closed by the cap either way.
                return CUT_WHILE_SENDING, await second_socket(client)
            msg = await ws.receive(timeout=60)
            code = ws.close_code
            return (code if code is not None else getattr(msg, "data", None)), await second_socket(client)

    code, reply = asyncio.run(run())
    assert code in (1009, CUT_WHILE_SENDING), code
    assert reply == 2
    assert all(n < 16 * MB for n in up.received[seen:]), "the oversized message was forwarded"
