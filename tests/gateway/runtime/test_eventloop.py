"""gateway/runtime/eventloop.py: the loop `sandgate serve` runs on resolves every name through `getaddrinfo`.

The guard itself (only vetted addresses are dialled) is tested on this loop in
tests/gateway/egress/test_resolver_guard.py; here: literal detection, the dial order and errors, datagram
endpoints, SO_REUSEPORT, and that the test suite itself runs on this loop.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from hypothesis import given, strategies as st

from gateway.runtime.eventloop import ReusePortLoop, ServeLoop, is_literal, loop_factory
from tests.support.waiting import until


@pytest.mark.parametrize("host,literal", [
    ("127.0.0.1", True), ("::1", True), ("fe80::1%eth0", True), (b"10.0.0.1", True), ("[::1]", False),
    ("localhost", False), ("example.com", False), ("", False), ("127.1", False), ("0x7f.0.0.1", False),
    ("1.2.3.4.example", False), (b"\xff", False), (None, False), (2130706433, False),
])
def test_is_literal(host, literal):
    assert is_literal(host) is literal


@given(st.ip_addresses())
def test_every_address_is_literal(addr):
    assert is_literal(str(addr))


@given(st.text(max_size=30))
def test_is_literal_agrees_with_ipaddress(text):
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
        expected = True
    except ValueError:
        expected = False
    assert is_literal(text) is expected


def test_the_suite_runs_on_the_serve_loop():
    async def kind():
        return type(asyncio.get_running_loop())
    assert asyncio.run(kind(), loop_factory=loop_factory()) is ServeLoop
    assert loop_factory(reuse_port=True) is ReusePortLoop


async def test_async_tests_run_on_the_serve_loop():
    assert isinstance(asyncio.get_running_loop(), ServeLoop)


class Recorder:
    """A `getaddrinfo` stand-in on the loop: answers from a table, records each name asked."""

    def __init__(self, loop, table):
        self.asked: list = []
        self.table = table
        loop.getaddrinfo = self

    async def __call__(self, host, port, *, family=0, type=0, proto=0, flags=0):  # noqa: A002
        self.asked.append((host, type))
        return [(socket.AF_INET, type or socket.SOCK_STREAM, 0, "", (addr, port)) for addr in self.table[host]]


async def _listener():
    accepted = []

    async def on_conn(reader, writer):
        accepted.append(writer.get_extra_info("sockname")[0])
        writer.close()
    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


async def _dial_names():
    loop = asyncio.get_running_loop()
    server, port, accepted = await _listener()
    closed = socket.socket()
    closed.bind(("127.0.0.2", 0))           # bound, not listening: a refused address
    dead = closed.getsockname()[1]
    rec = Recorder(loop, {"one.test": ["127.0.0.1"], "two.test": ["127.0.0.2", "127.0.0.1"],
                          "none.test": [], "bad.test": ["127.0.0.2"]})
    try:
        r, w = await asyncio.open_connection("one.test", port)
        w.close()
        # the first address refuses: the next one is dialled, as asyncio does
        r, w = await asyncio.open_connection("two.test", port)
        w.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("none.test", port)
        with pytest.raises(OSError):
            await asyncio.open_connection("bad.test", dead)
        r, w = await asyncio.open_connection("127.0.0.1", port)      # a literal is not resolved
        w.close()
        await asyncio.sleep(0.05)
    finally:
        closed.close()
        server.close()
    return rec.asked, accepted


@pytest.mark.parametrize("loop_class", [asyncio.SelectorEventLoop, ServeLoop, ReusePortLoop])
def test_names_are_resolved_through_getaddrinfo(loop_class):
    asked, accepted = asyncio.run(_dial_names(), loop_factory=loop_class)
    assert [h for h, _ in asked] == ["one.test", "two.test", "none.test", "bad.test"]
    assert accepted == ["127.0.0.1"] * 3


async def _datagram():
    loop = asyncio.get_running_loop()
    got: list = []

    class Server(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            got.append(data)
    server, _ = await loop.create_datagram_endpoint(Server, local_addr=("127.0.0.1", 0))
    port = server.get_extra_info("sockname")[1]
    rec = Recorder(loop, {"dns.test": ["127.0.0.1"]})
    client, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("dns.test", port))
    client.sendto(b"ping")
    await until(lambda: got)
    client.close()
    server.close()
    return rec.asked, got


@pytest.mark.parametrize("loop_class", [asyncio.SelectorEventLoop, ServeLoop])
def test_datagram_remote_names_are_resolved_through_getaddrinfo(loop_class):
    asked, got = asyncio.run(_datagram(), loop_factory=loop_class)
    assert asked and asked[0][0] == "dns.test"
    assert got == [b"ping"]


async def _two_servers():
    async def nothing(reader, writer):
        writer.close()
    first = await asyncio.start_server(nothing, "127.0.0.1", 0)
    port = first.sockets[0].getsockname()[1]
    second = await asyncio.start_server(nothing, "127.0.0.1", port)   # the same port: SO_REUSEPORT
    opts = [s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in first.sockets + second.sockets]
    first.close()
    second.close()
    return opts


def test_reuse_port_loop_shares_ports():
    assert all(asyncio.run(_two_servers(), loop_factory=ReusePortLoop))


def test_serve_loop_does_not_share_ports():
    with pytest.raises(OSError):
        asyncio.run(_two_servers(), loop_factory=ServeLoop)
