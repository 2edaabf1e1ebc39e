"""The filtering resolver's pure core: what is a host name, which names a session may resolve, the answers."""
from __future__ import annotations

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import pytest
from hypothesis import given, strategies as st

from gateway.net.dns_answers import (NameVerdict, Outcome, decide_name, host_name, query_outcome, read_query,
                                     render_answer)
from gateway.net.hosts import parse_allow_entry

ALLOW = [parse_allow_entry(e) for e in ("pypi.org", "*.github.com", "example.com:8443")]


@pytest.mark.parametrize("name, allowed", [
    ("pypi.org", True),
    ("PyPI.ORG", True),                       # normalised before it is read back
    ("api.github.com", True),
    ("a.b.github.com", True),
    ("github.com", False),                    # a wildcard matches subdomains, not the apex
    ("example.com", True),                    # a port-bound entry allows the name (the port is decided later)
    ("pypi.org.evil.test", False),
    ("evilpypi.org", False),
    ("xgithub.com", False),
    ("", False),
])
def test_decide_name(name, allowed):
    labels = tuple(p.encode() for p in name.split(".")) + (b"",) if name else (b"",)
    assert decide_name(ALLOW, host_name(labels)).allowed is allowed


@pytest.mark.parametrize("labels, expected", [
    ((b"pypi", b"org", b""), "pypi.org"),
    ((b"PyPI", b"Org", b""), "pypi.org"),
    ((b"pypi", b"org"), "pypi.org"),
    ((b"a.b", b"example", b""), ""),          # an escaped dot inside a label
    ((b"a\x00b", b"example", b""), ""),       # a NUL
    ((b"caf\xc3\xa9", b"test", b""), ""),     # raw UTF-8 (IDN travels as xn--)
    ((b"xn--caf-dma", b"test", b""), "xn--caf-dma.test"),
    ((b"127", b"0", b"0", b"1", b""), ""),    # an address spelt as a name
    ((b"-bad", b"test", b""), ""),
    ((b"",), ""),                             # the root
])
def test_host_name(labels, expected):
    assert host_name(labels) == expected


def _query(name="pypi.org.", qtype="A", **kw):
    return dns.message.make_query(name, qtype, **kw)


def test_allowed_a_query_gets_the_address():
    q = read_query(_query().to_wire())
    assert q is not None and q.name == "pypi.org"
    wire = render_answer(q, query_outcome(q, decide_name(ALLOW, q.name)), "10.200.128.1")
    r = dns.message.from_wire(wire)
    assert r.rcode() == dns.rcode.NOERROR and r.id == q.message.id and r.flags & dns.flags.QR
    assert [rd.address for rrset in r.answer for rd in rrset] == ["10.200.128.1"]


@pytest.mark.parametrize("qtype", ["AAAA", "MX", "TXT", "HTTPS", "CNAME"])
def test_other_types_of_an_allowed_name_are_empty(qtype):
    q = read_query(_query(qtype=qtype).to_wire())
    r = dns.message.from_wire(render_answer(q, query_outcome(q, NameVerdict(True)), "10.200.128.1"))
    assert r.rcode() == dns.rcode.NOERROR and r.answer == []


@pytest.mark.parametrize("name", ["evil.test.", "github.com.", "pypi.org.evil.test."])
def test_denied_names_get_nxdomain_and_no_address(name):
    q = read_query(_query(name).to_wire())
    r = dns.message.from_wire(render_answer(q, query_outcome(q, decide_name(ALLOW, q.name)), "10.200.128.1"))
    assert r.rcode() == dns.rcode.NXDOMAIN and r.answer == []


def test_no_session_is_refused():
    q = read_query(_query().to_wire())
    assert query_outcome(q, None) is Outcome.REFUSED
    assert dns.message.from_wire(render_answer(q, Outcome.REFUSED)).rcode() == dns.rcode.REFUSED


def test_unusual_queries():
    chaos = _query("version.bind.", "TXT", rdclass="CH")
    q = read_query(chaos.to_wire())
    assert query_outcome(q, NameVerdict(True)) is Outcome.FORMERR
    notify = _query()
    notify.set_opcode(dns.opcode.NOTIFY)
    q = read_query(notify.to_wire())
    assert query_outcome(q, NameVerdict(True)) is Outcome.NOTIMP
    two = _query()
    two.question.append(_query("github.com.").question[0])
    q = read_query(two.to_wire())
    assert q.name == "" and query_outcome(q, NameVerdict(True)) is Outcome.FORMERR
    response = dns.message.make_response(_query())
    assert read_query(response.to_wire()) is None           # a response is not a query
    assert read_query(b"") is None and read_query(b"\x00" * 5) is None and read_query(b"x" * 5000) is None


@given(st.binary(max_size=600))
def test_read_query_never_raises_and_answers_render(wire):
    q = read_query(wire)
    if q is not None:
        outcome = query_outcome(q, decide_name(ALLOW, q.name))
        dns.message.from_wire(render_answer(q, outcome, "10.200.128.1"))


@given(st.lists(st.from_regex(r"[A-Za-z0-9-]{1,12}", fullmatch=True), min_size=1, max_size=5))
def test_only_names_on_the_allow_list_are_answered(parts):
    name = ".".join(parts)
    q = read_query(_query(name + ".").to_wire())
    if q is None:
        return
    verdict = decide_name(ALLOW, q.name)
    if verdict.allowed:
        assert q.name in ("pypi.org", "example.com") or q.name.endswith(".github.com")
