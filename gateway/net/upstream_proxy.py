"""A corporate upstream proxy (`egress.upstream_proxy`): its settings, NO_PROXY-style exceptions, and what it is told.

Pure. sandgate decides, vets and injects first; the proxy only ever hears the destination that was decided:
with `resolve = "local"` the address sandgate vetted, with `"proxy"` the name (the proxy resolves it, so the
address check cannot apply to names: an operator's trade for networks where only the proxy resolves).
"""
from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

from gateway.net.addresses import IPNetwork, parse_ip_literal
from gateway.net.hosts import normalise_host, split_hostport

RESOLVE_MODES = ("local", "proxy")


@dataclass(frozen=True)
class BypassEntry:
    """One `upstream_proxy_bypass` entry: a domain (itself and its subdomains), or a network; a port or any."""

    domain: str = ""
    network: IPNetwork | None = None
    port: int | None = None


@dataclass(frozen=True)
class UpstreamProxy:
    scheme: str                          # "http" or "https" (how sandgate talks to the proxy itself)
    address: tuple[str, int]             # as configured: dialled without the address check (operator endpoint)
    user: str = ""                       # secret sources, both or neither (checked by the config loader)
    password: str = ""
    resolve: str = "local"
    bypass: tuple[BypassEntry, ...] = ()
    bypass_all: bool = False             # "*"

    @property
    def spec(self) -> tuple[str, tuple[str, int]]:
        """mitmproxy's ServerSpec for `Server.via`."""
        return self.scheme, self.address


def parse_upstream_proxy(url: str, user: str = "", password: str = "", resolve: str = "local",
                         bypass: Iterable[str] = ()) -> UpstreamProxy | None:
    """The `egress.upstream_proxy*` keys -> UpstreamProxy (None when `url` is empty). ValueError naming the key."""
    if not isinstance(url, str):
        raise ValueError("egress.upstream_proxy must be a string")
    if not url.strip():
        if user or password:
            raise ValueError("egress.upstream_proxy_user/_password are set but egress.upstream_proxy is not")
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("egress.upstream_proxy must be http://HOST:PORT or https://HOST:PORT")
    if parts.username or parts.password:
        raise ValueError("egress.upstream_proxy: put credentials in upstream_proxy_user/_password (secret sources)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("egress.upstream_proxy must be a proxy URL without a path")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = normalise_host(parts.hostname)
    except ValueError as exc:
        raise ValueError(f"egress.upstream_proxy: {exc}") from None
    if bool(user) != bool(password):
        raise ValueError("egress.upstream_proxy_user and upstream_proxy_password go together")
    if resolve not in RESOLVE_MODES:
        raise ValueError('egress.upstream_proxy_resolve must be "local" or "proxy"')
    if isinstance(bypass, str):
        raise ValueError("egress.upstream_proxy_bypass must be a list")
    entries = [str(e).strip() for e in bypass]
    return UpstreamProxy(scheme=parts.scheme, address=(host, port), user=user, password=password, resolve=resolve,
                         bypass=tuple(parse_bypass_entry(e) for e in entries if e != "*"), bypass_all="*" in entries)


def parse_bypass_entry(text: str) -> BypassEntry:
    """NO_PROXY style: "corp.example" or ".corp.example" or "*.corp.example" (the domain and its subdomains),
    "10.0.0.0/8", "192.0.2.7", "[::1]", each with an optional ":port". ValueError otherwise."""
    entry = text.strip()
    if not entry or "://" in entry or "@" in entry:
        raise ValueError(f"egress.upstream_proxy_bypass: {text!r} is not a host, domain or network")
    if "/" in entry:
        try:
            return BypassEntry(network=ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"egress.upstream_proxy_bypass: {text!r} is not a network") from None
    try:
        host, port_text = split_hostport(entry, bare_ipv6=True)
    except ValueError as exc:
        raise ValueError(f"egress.upstream_proxy_bypass: {exc}") from None
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"egress.upstream_proxy_bypass: {text!r} has a bad port")
        port = int(port_text)
    host = host.removeprefix("*").removeprefix(".")
    literal = parse_ip_literal(host) if host else None
    if literal is not None:
        return BypassEntry(network=ipaddress.ip_network(literal), port=port)
    try:
        return BypassEntry(domain=normalise_host(host), port=port)
    except ValueError as exc:
        raise ValueError(f"egress.upstream_proxy_bypass: {exc}") from None


def bypassed(proxy: UpstreamProxy, host: str, port: int) -> bool:
    """Whether a request to the normalised `host`:`port` goes direct instead of through the proxy."""
    if proxy.bypass_all:
        return True
    literal = parse_ip_literal(host)
    for entry in proxy.bypass:
        if entry.port is not None and entry.port != port:
            continue
        if entry.network is not None:
            if literal is not None and literal.version == entry.network.version and literal in entry.network:
                return True
        elif literal is None and (host == entry.domain or host.endswith("." + entry.domain)):
            return True
    return False


def proxy_resolves(proxy: UpstreamProxy | None, host: str, port: int) -> bool:
    """Whether the proxy, not sandgate, resolves this name (so sandgate's address check cannot apply to it)."""
    return (proxy is not None and proxy.resolve == "proxy" and parse_ip_literal(host) is None
            and not bypassed(proxy, host, port))


def proxy_target(proxy: UpstreamProxy, host: str, port: int, vetted: tuple[str, ...]) -> str:
    """The authority the proxy is handed (CONNECT target, or the absolute-form URL's): the first vetted address in
    "local" mode (ValueError when there is none: never fall back to the name), the name in "proxy" mode."""
    if proxy.resolve == "proxy" or parse_ip_literal(host) is not None:
        chosen = host
    elif vetted:
        chosen = vetted[0]
    else:
        raise ValueError(f"no vetted address for {host}")
    return f"[{chosen}]:{port}" if ":" in chosen else f"{chosen}:{port}"


def basic_credentials(user: str, password: str) -> str:
    """The Proxy-Authorization value for Basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
