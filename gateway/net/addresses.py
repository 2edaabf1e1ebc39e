"""IP addresses: parse literals in any spelling, classify them, vet a resolved set.

Pure functions (no sockets, no DNS). The egress resolver calls `vet_addresses`
on every name it resolves and dials only the addresses the verdict returns, so
the address dialled is the address classified.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Endpoints the operator configures (token endpoints, databases, the upstream proxy) are dialled at whatever address
# they resolve to, private or not: `private_allow` is for what sandboxes ask for. Used as that check's private_allow.
OPERATOR_ENDPOINT_NETWORKS: tuple[IPNetwork, ...] = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))

IP_CLASSES = (
    "public", "private", "loopback", "link_local", "cgnat", "multicast", "reserved",
    "unspecified", "documentation", "embedded_v4", "allowed_private",
)

_N = ipaddress.ip_network
# First match wins; anything not listed is public (v4) or, for v6, public only
# inside 2000::/3. Broad 240/4 and 2001::/23 come after their narrower entries.
_V4_RANGES: tuple[tuple[IPNetwork, str], ...] = tuple((_N(c), k) for c, k in (
    ("0.0.0.0/8", "unspecified"), ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"), ("172.16.0.0/12", "private"), ("192.168.0.0/16", "private"),
    ("169.254.0.0/16", "link_local"), ("100.64.0.0/10", "cgnat"), ("224.0.0.0/4", "multicast"),
    ("192.0.2.0/24", "documentation"), ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"), ("198.18.0.0/15", "documentation"),
    ("192.0.0.0/24", "reserved"), ("192.88.99.0/24", "reserved"),
    ("192.31.196.0/24", "reserved"), ("192.52.193.0/24", "reserved"),
    ("192.175.48.0/24", "reserved"), ("240.0.0.0/4", "reserved"),
))
_V6_RANGES: tuple[tuple[IPNetwork, str], ...] = tuple((_N(c), k) for c, k in (
    ("::/128", "unspecified"), ("::1/128", "loopback"),
    ("64:ff9b::/96", "embedded_v4"), ("64:ff9b:1::/48", "embedded_v4"),
    ("2002::/16", "embedded_v4"), ("2001::/32", "embedded_v4"),
    ("::ffff:0:0:0/96", "embedded_v4"),  # SIIT IPv4-translated
    ("fc00::/7", "private"), ("fec0::/10", "private"),  # ULA, deprecated site-local
    ("fe80::/10", "link_local"), ("ff00::/8", "multicast"),
    ("2001:db8::/32", "documentation"), ("3fff::/20", "documentation"),
    ("2001:2::/48", "documentation"),  # benchmarking, as 198.18/15
    ("100::/64", "reserved"), ("2001::/23", "reserved"), ("5f00::/16", "reserved"),
))
_V6_GLOBAL_UNICAST = _N("2000::/3")
_V6_COMPAT = _N("::/96")
_V4_MAPPED = _N("::ffff:0:0/96")

_CODES = {k: f"address.{k}" for k in IP_CLASSES if k not in ("public", "allowed_private")}
_WHAT = {
    "private": "a private address", "loopback": "a loopback address",
    "link_local": "a link-local address", "cgnat": "a carrier-grade NAT address",
    "multicast": "a multicast address", "reserved": "a reserved address",
    "unspecified": "an unspecified address",
    "documentation": "a documentation or benchmarking address",
    "embedded_v4": "an IPv6 address embedding IPv4 (NAT64, 6to4 or Teredo)",
}
# The classes an operator commonly means to reach (a service on the host, the LAN, a VPN): their refusal names the
# setting that allows them.
_ALLOWABLE = frozenset({"private", "loopback", "link_local", "cgnat"})
_NUMERIC_LABEL = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)\Z")
_DEC = re.compile(r"(?:0|[1-9][0-9]*)\Z")
_OCT = re.compile(r"0[0-7]+\Z")
_HEX = re.compile(r"0[xX][0-9a-fA-F]*\Z")


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address `host` spells, in any spelling inet_aton or a URL parser accepts.

    None when `host` is a DNS name. ValueError when it is numeric but not a valid
    address (the WHATWG URL rule: a host whose last label is a number is an IPv4
    literal or an error, never a name).
    """
    if not isinstance(host, str):
        raise ValueError("host must be a string")
    text = host
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]") and ":" in text):
            raise ValueError(f"bad bracketed address {host!r}")
        return _parse_v6(text[1:-1])
    if ":" in text:
        return _parse_v6(text)
    if text.endswith("."):
        text = text[:-1]
    labels = text.split(".")
    if not _NUMERIC_LABEL.match(labels[-1]):
        return None
    return ipaddress.IPv4Address(_inet_aton(labels, host))


def _parse_v6(text: str) -> ipaddress.IPv6Address:
    address = text.split("%", 1)[0]  # drop the zone: fe80::1%eth0
    if not address.isascii():
        raise ValueError(f"bad IPv6 address {text!r}")
    try:
        return ipaddress.IPv6Address(address)
    except ipaddress.AddressValueError as exc:
        raise ValueError(f"bad IPv6 address {text!r}") from exc


