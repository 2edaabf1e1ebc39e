"""The filtering resolver (UDP): answers a sandbox's DNS queries from its session's allow list.

Transparent capture sends every DNS packet a sandbox emits (to any address, port 53) here. The source address
names the session (`SessionRegistry.by_source`); an allowed name (the session's allow list or a live grant of it),
and `sandgate.internal` (which the proxy answers itself), is answered with a synthetic address (the transparent listener reads the name back from it), any other
name with NXDOMAIN. Nothing is ever forwarded to another DNS server. The decisions are the pure functions in `gateway.net.dns_answers`; this adapter only reads
datagrams, records denials and writes answers. It never blocks: everything it reads is in memory.
"""
from __future__ import annotations

import asyncio
import logging
from functools import lru_cache
from typing import Callable, Collection, Sequence

from gateway.approvals.access import INTERNAL_HOST
from gateway.audit.log import AuditLog
from gateway.runtime.metrics import Metrics
from gateway.net.addresses import parse_ip_literal
from gateway.net.dns_answers import NameVerdict, Outcome, decide_name, query_outcome, read_query, render_answer
from gateway.net.hosts import AllowEntry, parse_allow_entry
from gateway.net.synthetic import SyntheticNames
from gateway.sessions.registry import SessionRegistry
from gateway.store.records import Session

log = logging.getLogger("sandgate.dns")
AUDITED_NAMES_PER_SESSION = 256         # denied names recorded per session (a query flood is not an audit flood)
# sandgate.internal: every bound session may resolve it (a synthetic address like any allowed name); the
# transparent listener reads the name back and the proxy answers it itself (access requests), never dialling it.
INTERNAL = NameVerdict(True)
GRANTED = NameVerdict(True)             # a live grant's host resolves too (the policy then decides each request)


@lru_cache(maxsize=1024)
def allow_entries(allow: tuple[str, ...]) -> tuple[AllowEntry, ...]:
    entries = []
    for text in allow:
        try:
            entries.append(parse_allow_entry(text))
        except ValueError:
            continue                    # stored entries were validated at creation; skip rather than fail
    return tuple(entries)


class DnsServer(asyncio.DatagramProtocol):
    def __init__(self, sessions: SessionRegistry, names: SyntheticNames, audit: AuditLog, metrics: Metrics,
                 granted: Callable[[str], Collection[str]] | None = None):
        self.sessions = sessions
        self.granted = granted          # session id -> hosts of its live grants (approved access requests)
        self.names = names
        self.audit = audit
        self.metrics = metrics
        self.transport: asyncio.DatagramTransport | None = None
        self._audited: dict[str, set[str]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        try:
            answer = self.answer(data, str(addr[0]))
        except Exception:  # noqa: BLE001 - fail closed: no answer
            log.exception("internal_error in the resolver")
            return
        if answer is not None and self.transport is not None:
            self.transport.sendto(answer, addr)

    def answer(self, data: bytes, source: str) -> bytes | None:
        """The answer to one datagram from `source`, or None to drop it."""
        query = read_query(data)
        if query is None:
            return None
        literal = parse_ip_literal(source)
        bound = self.sessions.by_source(str(literal)) if literal is not None else None
        verdict = None if bound is None else self.decide(bound[0], query.name)
        outcome = query_outcome(query, verdict)
        address = ""
        if outcome is Outcome.ANSWER and bound is not None and query.qtype in (1, 255):      # A, ANY
            address = self.names.address_for(bound[0].id, query.name) or ""
            if not address:
                outcome = Outcome.REFUSED
                log.warning("session %s resolved too many names; refusing %s", bound[0].id, query.name)
        self.metrics.decision("dns", "allow" if outcome is Outcome.ANSWER else "deny")
        if outcome is Outcome.NXDOMAIN and bound is not None and verdict is not None:
            self.record_denial(bound[0].id, query.name, verdict.code, verdict.reason)
        elif outcome is Outcome.REFUSED and bound is None:
            log.info("refused a DNS query from %s: no session is bound to that address", source)
        return render_answer(query, outcome, address)

    def decide(self, session: Session, name: str) -> NameVerdict:
        """The session's allow list, a live grant of it, or sandgate.internal."""
        if name == INTERNAL_HOST:
            return INTERNAL
        verdict = decide_name(allow_entries(tuple(session.allow)), name)
        if not verdict.allowed and self.granted is not None and name and name in self.granted(session.id):
            return GRANTED
        return verdict

    def record_denial(self, sid: str, name: str, code: str, reason: str) -> None:
        seen = self._audited.setdefault(sid, set())
        if name in seen or len(seen) >= AUDITED_NAMES_PER_SESSION:
            return
        seen.add(name)
        self.audit.record("egress", session=sid, action="deny", codes=[code], reasons=[reason], method="DNS",
                          host=name or None, path="", http_status=None, detail={"dns": True})

    def retain(self, live: set[str]) -> None:
        """Forget ended sessions' names and audit memory."""
        self.names.retain(live)
        for sid in [s for s in self._audited if s not in live]:
            del self._audited[sid]


async def open_resolver(server: DnsServer, listen: tuple[str, int]) -> tuple[asyncio.DatagramTransport, Sequence]:
    """Listen on UDP `listen`; returns the transport and the bound address."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: server, local_addr=listen)
    return transport, transport.get_extra_info("sockname")
