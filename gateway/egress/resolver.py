"""The resolver every upstream dial goes through, and the guard around it.

mitmproxy opens upstream connections with `asyncio.open_connection(host, port)`, which resolves through
the running loop's `getaddrinfo`. `install_guard` wraps that method: while a context variable marks the
current task as an upstream dial (set in the addon's `server_connect` hook), names are resolved through the
injectable `Resolver`, every address is vetted, and only vetted addresses are returned — so a second
resolution (DNS rebinding) can never reach a private address. Other callers on the loop (OPA, PostgreSQL,
Vault clients) are not affected.
"""
from __future__ import annotations

import asyncio
import contextvars
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from gateway.net.addresses import AddressVerdict
from gateway.net.hosts import normalise_host

UPSTREAM_DIAL: contextvars.ContextVar["DialGuard | None"] = contextvars.ContextVar("sandgate_upstream_dial",
                                                                                    default=None)


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    """Resolves with the loop's original getaddrinfo (the system resolver, /etc/hosts included)."""

    def __init__(self, getaddrinfo: Callable[..., Any]):
        self._getaddrinfo = getaddrinfo

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await self._getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(info[4][0] for info in infos))


class StaticResolver:
    """Names mapped to fixed addresses (`egress.resolve`, like curl's --resolve); others fall through. Names
    compare in their normal form (the one normalise_host)."""

    def __init__(self, mapping: Mapping[str, Sequence[str]], fallback: Resolver):
        self._map = {normalise_host(k): list(v) for k, v in mapping.items()}
        self._fallback = fallback

    async def resolve(self, host: str, port: int) -> list[str]:
        try:
            hit = self._map.get(normalise_host(host))
        except ValueError:
            hit = None
        if hit is not None:
            return list(hit)
        return await self._fallback.resolve(host, port)


class VettedResolver:
    """A connection's dial resolves to the addresses its request was vetted with (flows.ConnState.vetted),
    while that verdict is fresh: one resolution per connection and host within the TTL, and the address
    dialled is the address classified. Anything else falls through to `fallback` (and is vetted at the dial)."""

    def __init__(self, vetted: Mapping[tuple[str, int], tuple[AddressVerdict, float]], fallback: Resolver,
                 clock: Callable[[], float] = time.monotonic):
        self._vetted, self._fallback, self._clock = vetted, fallback, clock

    async def resolve(self, host: str, port: int) -> list[str]:
        hit = self._vetted.get((host, port))
        if hit is not None and hit[1] > self._clock() and hit[0].allowed and hit[0].addresses:
            return list(hit[0].addresses)
        return await self._fallback.resolve(host, port)


@dataclass
class DialGuard:
    vet: Callable[[list[str], int], AddressVerdict]
    resolver: Resolver


class AddressRefused(socket.gaierror):
    pass


def install_guard(loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    """Wrap loop.getaddrinfo; returns the original (for the system resolver)."""
    original = loop.getaddrinfo

    async def guarded_getaddrinfo(host, port, *, family=0, type=0, proto=0, flags=0):  # noqa: A002
        guard = UPSTREAM_DIAL.get()
        if guard is None:
            return await original(host, port, family=family, type=type, proto=proto, flags=flags)
        name = host.decode() if isinstance(host, bytes) else str(host)
        port_i = int(port or 0)
        addresses = await guard.resolver.resolve(name, port_i)
        verdict = guard.vet(addresses, port_i)
        if not verdict.allowed:
            raise AddressRefused(socket.EAI_FAIL, f"sandgate refused {name}: {verdict.code}")
        infos = []
        for addr in verdict.addresses:
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            if family not in (0, socket.AF_UNSPEC, fam):
                continue
            sockaddr = (addr, port_i, 0, 0) if fam == socket.AF_INET6 else (addr, port_i)
            infos.append((fam, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        if not infos:
            raise AddressRefused(socket.EAI_FAIL, f"sandgate refused {name}: no usable address")
        return infos

    loop.getaddrinfo = guarded_getaddrinfo  # type: ignore[method-assign]
    return original