def _inet_aton(parts: list[str], original: str) -> int:
    if len(parts) > 4:
        raise ValueError(f"{original!r} has too many numeric parts for IPv4")
    numbers = [_parse_part(part, original) for part in parts]
    for number in numbers[:-1]:
        if number > 255:
            raise ValueError(f"{original!r}: part {number} is out of range")
    last_bits = 8 * (5 - len(numbers))
    if numbers[-1] >= 1 << last_bits:
        raise ValueError(f"{original!r}: last part {numbers[-1]} is out of range")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value |= number << (24 - 8 * index)
    return value


def _parse_part(part: str, original: str) -> int:
    if _HEX.match(part):
        return int(part[2:] or "0", 16)
    if _OCT.match(part):
        return int(part, 8)
    if _DEC.match(part):
        return int(part)
    raise ValueError(f"{original!r} looks like an IPv4 address but is not one")


def to_address(value: str | IPAddress) -> IPAddress:
    """`value` as an address with the zone stripped and ::ffff:a.b.c.d unmapped."""
    if isinstance(value, ipaddress.IPv6Address):
        ip: IPAddress | None = ipaddress.IPv6Address(int(value))  # drops scope_id
    elif isinstance(value, ipaddress.IPv4Address):
        ip = value
    else:
        ip = parse_ip_literal(value)
        if ip is None:
            raise ValueError(f"{value!r} is not an IP address")
    if isinstance(ip, ipaddress.IPv6Address) and ip in _V4_MAPPED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def classify_ip(ip: str | IPAddress) -> str:
    """The class of `ip`: one of IP_CLASSES except "allowed_private"."""
    address = to_address(ip)
    if isinstance(address, ipaddress.IPv4Address):
        return _lookup(address, _V4_RANGES, "public")
    if address in _V6_COMPAT and int(address) > 1:  # deprecated ::a.b.c.d
        return classify_ip(ipaddress.IPv4Address(int(address)))
    fallback = "public" if address in _V6_GLOBAL_UNICAST else "reserved"
    return _lookup(address, _V6_RANGES, fallback)


def _lookup(address: IPAddress, ranges: tuple[tuple[IPNetwork, str], ...], fallback: str) -> str:
    for network, kind in ranges:
        if address in network:
            return kind
    return fallback


@dataclass(frozen=True)
class AddressVerdict:
    allowed: bool
    ip_class: str
    code: str
    reason: str
    addresses: tuple[str, ...]


def vet_addresses(
    addresses: Iterable[str | IPAddress],
    port: int,
    *,
    private_allow: Sequence[IPNetwork] = (),
    own_listeners: Collection[tuple[str, int]] = (),
) -> AddressVerdict:
    """Allow the set only if every address is public or covered by `private_allow`.

    Sandgate's own listeners are always denied. A listener on a wildcard address
    (0.0.0.0, ::) or on a name claims the port on every address.
    ValueError if an entry is not an IP address.
    """
    vetted: list[IPAddress] = []
    for address in (to_address(a) for a in addresses):
        if address not in vetted:
            vetted.append(address)
    if not vetted:
        return AddressVerdict(False, "unspecified", "address.none", "the name has no addresses", ())
    listeners = [(_listener_address(host), lport) for host, lport in own_listeners]
    classes = []
    for address in vetted:
        kind = classify_ip(address)
        if kind != "public" and any(address in net for net in private_allow):
            kind = "allowed_private"
        if _is_own_listener(address, port, listeners):
            where = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
            return _deny(kind, "address.own_listener", f"destination {where} is one of sandgate's own listeners")
        if kind not in ("public", "allowed_private"):
            hint = " (egress.private_allow can allow its range)" if kind in _ALLOWABLE else ""
            return _deny(kind, _CODES[kind], f"destination {address} is {_WHAT[kind]}{hint}")
        classes.append(kind)
    kind = "allowed_private" if "allowed_private" in classes else "public"
    shown = ", ".join(str(a) for a in vetted)
    return AddressVerdict(True, kind, "address.ok", f"destination {shown} is allowed", tuple(str(a) for a in vetted))


def _deny(kind: str, code: str, reason: str) -> AddressVerdict:
    return AddressVerdict(False, kind, code, reason, ())


def _listener_address(host: str) -> IPAddress | None:
    """The listener's address, or None when it listens everywhere (or is a name)."""
    try:
        address = to_address(host)
    except ValueError:
        return None
    return None if address.is_unspecified else address


def _is_own_listener(address: IPAddress, port: int, listeners: list[tuple[IPAddress | None, int]]) -> bool:
    for listener, lport in listeners:
        if lport != port:
            continue
        if listener is None or listener == address:
            return True
        # 0.0.0.0 and :: dial the local host itself; be as wary of any loopback
        # address when the listener is on loopback.
        kind = classify_ip(address)
        if kind == "unspecified" or (kind == "loopback" and listener.is_loopback):
            return True
    return False


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse `egress.private_allow`; ValueError on a bad CIDR (host bits set included)."""
    networks: list[IPNetwork] = []
    for cidr in cidrs:
        if not isinstance(cidr, str):
            raise ValueError(f"bad CIDR {cidr!r}: not a string")
        try:
            network = ipaddress.ip_network(cidr.strip(), strict=True)
        except ValueError as exc:
            raise ValueError(f"bad CIDR {cidr!r}: {exc}") from exc
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_V4_MAPPED):
            # addresses are unmapped before the check, so match the v4 form
            v4 = ipaddress.IPv4Address(int(network.network_address) & 0xFFFFFFFF)
            network = ipaddress.IPv4Network(f"{v4}/{network.prefixlen - 96}")
        networks.append(network)
    return tuple(networks)
