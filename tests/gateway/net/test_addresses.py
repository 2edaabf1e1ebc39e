import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.net.addresses import (
    IP_CLASSES,
    AddressVerdict,
    classify_ip,
    parse_ip_literal,
    parse_networks,
    vet_addresses,
)

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1", V4("127.0.0.1")),
    ("2130706433", V4("127.0.0.1")),
    ("0x7f000001", V4("127.0.0.1")),
    ("0X7F000001", V4("127.0.0.1")),
    ("0177.0.0.1", V4("127.0.0.1")),
    ("0177.0000.0.01", V4("127.0.0.1")),
    ("127.1", V4("127.0.0.1")),
    ("10.1.1", V4("10.1.0.1")),
    ("0x7f.1", V4("127.0.0.1")),
    ("0xa9.0xfe.0xa9.0xfe", V4("169.254.169.254")),
    ("0", V4("0.0.0.0")),
    ("0x", V4("0.0.0.0")),
    ("127.0.0.1.", V4("127.0.0.1")),
    ("4294967295", V4("255.255.255.255")),
    ("[::1]", V6("::1")),
    ("::1", V6("::1")),
    ("fe80::1%eth0", V6("fe80::1")),
    ("[fe80::1%25eth0]", V6("fe80::1")),
    ("::FFFF:127.0.0.1", V6("::ffff:7f00:1")),
    ("2001:DB8::1", V6("2001:db8::1")),
    ("example.com", None),
    ("1.2.3.4.nip.io", None),
    ("0x.com", None),
    ("localhost", None),
    ("127.0.0.1.example", None),
])
def test_parse_ip_literal(text, expected):
    assert parse_ip_literal(text) == expected


@pytest.mark.parametrize("text", [
    "4294967296", "256.1.1.1", "1.256.1.1", "127.16777216", "1.2.65536", "1.2.3.256",
    "1.2.3.4.5", "08.0.0.1", "0x7g.1", "example.123", "1..1", "[example.com]", "[::1",
    "::1]", ":::1", "[1.2.3.4]", "fe80::zz", "+1.2.3.4",
])
def test_parse_ip_literal_rejects_bad_numbers(text):
    with pytest.raises(ValueError):
        parse_ip_literal(text)


