"""The filtering resolver's decisions and answers, as pure functions of bytes and plain values.

The resolver never asks another server: it answers a name the session may reach with a synthetic address
(synthetic.py) and every other name with NXDOMAIN, so a denied name reaches no DNS server anywhere (nothing to
exfiltrate through, nothing to learn). Only A queries get an address (the sandbox has no IPv6 route); AAAA and
every other type of an allowed name get an empty answer. Whatever cannot be read is dropped or refused.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Sequence

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from gateway.net.addresses import parse_ip_literal
from gateway.net.hosts import AllowEntry, normalise_host

ANSWER_TTL_S = 60
MAX_QUERY_BYTES = 4096
_LABEL = re.compile(rb"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z")


class Outcome(enum.Enum):
    ANSWER = "answer"          # the name is allowed: a synthetic address (A) or an empty answer (other types)
    NXDOMAIN = "nxdomain"      # the name is not allowed (or not a host name)
    REFUSED = "refused"        # no session behind the source address, or the session's table is full
    FORMERR = "formerr"        # a query sandgate does not answer (not one IN question)
    NOTIMP = "notimp"          # not a standard query


@dataclass(frozen=True)
class Query:
    message: dns.message.Message
    name: str                  # normalised host name; "" when the question is not a host name
    qtype: int


@dataclass(frozen=True)
class NameVerdict:
    allowed: bool
    code: str = ""
    reason: str = ""


def read_query(wire: bytes) -> Query | None:
    """Parse one query; None for anything that is not a DNS query (dropped without an answer)."""
    if not wire or len(wire) > MAX_QUERY_BYTES:
        return None
    try:
        message = dns.message.from_wire(wire, ignore_trailing=False)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return None
    if message.flags & dns.flags.QR:
        return None                                     # a response, not a query
    if message.opcode() != dns.opcode.QUERY or len(message.question) != 1:
        return Query(message, "", 0)
    question = message.question[0]
    if question.rdclass != dns.rdataclass.IN:
        return Query(message, "", 0)
    return Query(message, host_name(question.name.labels), int(question.rdtype))


def host_name(labels: Sequence[bytes]) -> str:
    """The normalised host name of a question's labels; "" when it is not an LDH host name (escaped dots, NULs,
    other bytes, an IP address spelt as a name, the root)."""
    parts = [label for label in labels if label != b""]
    if not parts or len(parts) != len(labels) - (1 if labels and labels[-1] == b"" else 0):
        return ""
    if not all(_LABEL.match(label) for label in parts):
        return ""
    try:
        name = normalise_host(b".".join(parts).decode("ascii"))
    except (ValueError, UnicodeError):
        return ""
    return "" if parse_ip_literal(name) is not None else name


def decide_name(allow: Sequence[AllowEntry], name: str) -> NameVerdict:
    """Whether a session with this allow list may resolve `name` (any port: the connection's port is decided
    when it is made). Pure."""
    if not name:
        return NameVerdict(False, "dns.bad_name", "the query does not name a host")
    for entry in allow:
        if entry.host.startswith("*."):
            suffix = entry.host[1:]
            if name.endswith(suffix) and len(name) > len(suffix):
                return NameVerdict(True)
        elif entry.host == name:
            return NameVerdict(True)
    return NameVerdict(False, "dns.denied", f"{name} is not on this session's allow list (DNS)")


def query_outcome(query: Query, verdict: NameVerdict | None) -> Outcome:
    """What the resolver answers. `verdict` None: no live session behind the query's source address."""
    message = query.message
    if message.opcode() != dns.opcode.QUERY:
        return Outcome.NOTIMP
    if query.qtype == 0:
        return Outcome.FORMERR
    if verdict is None:
        return Outcome.REFUSED
    return Outcome.ANSWER if verdict.allowed else Outcome.NXDOMAIN


_RCODES = {Outcome.ANSWER: dns.rcode.NOERROR, Outcome.NXDOMAIN: dns.rcode.NXDOMAIN,
           Outcome.REFUSED: dns.rcode.REFUSED, Outcome.FORMERR: dns.rcode.FORMERR,
           Outcome.NOTIMP: dns.rcode.NOTIMP}


def render_answer(query: Query, outcome: Outcome, address: str = "") -> bytes:
    """The response's wire form. An A question of an allowed name gets `address` ("" answers empty)."""
    response = dns.message.make_response(query.message, recursion_available=True)
    response.set_rcode(_RCODES[outcome])
    if outcome is Outcome.ANSWER and address and query.qtype in (dns.rdatatype.A, dns.rdatatype.ANY):
        response.flags |= dns.flags.AA
        question = query.message.question[0]
        response.answer.append(dns.rrset.from_text(question.name, ANSWER_TTL_S, "IN", "A", address))
    return response.to_wire()
