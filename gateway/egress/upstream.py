"""The upstream-proxy addon: every allowed request leaves through `egress.upstream_proxy`, after sandgate's decision,
address check and injection (it is registered after the others), told only the destination that was decided.

- TLS (an intercepted tunnel, or https) goes by CONNECT: the flow's server connection gets mitmproxy's `via`, and
  `http_connect_upstream` writes the CONNECT target (the vetted address, or the name in "proxy" mode) and the
  proxy's credentials.
- Cleartext goes in absolute form: the request is sent to the proxy with the decided target as its authority.
- Raw and passthrough tunnels (layers.py) are wrapped in a CONNECT to the proxy too.
- The proxy itself is an operator endpoint: its dial skips the address check (EgressAddon.server_connect).
"""
from __future__ import annotations

import logging
import weakref
from typing import Awaitable, Callable, Protocol

from mitmproxy import connection, http

from gateway.egress.flows import flow_state
from gateway.egress.guard import fail_closed
from gateway.net.addresses import AddressVerdict
from gateway.net.upstream_proxy import UpstreamProxy, basic_credentials, bypassed, proxy_target

log = logging.getLogger("sandgate.egress")

# A CONNECT target that reaches nothing, sent only if a tunnel to the proxy were ever opened for a destination that
# was not routed here (it cannot be, but the proxy must never be handed a name to resolve by accident).
UNROUTED = "0.0.0.0:0"
MAX_TARGETS_PER_CONNECTION = 16


class SecretReader(Protocol):
    async def get(self, source: str) -> str: ...


class Denier(Protocol):
    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None: ...


class UpstreamProxyAddon:
    def __init__(self, proxy: UpstreamProxy, secrets: SecretReader,
                 check_address: Callable[[http.HTTPFlow, str, int], Awaitable[AddressVerdict]], recorder: Denier):
        self.proxy = proxy
        self.secrets = secrets
        self.check_address = check_address
        self.recorder = recorder
        # per client connection: (host, port) -> the authority the proxy is handed for it
        self.targets: "weakref.WeakKeyDictionary[connection.Client, dict[tuple[str, int], str]]" = \
            weakref.WeakKeyDictionary()

    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403) -> None:
        self.recorder.deny(flow, code, reason, status=status)

    async def authorization(self) -> str | None:
        if not self.proxy.user:
            return None
        return basic_credentials(await self.secrets.get(self.proxy.user), await self.secrets.get(self.proxy.password))

    async def target(self, flow: http.HTTPFlow, host: str, port: int) -> str | None:
        """The authority for the proxy, remembered for `http_connect_upstream`; None (and the flow denied) when
        there is no vetted address for it."""
        vetted: tuple[str, ...] = ()
        if self.proxy.resolve == "local":
            verdict = await self.check_address(flow, host, port)
            if not verdict.allowed:
                self.deny(flow, verdict.code, verdict.reason)
                return None
            vetted = verdict.addresses
        try:
            authority = proxy_target(self.proxy, host, port, vetted)
        except ValueError:
            self.deny(flow, "address.unresolvable", f"cannot resolve {host}")
            return None
        return authority

    def remember(self, flow: http.HTTPFlow, host: str, port: int, authority: str) -> None:
        """The target of a connection that goes by CONNECT (one per tunnel; a few per transparent connection)."""
        known = self.targets.setdefault(flow.client_conn, {})
        if len(known) >= MAX_TARGETS_PER_CONNECTION and (host, port) not in known:
            known.pop(next(iter(known)))
        known[(host, port)] = authority

    async def credentials_ready(self, flow: http.HTTPFlow) -> bool:
        try:
            await self.authorization()
        except Exception:  # noqa: BLE001 - the source could not be read: say so without details
            log.warning("the upstream proxy's credentials could not be read")
            self.deny(flow, "egress.upstream_proxy_unavailable", "the upstream proxy's credentials are unavailable",
                      status=502)
            return False
        return True

    # -- hooks -------------------------------------------------------------------------------------
    @fail_closed
    async def http_connect(self, flow: http.HTTPFlow) -> None:
        """An allowed tunnel: everything in it (intercepted, passthrough or raw) goes by CONNECT to the proxy."""
        if flow.response is not None or flow_state(flow) is None:
            return
        host, port = flow.request.host, flow.request.port
        if bypassed(self.proxy, host, port):
            return
        authority = await self.target(flow, host, port)
        if authority is None or not await self.credentials_ready(flow):
            return
        self.remember(flow, host, port, authority)
        flow.server_conn.via = self.proxy.spec

    @fail_closed
    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.request.stream and flow.response is None:     # mitmproxy connects right after this hook
            await self.route(flow)

    @fail_closed
    async def request(self, flow: http.HTTPFlow) -> None:
        if not flow.request.stream and flow.response is None:
            await self.route(flow)

    async def route(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or st.denied:
            return
        req = flow.request
        host, port = req.host, req.port
        if bypassed(self.proxy, host, port):
            if flow.server_conn.via is not None:
                # decided as a tunnel to a bypassed host: cannot be (the tunnel's target is the request's)
                self.deny(flow, "egress.authority_mismatch", "the request left its tunnel's destination")
            return
        authority = await self.target(flow, host, port)
        if authority is None or not await self.credentials_ready(flow):
            return
        if flow.server_conn.via is not None:
            self.remember(flow, host, port, authority)
            return                                   # inside a tunnel already going through the proxy
        if req.scheme == "https":
            self.remember(flow, host, port, authority)
            if flow.server_conn.timestamp_start is not None:
                # an open direct connection cannot be re-routed: the request gets a new one (through the proxy)
                flow.server_conn = connection.Server(address=flow.server_conn.address)
            flow.server_conn.via = self.proxy.spec
            return
        # Cleartext: absolute form to the proxy. The Host header keeps the name the sandbox asked for.
        auth = await self.authorization()
        if auth is not None:
            req.headers["Proxy-Authorization"] = auth
        if "host" not in req.headers:
            req.headers.insert(0, "Host", req.host_header or host)
        req.data.authority = authority.encode()
        req.data.host, req.data.port = self.proxy.address

    async def http_connect_upstream(self, flow: http.HTTPFlow) -> None:
        """The CONNECT sandgate sends the proxy: the decided target, and the credentials. mitmproxy sends it
        whatever happens here, so a failure sends UNROUTED rather than the name."""
        try:
            authority = self.targets.get(flow.client_conn, {}).get((flow.request.host, flow.request.port))
            if authority is None:
                log.error("a tunnel to the upstream proxy for an unrouted destination was refused")
            auth = await self.authorization() if authority is not None else None
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("internal_error in http_connect_upstream")
            authority, auth = None, None
        flow.request.authority = authority or UNROUTED
        if "host" in flow.request.headers:
            flow.request.headers.set_all("Host", [authority or UNROUTED])
        if auth is not None:
            flow.request.headers["Proxy-Authorization"] = auth
