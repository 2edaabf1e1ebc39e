"""The API listener behind a TLS-terminating proxy (an ingress): `X-Forwarded-Proto: https` from a trusted
proxy makes the request count as HTTPS (the page then sets its `Secure`, `__Host-` cookie); from anyone else the
header is ignored, so a client talking to sandgate directly cannot claim TLS it does not have."""
from __future__ import annotations

import ipaddress
from typing import Awaitable, Callable

from aiohttp import web

from gateway.net.addresses import IPNetwork

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def forwarded_scheme(peer: str | None, header: str | None, trusted: tuple[IPNetwork, ...]) -> str | None:
    """The scheme a trusted proxy says the client used ("https" or "http"), or None (not trusted, no header)."""
    if not trusted or not peer or not header:
        return None
    try:
        addr = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if not any(addr in net for net in trusted):
        return None
    last = header.split(",")[-1].strip().lower()        # the value the nearest proxy (the trusted one) added
    return last if last in ("https", "http") else None


def forwarded_proto_middleware(trusted: tuple[IPNetwork, ...]):
    @web.middleware
    async def forwarded_proto(request: web.Request, handler: Handler) -> web.StreamResponse:
        scheme = forwarded_scheme(request.remote, request.headers.get("X-Forwarded-Proto"), trusted)
        if scheme is not None and scheme != request.scheme:
            request = request.clone(scheme=scheme)
        return await handler(request)
    return forwarded_proto
