"""Transparent capture: connections redirected to the transparent listener (`sandgate run --isolate`).

A sandbox whose TCP is redirected here (nftables DNAT in its network namespace's host side) sends no proxy
credentials and no CONNECT. This addon gives such a connection what the proxy listener's CONNECT gives a
regular one, and then every rule of the proxy applies unchanged:

- who: the session bound to the connection's source address (`SessionRegistry.by_source`), with that
  session token's principal (expiry and revocation checked on every request). Only connections that arrived
  in transparent mode are ever known this way; the proxy listener keeps requiring credentials.
- where: the original destination the sandbox dialled. A synthetic address the filtering resolver gave out
  (dns.py) stands for its name; any other address stands for itself (an IP literal, vetted like one).
- whether: decided once, before any byte is forwarded, exactly as a CONNECT to that destination is (policy,
  address check, audit row); a refusal closes the connection. Then the layer decision (layers.py, the tunnel
  rules), and every request inside is decided again with the destination as its tunnel.
"""
from __future__ import annotations

import logging
import time
import weakref

from mitmproxy import connection, http
from mitmproxy.proxy import layer
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.mode_specs import TransparentMode

from gateway.egress.addon import EgressAddon
from gateway.egress.layers import Refused
from gateway.net.addresses import parse_ip_literal
from gateway.net.synthetic import SyntheticNames
from gateway.sessions.registry import SessionRegistry

log = logging.getLogger("sandgate.egress")


def is_transparent(client: connection.Client) -> bool:
    return isinstance(client.proxy_mode, TransparentMode)


def connect_flow(client: connection.Client, host: str, port: int) -> http.HTTPFlow:
    """The CONNECT a transparent connection stands for (never sent anywhere: it is decided and audited)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    now = time.time()
    request = http.Request(host=host, port=port, method=b"CONNECT", scheme=b"", authority=authority.encode(),
                           path=b"", http_version=b"HTTP/1.1", headers=http.Headers(), content=b"", trailers=None,
                           timestamp_start=now, timestamp_end=now)
    flow = http.HTTPFlow(client, connection.Server(address=(host, port)))
    flow.request = request
    return flow


class TransparentAddon:
    """mitmproxy addon, registered before the layer gate: `client_connected` and `next_layer`."""

    def __init__(self, egress: EgressAddon, sessions: SessionRegistry, names: SyntheticNames):
        self.egress = egress
        self.sessions = sessions
        self.names = names
        self.decided: "weakref.WeakKeyDictionary[connection.Client, bool]" = weakref.WeakKeyDictionary()

    def client_connected(self, client: connection.Client) -> None:
        if not is_transparent(client):
            return
        try:
            literal = parse_ip_literal(str(client.peername[0]))
            bound = self.sessions.by_source(str(literal)) if literal is not None else None
            if bound is None:
                log.info("refused a transparent connection from %s: no session is bound to that address",
                         client.peername[0])
                client.error = "no session is bound to this source address"
                return
            self.egress.adopt(client, bound[1])
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("internal_error in client_connected")
            client.error = "sandgate internal error"

    async def next_layer(self, nextlayer: layer.NextLayer) -> None:
        context = nextlayer.context
        if nextlayer.layer is not None or len(context.layers) != 1 \
                or not isinstance(context.layers[0], modes.TransparentProxy):
            return
        client = context.client
        if client in self.decided:
            if not self.decided[client]:
                nextlayer.layer = Refused(context)
            return
        try:
            allowed = await self.decide(context.client, context.server)
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("internal_error in next_layer")
            allowed = False
        self.decided[client] = allowed
        if not allowed:
            nextlayer.layer = Refused(context)

    async def decide(self, client: connection.Client, server: connection.Server) -> bool:
        """Name the destination and decide it as a CONNECT; True when allowed (the tunnel is then open)."""
        sid = self.egress.session_of(client)
        if sid is None or server.address is None:
            return False
        dialled, port = str(server.address[0]), int(server.address[1])
        literal = parse_ip_literal(dialled)
        if literal is None:
            return False
        host = self.names.name_for(sid, str(literal)) or str(literal)
        flow = connect_flow(client, host, port)
        await self.egress.decide(flow)
        tunnel = self.egress.tunnel_of(client)
        if flow.response is not None or tunnel is None:
            return False
        server.address = tunnel          # dial the decided destination (a name is resolved by the vetted resolver)
        return True