@pytest.mark.parametrize("address, kind", [
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"),
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"), ("::1", "loopback"),
    ("10.0.0.1", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"),
    ("192.168.1.1", "private"), ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("fec0::1", "private"),
    ("169.254.169.254", "link_local"), ("fe80::1", "link_local"), ("fe80::1%eth0", "link_local"),
    ("100.64.0.1", "cgnat"), ("100.127.255.255", "cgnat"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("192.0.2.1", "documentation"), ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"), ("198.18.0.1", "documentation"),
    ("198.19.255.255", "documentation"), ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"), ("2001:2::1", "documentation"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"), ("192.0.0.9", "reserved"),
    ("192.88.99.1", "reserved"), ("100::1", "reserved"), ("2001:10::1", "reserved"),
    ("4000::1", "reserved"), ("5f00::1", "reserved"),
    ("64:ff9b::7f00:1", "embedded_v4"), ("64:ff9b::808:808", "embedded_v4"),
    ("64:ff9b:1::1", "embedded_v4"), ("2002:7f00:1::", "embedded_v4"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "embedded_v4"), ("::ffff:0:7f00:1", "embedded_v4"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link_local"),
    ("::ffff:10.0.0.1", "private"), ("::ffff:8.8.8.8", "public"), ("::127.0.0.1", "loopback"),
    ("8.8.8.8", "public"), ("1.1.1.1", "public"), ("172.32.0.1", "public"),
    ("100.128.0.1", "public"), ("2606:4700::1", "public"), ("2a00:1450::1", "public"),
    ("2130706433", "loopback"), ("0x7f.1", "loopback"),
])
def test_classify_ip(address, kind):
    assert classify_ip(address) == kind
    assert kind in IP_CLASSES


def test_classify_ip_accepts_address_objects():
    assert classify_ip(V4("127.0.0.1")) == "loopback"
    assert classify_ip(V6("fe80::1%eth0")) == "link_local"


LOOPBACK_NETS = parse_networks(["127.0.0.0/8"])


@pytest.mark.parametrize("addresses, port, kwargs, allowed, kind, code", [
    (["8.8.8.8"], 443, {}, True, "public", "address.ok"),
    (["2606:4700::1"], 443, {}, True, "public", "address.ok"),
    (["8.8.8.8", "2606:4700::1"], 443, {}, True, "public", "address.ok"),
    (["127.0.0.1"], 443, {}, False, "loopback", "address.loopback"),
    (["2130706433"], 443, {}, False, "loopback", "address.loopback"),
    (["0x7f000001"], 443, {}, False, "loopback", "address.loopback"),
    (["0177.0.0.1"], 443, {}, False, "loopback", "address.loopback"),
    (["127.1"], 443, {}, False, "loopback", "address.loopback"),
    (["::ffff:127.0.0.1"], 443, {}, False, "loopback", "address.loopback"),
    (["::ffff:169.254.169.254"], 80, {}, False, "link_local", "address.link_local"),
    (["169.254.169.254"], 80, {}, False, "link_local", "address.link_local"),
    (["fe80::1%eth0"], 80, {}, False, "link_local", "address.link_local"),
    (["64:ff9b::7f00:1"], 443, {}, False, "embedded_v4", "address.embedded_v4"),
    (["2002:7f00:1::"], 443, {}, False, "embedded_v4", "address.embedded_v4"),
    (["2001:0:4136:e378:8000:63bf:3fff:fdd2"], 443, {}, False, "embedded_v4", "address.embedded_v4"),
    (["100.64.0.1"], 443, {}, False, "cgnat", "address.cgnat"),
    (["0.0.0.0"], 443, {}, False, "unspecified", "address.unspecified"),
    (["::"], 443, {}, False, "unspecified", "address.unspecified"),
    (["224.0.0.1"], 443, {}, False, "multicast", "address.multicast"),
    (["ff02::1"], 443, {}, False, "multicast", "address.multicast"),
    (["192.0.2.1"], 443, {}, False, "documentation", "address.documentation"),
    (["198.18.0.1"], 443, {}, False, "documentation", "address.documentation"),
    (["2001:db8::1"], 443, {}, False, "documentation", "address.documentation"),
    (["240.0.0.1"], 443, {}, False, "reserved", "address.reserved"),
    (["fc00::1"], 443, {}, False, "private", "address.private"),
    (["10.0.0.1"], 443, {}, False, "private", "address.private"),
    (["8.8.8.8", "10.0.0.1"], 443, {}, False, "private", "address.private"),
    (["2606:4700::1", "::1"], 443, {}, False, "loopback", "address.loopback"),
    (["10.0.0.1", "127.0.0.1"], 443, {}, False, "private", "address.private"),
    ([], 443, {}, False, "unspecified", "address.none"),
    (["127.0.0.1"], 443, {"private_allow": LOOPBACK_NETS}, True, "allowed_private", "address.ok"),
    (["::ffff:127.0.0.1"], 443, {"private_allow": LOOPBACK_NETS}, True, "allowed_private", "address.ok"),
    (["8.8.8.8", "127.0.0.2"], 443, {"private_allow": LOOPBACK_NETS}, True, "allowed_private", "address.ok"),
    (["::1"], 443, {"private_allow": LOOPBACK_NETS}, False, "loopback", "address.loopback"),
    (["10.1.2.3"], 5432, {"private_allow": parse_networks(["10.1.0.0/16"])}, True, "allowed_private", "address.ok"),
    (["10.2.0.1"], 5432, {"private_allow": parse_networks(["10.1.0.0/16"])}, False, "private", "address.private"),
    (["127.0.0.1"], 8080, {"private_allow": LOOPBACK_NETS, "own_listeners": [("127.0.0.1", 8080)]},
     False, "allowed_private", "address.own_listener"),
    (["127.0.0.1"], 8081, {"private_allow": LOOPBACK_NETS, "own_listeners": [("127.0.0.1", 8080)]},
     True, "allowed_private", "address.ok"),
    (["::ffff:127.0.0.1"], 8080, {"private_allow": LOOPBACK_NETS, "own_listeners": [("127.0.0.1", 8080)]},
     False, "allowed_private", "address.own_listener"),
    (["127.0.0.5"], 8080, {"private_allow": LOOPBACK_NETS, "own_listeners": [("127.0.0.1", 8080)]},
     False, "allowed_private", "address.own_listener"),
    (["0.0.0.0"], 8080, {"private_allow": parse_networks(["0.0.0.0/8"]), "own_listeners": [("10.9.9.9", 8080)]},
     False, "allowed_private", "address.own_listener"),
    (["10.0.0.7"], 9000, {"private_allow": parse_networks(["10.0.0.0/8"]), "own_listeners": [("0.0.0.0", 9000)]},
     False, "allowed_private", "address.own_listener"),
    (["8.8.8.8"], 9000, {"own_listeners": [("::", 9000)]}, False, "public", "address.own_listener"),
    (["8.8.8.8"], 9000, {"own_listeners": [("localhost", 9000)]}, False, "public", "address.own_listener"),
    (["8.8.8.8"], 443, {"own_listeners": [("0.0.0.0", 9000)]}, True, "public", "address.ok"),
])
def test_vet_addresses(addresses, port, kwargs, allowed, kind, code):
    verdict = vet_addresses(addresses, port, **kwargs)
    assert (verdict.allowed, verdict.ip_class, verdict.code) == (allowed, kind, code)
    assert verdict.reason
    if not allowed:
        assert verdict.addresses == ()


def test_vet_addresses_returns_normalised_vetted_addresses_in_order():
    verdict = vet_addresses(["2606:4700::1", "::ffff:8.8.8.8", "8.8.8.8", V4("1.1.1.1")], 443)
    assert verdict == AddressVerdict(
        True, "public", "address.ok", "destination 2606:4700::1, 8.8.8.8, 1.1.1.1 is allowed",
        ("2606:4700::1", "8.8.8.8", "1.1.1.1"),
    )


def test_vet_addresses_reason_names_the_address():
    assert vet_addresses(["127.0.0.1"], 80).reason == ("destination 127.0.0.1 is a loopback address "
                                                       "(egress.private_allow can allow its range)")
    assert vet_addresses(["10.0.0.1"], 80).reason.endswith("(egress.private_allow can allow its range)")
    assert vet_addresses(["224.0.0.1"], 80).reason == "destination 224.0.0.1 is a multicast address"


def test_vet_addresses_rejects_names():
    with pytest.raises(ValueError):
        vet_addresses(["example.com"], 443)


@pytest.mark.parametrize("cidrs, expected", [
    (["127.0.0.0/8", "fd00::/8"], (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("fd00::/8"))),
    (["10.0.0.5"], (ipaddress.ip_network("10.0.0.5/32"),)),
    (["::ffff:10.0.0.0/104"], (ipaddress.ip_network("10.0.0.0/8"),)),
])
def test_parse_networks(cidrs, expected):
    assert parse_networks(cidrs) == expected


@pytest.mark.parametrize("cidr", ["10.0.0.1/8", "10.0.0.0/33", "example.com/8", "", "0177.0.0.0/8", None])
def test_parse_networks_rejects_bad_cidrs(cidr):
    with pytest.raises(ValueError):
        parse_networks([cidr])


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_parse_ip_literal_raises_only_value_error(text):
    try:
        parse_ip_literal(text)
    except ValueError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789abcdefxX.:[]%", max_size=40))
def test_parse_ip_literal_numeric_text_raises_only_value_error(text):
    try:
        parse_ip_literal(text)
    except ValueError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(v=4))
def test_every_ipv4_spelling_parses_to_the_address(address):
    octets = address.packed
    spellings = [
        str(address), str(int(address)), hex(int(address)), hex(int(address)).upper(),
        ".".join(f"0{b:o}" for b in octets),
        ".".join(hex(b) for b in octets),
        f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}",
        f"{octets[0]}.{octets[1]}.{int.from_bytes(octets[2:], 'big')}",
        f"{address}.",
    ]
    for spelling in spellings:
        assert parse_ip_literal(spelling) == address, spelling


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(v=4))
def test_mapped_ipv4_classifies_as_ipv4(address):
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert classify_ip(mapped) == classify_ip(address)
    assert classify_ip(str(mapped)) == classify_ip(address)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.ip_addresses(), min_size=1, max_size=4), st.integers(1, 65535))
def test_vet_allows_only_all_public_sets(addresses, port):
    verdict = vet_addresses(addresses, port)
    assert verdict.allowed == all(classify_ip(a) == "public" for a in addresses)
    assert verdict.ip_class in IP_CLASSES
    assert (verdict.code == "address.ok") == verdict.allowed
