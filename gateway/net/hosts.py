"""Host names: normalise them and match them against allowlist entries.

Pure functions. `policies/sandgate/lib/hosts.rego` implements the same matcher
over the canonical entry text (`str(AllowEntry)`); tests check the two agree.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.net.addresses import parse_ip_literal, to_address

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_UNICODE_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_PORT = re.compile(r"[0-9]{1,5}\Z")
# The proxy normalises the same few names on every request: results (never errors) are kept per exact string.
# An entry is at most a few hundred bytes (a valid name), so the cache stays under a few MB.
_CACHED = 4096


def normalise_host(host: str) -> str:
    """The canonical form of `host`: lower-case ASCII (punycode) without a trailing
    dot, or the canonical text of an IP literal (no brackets, no zone, ::ffff:
    unmapped). ValueError if `host` is not a valid host name or IP literal.
    """
    return _normalise_cached(host) if type(host) is str else _normalise(host)


@functools.lru_cache(maxsize=_CACHED)
def _normalise_cached(host: str) -> str:
    return _normalise(host)


def _normalise(host: str) -> str:
    if not isinstance(host, str) or not host:
        raise ValueError("host is empty")
    for char in host:
        if unicodedata.category(char)[0] in "CZ":
            raise ValueError(f"host {host!r} contains whitespace or a control character")
    text = host.translate(_UNICODE_DOTS)
    if not text.isascii():
        text = _idna_encode(text)  # also folds full-width digits: "１２７.0.0.1"
    literal = _ip_text(text)
    if literal is not None:
        return literal
    if text.endswith("."):
        text = text[:-1]
    text = text.lower()
    if len(text) > 253:
        raise ValueError(f"host {host!r} is longer than 253 characters")
    for label in text.split("."):
        if not _LABEL.match(label):
            raise ValueError(f"host {host!r} has an invalid label {label[:70]!r}")
    return text


def _ip_text(text: str) -> str | None:
    address = parse_ip_literal(text)
    return None if address is None else str(to_address(address))


def _idna_encode(text: str) -> str:
    try:
        return text.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise ValueError(f"host {text!r} is not a valid internationalised name") from exc


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist entry: a host (or "*.suffix") and a port (None = any)."""

    host: str
    port: int | None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def parse_allow_entry(text: str) -> AllowEntry:
    """Parse "pypi.org", "example.com:8443", "*.github.com", "[::1]:443" or "::1".

    "*.suffix" matches subdomains of suffix, not suffix itself; the suffix must
    contain a dot. ValueError for anything else (schemes, paths, bad ports).
    """
    if not isinstance(text, str):
        raise ValueError("allow entry must be a string")
    entry = text.strip()
    if not entry:
        raise ValueError("allow entry is empty")
    if "/" in entry:
        raise ValueError(f"allow entry {text!r} must be a host[:port], not a URL")
    host, port_text = _split_host_port(entry)
    port = None if port_text is None else _parse_port(port_text, text)
    if host.startswith("*."):
        suffix = normalise_host(host[2:])
        if ":" in suffix or "." not in suffix or parse_ip_literal(suffix) is not None:
            raise ValueError(f"wildcard {text!r} is too broad or not a domain")
        return AllowEntry(f"*.{suffix}", port)
    if "*" in host:
        raise ValueError(f"allow entry {text!r}: '*' is only allowed as a leading '*.' label")
    return AllowEntry(normalise_host(host), port)


def split_hostport(text: str, *, bare_ipv6: bool) -> tuple[str, str | None]:
    """The one host:port splitter: "host", "host:port", "[v6]" or "[v6]:port" -> (host, port text or None).

    Neither part is validated here. A bare IPv6 address (two or more colons, no brackets) is a host without a
    port when `bare_ipv6`, else ValueError; ValueError too for a malformed bracket.
    """
    if text.startswith("["):
        close = text.find("]")
        rest = text[close + 1:] if close > 0 else None
        if rest is None or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} has a malformed [IPv6] host")
        return text[1:close], (rest[1:] if rest else None)
    if text.count(":") >= 2:
        if bare_ipv6:
            return text, None
        raise ValueError(f"{text!r}: an IPv6 address needs brackets")
    host, sep, port = text.partition(":")
    return host, (port if sep else None)


def _split_host_port(entry: str) -> tuple[str, str | None]:
    try:
        host, port = split_hostport(entry, bare_ipv6=True)
    except ValueError:
        raise ValueError(f"allow entry {entry!r} has a malformed [IPv6] host") from None
    if entry.startswith("[") and ipaddress.ip_address(host.split("%", 1)[0]).version != 6:
        raise ValueError(f"allow entry {entry!r}: only IPv6 goes in brackets")
    return host, port


def _parse_port(text: str, entry: str) -> int:
    port = int(text) if _PORT.match(text) else 0
    if not 1 <= port <= 65535:
        raise ValueError(f"allow entry {entry!r} has a bad port {text!r}")
    return port


def host_matches(entry: AllowEntry, host: str, port: int) -> bool:
    """Whether the normalised `host` and `port` fall under `entry`."""
    if entry.port is not None and entry.port != port:
        return False
    if entry.host.startswith("*."):
        suffix = entry.host[1:]
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == entry.host


def match_allowlist(entries: Iterable[AllowEntry], host: str, port: int) -> bool:
    """Whether any entry matches; an empty allowlist matches nothing."""
    return any(host_matches(entry, host, port) for entry in entries)


def parse_authority(text: str) -> tuple[str, int | None]:
    """An HTTP authority ("host", "host:port", "[v6]:port") -> (normalised host, port or None).

    ValueError for anything else: user info, a bare IPv6 address, a bad port, an invalid host.
    """
    return _parse_authority_cached(text) if type(text) is str else _parse_authority(text)


@functools.lru_cache(maxsize=_CACHED)
def _parse_authority_cached(text: str) -> tuple[str, int | None]:
    return _parse_authority(text)


def _parse_authority(text: str) -> tuple[str, int | None]:
    if not isinstance(text, str) or not text or "@" in text or "/" in text:
        raise ValueError(f"authority {text!r} is not host[:port]")
    try:
        host, port_text = split_hostport(text, bare_ipv6=False)
    except ValueError as exc:
        raise ValueError(f"authority {exc}") from None
    if text.startswith("[") and ":" not in host:
        raise ValueError(f"authority {text!r}: only IPv6 goes in brackets")
    if not port_text:
        return normalise_host(host), None
    return normalise_host(host), _parse_port(port_text, text)
