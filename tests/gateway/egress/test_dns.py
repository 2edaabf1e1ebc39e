"""The filtering resolver as a real UDP server on loopback, on real services (SQLite store, session registry):
the source address names the session; allowed names get that session's synthetic address, others NXDOMAIN
(recorded once per name), unbound sources REFUSED, garbage no answer."""
from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

import dns.asyncquery
import dns.message
import dns.rcode
import pytest

from gateway.egress.dns import AUDITED_NAMES_PER_SESSION, DnsServer, open_resolver
from gateway.net.synthetic import SyntheticNames
from tests.support.services import open_services


@pytest.fixture
async def resolver(tmp_path):
    async with AsyncExitStack() as stack:
        services = await open_services(stack, tmp_path)
        names = SyntheticNames()
        server = DnsServer(services.sessions, names, services.audit, services.metrics)
        transport, sockname = await open_resolver(server, ("127.0.0.1", 0))
        stack.callback(transport.close)
        yield services, server, names, sockname[1]


async def ask(port: int, name: str, qtype: str = "A", source: str | None = None) -> dns.message.Message:
    return await dns.asyncquery.udp(dns.message.make_query(name, qtype), "127.0.0.1", port=port, timeout=5,
                                    source=source)


async def test_answers_by_the_session_of_the_source_address(resolver):
    services, server, names, port = resolver
    unbound = await ask(port, "pypi.org")
    assert unbound.rcode() == dns.rcode.REFUSED and not unbound.answer
    row, token = await services.session(allow=["pypi.org", "*.github.com"])
    services.sessions.bind_source(row["id"], "127.0.0.1", services.tokens.verify(token))
    ok = await ask(port, "PyPI.org.")
    addr = [rd.address for rrset in ok.answer for rd in rrset]
    assert ok.rcode() == dns.rcode.NOERROR and addr == [names.address_for(row["id"], "pypi.org")]
    assert names.name_for(row["id"], addr[0]) == "pypi.org"
    api = await ask(port, "api.github.com")
    assert [rd.address for rrset in api.answer for rd in rrset] != addr
    for name in ("github.com", "evil.test", "pypi.org.evil.test"):
        denied = await ask(port, name)
        assert denied.rcode() == dns.rcode.NXDOMAIN and not denied.answer, name
    await ask(port, "evil.test", "AAAA")                                  # the same name again: recorded once
    await services.audit.flush()
    rows = [e for e in await services.events(row["id"]) if e["kind"] == "egress"]
    assert [(e["host"], e["method"], e["codes"]) for e in rows] == [
        ("github.com", "DNS", ["dns.denied"]), ("evil.test", "DNS", ["dns.denied"]),
        ("pypi.org.evil.test", "DNS", ["dns.denied"])]
    await services.sessions.delete(row, "harness:test")
    assert (await ask(port, "pypi.org")).rcode() == dns.rcode.REFUSED    # the binding ended with the session
    server.retain(services.sessions.live_ids())
    assert names.sessions() == 0


async def test_sandgate_internal_resolves_for_every_bound_session(resolver):
    # the name sandgate answers itself (access requests from an isolated sandbox): on no allow list, still
    # answered for a bound source; never for an unbound one; its synthetic address reads back as the name
    services, _server, names, port = resolver
    assert (await ask(port, "sandgate.internal")).rcode() == dns.rcode.REFUSED
    row, token = await services.session(allow=[])
    services.sessions.bind_source(row["id"], "127.0.0.1", services.tokens.verify(token))
    ok = await ask(port, "Sandgate.Internal.")
    addr = [rd.address for rrset in ok.answer for rd in rrset]
    assert ok.rcode() == dns.rcode.NOERROR and len(addr) == 1
    assert names.name_for(row["id"], addr[0]) == "sandgate.internal"
    for name in ("x.sandgate.internal", "sandgate.internal.evil.test", "internal"):
        assert (await ask(port, name)).rcode() == dns.rcode.NXDOMAIN, name

async def test_a_granted_host_resolves_while_its_grant_lives(tmp_path):
    # an approved access request of an isolated session: its host resolves (the policy then decides each
    # request); before the decision, after a withdrawal, and for another session, it does not
    async with AsyncExitStack() as stack:
        services = await open_services(stack, tmp_path)
        queue = services.approvals
        server = DnsServer(services.sessions, SyntheticNames(), services.audit, services.metrics,
                           granted=lambda sid: queue.granted_hosts(sid, time.time()))
        transport, sockname = await open_resolver(server, ("127.0.0.1", 0))
        stack.callback(transport.close)
        port = sockname[1]
        row, token = await services.session(allow=[])
        other, other_token = await services.session(allow=[])
        services.sessions.bind_source(row["id"], "127.0.0.1", services.tokens.verify(token))
        filed, _ = await queue.file_access(row["id"], queue.access.parse(
            {"host": "api.partner.test", "reason": "needed"}), f"session:{row['id']}")
        assert (await ask(port, "api.partner.test")).rcode() == dns.rcode.NXDOMAIN
        await queue.decide(filed["id"], "approver:alice", "approve", "ok")
        ok = await ask(port, "api.partner.test")
        assert ok.rcode() == dns.rcode.NOERROR and ok.answer
        assert (await ask(port, "other.partner.test")).rcode() == dns.rcode.NXDOMAIN
        services.sessions.bind_source(other["id"], "127.0.0.2", services.tokens.verify(other_token))
        not_its = await ask(port, "api.partner.test", source="127.0.0.2")
        assert not_its.rcode() == dns.rcode.NXDOMAIN                                      # not its grant
        assert await queue.withdraw(filed["id"], "approver:alice")
        assert (await ask(port, "api.partner.test")).rcode() == dns.rcode.NXDOMAIN

async def test_garbage_gets_no_answer_and_the_server_lives_on(resolver):
    _, _, _, port = resolver
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("127.0.0.1", port))
    for junk in (b"", b"\x00", b"\xff" * 40, b"x" * 5000):
        transport.sendto(junk)
    transport.close()
    assert (await ask(port, "pypi.org")).rcode() == dns.rcode.REFUSED


async def test_a_query_flood_is_not_an_audit_flood(resolver):
    services, server, _, port = resolver
    row, token = await services.session(allow=["pypi.org"])
    services.sessions.bind_source(row["id"], "127.0.0.1", services.tokens.verify(token))
    for i in range(AUDITED_NAMES_PER_SESSION + 20):
        assert server.answer(dns.message.make_query(f"n{i}.evil.test", "A").to_wire(), "127.0.0.1") is not None
    await services.audit.flush()
    rows = [e for e in await services.events(row["id"]) if e["kind"] == "egress"]
    assert len(rows) == AUDITED_NAMES_PER_SESSION
