"""The event loop `sandgate serve` runs on: uvloop (libuv) where it is installed, asyncio's own otherwise.

Proxy, API and page share this one loop, so its per-callback cost is paid by every request (README,
Performance, has the measurements).

One difference matters for security. asyncio's `create_connection` resolves a host name through
`loop.getaddrinfo`, the method the upstream-dial guard wraps (gateway/egress/resolver.install_guard: only
vetted addresses are dialled, so DNS rebinding cannot reach a private address). uvloop resolves inside libuv
and never calls that method. `GuardedResolution` puts it back: a name given to `create_connection` or to
`create_datagram_endpoint(remote_addr=...)` is resolved with `self.getaddrinfo` and the addresses it returns
are dialled in order, as asyncio does. Literal addresses and sockets pass straight through.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, Callable

try:                                    # a dependency on Linux and macOS (pyproject.toml); absent on Windows
    import uvloop
except ImportError:  # pragma: no cover - exercised only where uvloop cannot be installed
    uvloop = None


def is_literal(host: Any) -> bool:
    """True for an IP address literal (what needs no resolution), IPv6 scope ids included."""
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str):
        return False
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class GuardedResolution:
    """Mixin for a loop class that may resolve names without `self.getaddrinfo` (uvloop): names are resolved
    through `self.getaddrinfo` (and so through the upstream-dial guard when one is installed)."""

    async def create_connection(self, protocol_factory, host=None, port=None, *, ssl=None, family=0, proto=0,
                                flags=0, sock=None, local_addr=None, server_hostname=None, **kwargs):
        dial = super().create_connection  # type: ignore[misc]
        if host is None or sock is not None or is_literal(host):
            return await dial(protocol_factory, host, port, ssl=ssl, family=family, proto=proto, flags=flags,
                              sock=sock, local_addr=local_addr, server_hostname=server_hostname, **kwargs)
        infos = await self.getaddrinfo(host, port, family=family,  # type: ignore[attr-defined]
                                       type=socket.SOCK_STREAM, proto=proto, flags=flags)
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned an empty list")
        if ssl and server_hostname is None:
            server_hostname = host.decode() if isinstance(host, bytes) else host
        errors: list[OSError] = []
        for fam, _type, _proto, _canon, sockaddr in infos:
            try:
                return await dial(protocol_factory, sockaddr[0], sockaddr[1], ssl=ssl, family=fam, proto=proto,
                                  local_addr=local_addr, server_hostname=server_hostname, **kwargs)
            except OSError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")

    async def create_datagram_endpoint(self, protocol_factory, local_addr=None, remote_addr=None, *, family=0,
                                       proto=0, flags=0, **kwargs):
        endpoint = super().create_datagram_endpoint  # type: ignore[misc]
        if remote_addr is not None and not is_literal(remote_addr[0]):
            infos = await self.getaddrinfo(remote_addr[0], remote_addr[1],  # type: ignore[attr-defined]
                                           family=family, type=socket.SOCK_DGRAM, proto=proto, flags=flags)
            if not infos:
                raise OSError(f"getaddrinfo({remote_addr[0]!r}) returned an empty list")
            family = infos[0][0]
            remote_addr = infos[0][4][:2]
        return await endpoint(protocol_factory, local_addr, remote_addr, family=family, proto=proto, flags=flags,
                              **kwargs)


class ReusePort:
    """Mixin: every TCP server the loop creates sets SO_REUSEPORT (the proxy's, created inside mitmproxy, and
    the API's), so `serve --workers N` binds the same ports N times and the kernel balances connections."""

    async def create_server(self, *args, **kwargs):
        if kwargs.get("reuse_port") is None and kwargs.get("sock") is None:
            kwargs["reuse_port"] = True
        return await super().create_server(*args, **kwargs)  # type: ignore[misc]


if uvloop is not None:
    class ServeLoop(GuardedResolution, uvloop.Loop):  # type: ignore[misc, name-defined]
        """uvloop, with names resolved through `getaddrinfo` (the upstream-dial guard)."""
else:  # pragma: no cover
    class ServeLoop(GuardedResolution, asyncio.SelectorEventLoop):  # type: ignore[no-redef]
        """asyncio's loop (it already resolves through `getaddrinfo`)."""


class ReusePortLoop(ReusePort, ServeLoop):
    """The loop of one of `serve --workers N`."""


def loop_factory(reuse_port: bool = False) -> Callable[[], asyncio.AbstractEventLoop]:
    return ReusePortLoop if reuse_port else ServeLoop
