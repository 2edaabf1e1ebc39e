"""The resolver guard on a real event loop: only vetted addresses are ever dialled (DNS rebinding).

Every test runs on both loops `serve` may use: asyncio's own and gateway/runtime/eventloop.ServeLoop (uvloop, which
resolves inside libuv unless ServeLoop routes names through the guarded `getaddrinfo`)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.net.addresses import parse_networks, vet_addresses
from gateway.egress.resolver import UPSTREAM_DIAL, AddressRefused, DialGuard, install_guard
from gateway.runtime.eventloop import ReusePortLoop, ServeLoop


class _Policy(asyncio.DefaultEventLoopPolicy):
    def __init__(self, loop_class):
        super().__init__()
        self.loop_class = loop_class

    def new_event_loop(self):
        return self.loop_class()


@pytest.fixture(params=[asyncio.SelectorEventLoop, ServeLoop, ReusePortLoop],
                ids=["asyncio", "serve", "serve-reuseport"])
def event_loop_policy(request):
    """Every test of this module on each loop (pytest-asyncio's loop policy fixture)."""
    return _Policy(request.param)


class FlippingResolver:
    """Answers a public-looking address first, then loopback: a rebinding DNS server."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    async def resolve(self, host, port):
        self.calls += 1
        return [self.answers[min(self.calls - 1, len(self.answers) - 1)]]


async def _listener():
    accepted = []

    async def on_conn(reader, writer):
        accepted.append(1)
        writer.close()
    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


def _guard(resolver, private_allow=()):
    def vet(addresses, port):
        return vet_addresses(addresses, port, private_allow=parse_networks(private_allow))
    return DialGuard(vet=vet, resolver=resolver)


async def test_rebinding_to_loopback_is_refused_and_never_dialled():
    loop = asyncio.get_running_loop()
    original = install_guard(loop)
    try:
        server, port, accepted = await _listener()
        resolver = FlippingResolver(["93.184.216.34", "127.0.0.1"])
        await resolver.resolve("rebind.test", port)      # the check-time answer: public
        UPSTREAM_DIAL.set(_guard(resolver))
        with pytest.raises(AddressRefused):
            await asyncio.open_connection("rebind.test", port)   # the dial-time answer: loopback
        await asyncio.sleep(0.05)
        assert accepted == []
        server.close()
    finally:
        loop.getaddrinfo = original


async def test_vetted_address_is_dialled():
    loop = asyncio.get_running_loop()
    original = install_guard(loop)
    try:
        server, port, accepted = await _listener()
        UPSTREAM_DIAL.set(_guard(FlippingResolver(["127.0.0.1"]), private_allow=["127.0.0.0/8"]))
        reader, writer = await asyncio.open_connection("internal.test", port)
        writer.close()
        await asyncio.sleep(0.05)
        assert accepted == [1]
        server.close()
    finally:
        loop.getaddrinfo = original


async def test_guard_only_applies_to_marked_dials():
    loop = asyncio.get_running_loop()
    original = install_guard(loop)
    try:
        infos = await loop.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
        assert infos, "sandgate's own clients resolve normally"
    finally:
        loop.getaddrinfo = original


async def test_mixed_answers_are_refused():
    loop = asyncio.get_running_loop()
    original = install_guard(loop)
    try:
        class Mixed:
            async def resolve(self, host, port):
                return ["93.184.216.34", "10.0.0.1"]
        UPSTREAM_DIAL.set(_guard(Mixed()))
        with pytest.raises(AddressRefused):
            await loop.getaddrinfo("mixed.test", 80)
    finally:
        loop.getaddrinfo = original
