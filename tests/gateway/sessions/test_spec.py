"""parse_source: which address a session may be bound to for transparent capture (pure)."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, strategies as st

from gateway.net.addresses import parse_networks
from gateway.sessions.spec import BadRequest, parse_source

NETS = parse_networks(["10.200.0.0/16", "fd00:5a9d::/64"])


@pytest.mark.parametrize("value, expected", [
    ("10.200.3.2", "10.200.3.2"),
    (" 10.200.3.2 ", "10.200.3.2"),
    ("::ffff:10.200.3.2", "10.200.3.2"),           # a mapped form is its IPv4 address
    ("fd00:5a9d::2", "fd00:5a9d::2"),
    ("FD00:5A9D:0:0::2", "fd00:5a9d::2"),
])
def test_accepted(value, expected):
    assert parse_source(value, NETS) == expected


@pytest.mark.parametrize("value", [
    "127.0.0.1", "10.201.0.2", "0.0.0.0", "::1", "::ffff:127.0.0.1", "fd00:5a9e::2",
    "10.200.3.2/32", "10.200.3", "012.200.3.2", "10.200.3.2%eth0", "", "  ", None, 10, ["10.200.3.2"],
])
def test_refused(value):
    with pytest.raises(BadRequest):
        parse_source(value, NETS)


@given(st.ip_addresses())
def test_only_addresses_inside_the_networks(addr):
    try:
        out = parse_source(str(addr), NETS)
    except BadRequest:
        return
    parsed = ipaddress.ip_address(out)
    assert any(n.version == parsed.version and parsed in n for n in NETS)
