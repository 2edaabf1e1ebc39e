"""The `next_layer` addon: sandgate, not mitmproxy's heuristics, decides what a connection may carry.

It replaces mitmproxy's built-in NextLayer addon (removed from the master in proxy.py). The rules are the
pure `decide_layer` in tunnels.py; this adapter reads the layer stack, builds the chosen layer, audits
refusals, and records raw-TCP and passthrough tunnels as audit rows of kind `tcp` with the bytes each way.
"""
from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import wsproto.events
from mitmproxy import connection, tcp, tls
from wsproto.connection import ConnectionState
from mitmproxy.proxy import commands, layer, layers
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers import websocket as websocket_layers
from mitmproxy.proxy.layers.http import ErrorCode, HttpStream, HTTPMode, ResponseProtocolError
from mitmproxy.proxy.layers.http._upstream_proxy import HttpUpstreamProxy
from mitmproxy.proxy.layers.tls import HTTP2_ALPN

from gateway.net.hosts import AllowEntry, match_allowlist, normalise_host
from gateway.egress.tunnels import Choice, LayerArgs, LayerDecision, Level, ServerFirstArgs, decide_layer, \
    server_first

log = logging.getLogger("sandgate.egress")


class Recorder(Protocol):
    def record(self, kind: str, **fields: object) -> None: ...


class Refused(layer.Layer):
    """Close the client connection without forwarding a byte."""

    def _handle_event(self, event):  # type: ignore[override]
        if not getattr(self, "_closed", False):
            self._closed = True
            yield commands.CloseConnection(self.context.client)


# mitmproxy's own error pages for these quote what the upstream sent (a malformed status line, an invalid header
# name...), which may carry a real secret value in any escaping. The sandbox gets a fixed text instead; the audit row
# keeps the (scrubbed) detail. Connect failures keep their text: sandgate's own refusal or the OS error. A request
# that fails mitmproxy's validation keeps it too ("Invalid request scheme: ws"): that text quotes only the client's
# own request head, checked before any hook runs, so before any injection.
TEXT_KEPT = {ErrorCode.CONNECT_FAILED, ErrorCode.REQUEST_VALIDATION_FAILED}


class GuardedHttpLayer(layers.HttpLayer):
    """mitmproxy's HTTP layer, except that no error page it writes to the client quotes upstream-controlled text."""

    def event_to_child(self, child, event):  # type: ignore[override]
        if (isinstance(event, ResponseProtocolError) and event.code not in TEXT_KEPT
                and child is self.connections.get(self.context.client)):
            event = ResponseProtocolError(event.stream_id, f"sandgate: the upstream's answer could not be relayed "
                                          f"({event.code.name.lower()})", event.code)
        yield from super().event_to_child(child, event)


MAX_WEBSOCKET_MESSAGE_BYTES = 16 * 1024 * 1024


class CappedWebsocketLayer(websocket_layers.WebsocketLayer):
    """mitmproxy's WebSocket layer, except that a message, which it assembles from its frames in memory (so that
    it can be screened and scrubbed whole), may not grow past `max_message` bytes: the connection is closed
    with 1009 (message too big) instead. mitmproxy has no such bound: one endless message would exhaust memory."""

    max_message = MAX_WEBSOCKET_MESSAGE_BYTES

    def relay_messages(self, event):  # type: ignore[override]
        yield from super().relay_messages(event)
        if self._handle_event == self.done:
            return
        if any(sum(map(len, ws.frame_buf)) > self.max_message for ws in (self.client_ws, self.server_ws)):
            assert self.flow.websocket is not None
            self.flow.websocket.close_code = 1009
            self.flow.websocket.close_reason = "message too big"
            self.flow.websocket.timestamp_end = time.time()
            yield commands.Log(f"sandgate: a WebSocket message passed {self.max_message} bytes: connection closed",
                               logging.WARNING)
            for ws in (self.server_ws, self.client_ws):
                ws.frame_buf = [b""]
                if ws.state in {ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING}:
                    yield ws.send2(wsproto.events.CloseConnection(code=1009, reason="message too big"))
                yield commands.CloseConnection(ws.conn)
            yield websocket_layers.WebsocketEndHook(self.flow)
            self.flow.live = False
            self._handle_event = self.done


def install_websocket_cap() -> None:
    """Make mitmproxy's HTTP layer build `CappedWebsocketLayer` for every WebSocket (it looks the class up in
    its `websocket` module when a 101 arrives). Idempotent."""
    websocket_layers.WebsocketLayer = CappedWebsocketLayer


def stack_level(context: Context) -> Level:
    """Where in the layer stack a next-layer decision is asked for."""
    stack = context.layers
    if len(stack) == 1 and isinstance(stack[0], modes.HttpProxy):
        return Level.PROXY
    if len(stack) == 1 and isinstance(stack[0], modes.TransparentProxy):
        return Level.TRANSPARENT
    if (len(stack) == 3 and isinstance(stack[0], modes.TransparentProxy)
            and isinstance(stack[1], layers.ServerTLSLayer) and isinstance(stack[2], layers.ClientTLSLayer)):
        return Level.TLS
    if (len(stack) >= 3 and isinstance(stack[0], modes.HttpProxy) and isinstance(stack[1], layers.HttpLayer)
            and stack[1].mode is HTTPMode.regular and isinstance(stack[2], HttpStream)):
        if len(stack) == 3:
            return Level.TUNNEL
        rest = stack[3 + len(proxy_wrapper(stack[3:])):]
        if len(rest) == 2 and isinstance(rest[0], layers.ServerTLSLayer) and isinstance(rest[1], layers.ClientTLSLayer):
            return Level.TLS
    return Level.UNKNOWN


def proxy_wrapper(stack: Sequence[layer.Layer]) -> Sequence[layer.Layer]:
    """The upstream-proxy layers a tunnel's stack starts with (`HttpUpstreamProxy.make`: the proxy's own TLS when
    it is an https proxy, then the CONNECT to it), or nothing."""
    if stack and isinstance(stack[0], HttpUpstreamProxy):
        return stack[:1]
    if len(stack) >= 2 and isinstance(stack[0], layers.ServerTLSLayer) and isinstance(stack[1], HttpUpstreamProxy):
        return stack[:2]
    return ()


def target_of(context: Context) -> tuple[str, int] | None:
    """The CONNECT target (normalised host, port), or None."""
    address = context.server.address
    if not address:
        return None
    try:
        return normalise_host(str(address[0])), int(address[1])
    except ValueError:
        return None


@dataclass
class TcpState:
    session: str | None
    mode: str
    bytes_out: int = 0
    bytes_in: int = 0


class LayerGate:
    """mitmproxy addon: `next_layer` plus the `tcp_*` hooks of the raw tunnels it allows."""

    def __init__(self, *, raw_tcp: Sequence[AllowEntry], passthrough: Sequence[AllowEntry], audit: Recorder,
                 session_of: Callable[[connection.Client], str | None], on_refused: Callable[[str], None],
                 connection_valid: Callable[[connection.Client], bool],
                 tunnel_of: Callable[[connection.Client], tuple[str, int] | None] = lambda client: None,
                 proxied: Callable[[str, int], bool] = lambda host, port: False,
                 vetted: Callable[[connection.Client, tuple[str, int]], bool] = lambda client, target: False,
                 granted_only: Callable[[connection.Client], bool] = lambda client: False):
        self.raw_tcp = list(raw_tcp)
        self.passthrough = list(passthrough)
        self.audit = audit
        self.session_of = session_of
        self.on_refused = on_refused
        self.connection_valid = connection_valid
        self.tunnel_of = tunnel_of
        self.proxied = proxied            # egress.upstream_proxy applies to a (host, port) (not bypassed)
        self.vetted = vetted              # the connection's decision vetted the addresses of a (host, port)
        self.granted_only = granted_only  # only an access grant opened the tunnel: never raw TCP or passthrough
        self.flows: "weakref.WeakKeyDictionary[tcp.TCPFlow, TcpState]" = weakref.WeakKeyDictionary()
        self._modes: "weakref.WeakKeyDictionary[connection.Server, str]" = weakref.WeakKeyDictionary()

    def args_for(self, nextlayer: layer.NextLayer) -> LayerArgs:
        context = nextlayer.context
        level = stack_level(context)
        target = target_of(context) if level in (Level.TUNNEL, Level.TRANSPARENT) else None
        # a grant's methods and path prefix hold only for requests decided one by one: never relayed unread
        relayed = target if target is not None and not self.granted_only(context.client) else None
        return LayerArgs(
            level=level, data=nextlayer.data_client(), alpn=context.client.alpn,
            raw_tcp=bool(relayed and match_allowlist(self.raw_tcp, *relayed)),
            passthrough=bool(relayed and match_allowlist(self.passthrough, *relayed)),
            decided=level is not Level.TRANSPARENT or (target is not None
                                                         and self.tunnel_of(context.client) == target))

    def next_layer(self, nextlayer: layer.NextLayer) -> None:
        if nextlayer.layer is not None:
            return
        try:
            decision = decide_layer(self.args_for(nextlayer))
            nextlayer.layer = self.build(nextlayer.context, decision)
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("internal_error in next_layer")
            nextlayer.layer = Refused(nextlayer.context)

    def build(self, context: Context, decision: LayerDecision) -> layer.Layer | None:
        choice = decision.choice
        if choice is Choice.WAIT:
            return None
        if choice is Choice.HTTP_PROXY:
            return GuardedHttpLayer(context, HTTPMode.regular)
        if choice is Choice.HTTP:
            return GuardedHttpLayer(context, HTTPMode.transparent)
        if choice is Choice.INTERCEPT_TLS:
            if context.server.via is not None and stack_level(context) is Level.TUNNEL:
                # the tunnel goes through the upstream proxy (upstream.py set `via` at its CONNECT): a server
                # connection opened before the client's handshake (tls_clienthello) goes through it too
                stack = HttpUpstreamProxy.make(context, True)
                stack /= layers.ServerTLSLayer(context)
                stack /= layers.ClientTLSLayer(context)
                return stack[0]
            server_tls = layers.ServerTLSLayer(context)
            server_tls.child_layer = layers.ClientTLSLayer(context)
            return server_tls
        if choice in (Choice.RAW_TCP, Choice.PASSTHROUGH):
            self._modes[context.server] = choice.value
            if context.server.via is not None:
                # the tunnel goes through the upstream proxy (upstream.py set `via` at its CONNECT)
                stack = HttpUpstreamProxy.make(context, True)
                stack /= layers.TCPLayer(context)
                return stack[0]
            return layers.TCPLayer(context)
        self.refused(context, decision)
        return Refused(context)

    def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        """An intercepted tunnel's ClientHello: connect upstream first where that lets the client get only the ALPN
        the upstream speaks (tunnels.server_first). Fails closed to mitmproxy's lazy default."""
        try:
            context = data.context
            target = target_of(context)
            data.establish_server_tls_first = server_first(ServerFirstArgs(
                decided=target is not None and self.tunnel_of(context.client) == target,
                vetted=target is not None and self.vetted(context.client, target),
                offers_h2=HTTP2_ALPN in data.client_hello.alpn_protocols,
                server_tls=bool(context.server.tls) and stack_level(context) is Level.TLS,
                connected=context.server.connected,
                proxied=target is not None and self.proxied(*target),
                via_wrapped=context.server.via is not None and any(
                    isinstance(item, HttpUpstreamProxy) and item.conn is context.server for item in context.layers)))
        except Exception:  # noqa: BLE001 - lazy, as before
            log.exception("internal_error in tls_clienthello")
            data.establish_server_tls_first = False

    def refused(self, context: Context, decision: LayerDecision) -> None:
        self.on_refused(decision.code)
        session = self.session_of(context.client)
        if session is None:         # nobody authenticated (e.g. garbage sent to the listener): log only
            log.info("refused a connection from %s: %s", context.client.peername, decision.code)
            return
        target = target_of(context)
        self.audit.record("egress", session=session, action="deny", codes=[decision.code],
                          reasons=[decision.reason], method="CONNECT", host=target[0] if target else None,
                          path="", http_status=None,
                          detail={"port": target[1] if target else None, "layer": stack_level(context).value})

    # -- raw tunnels: count the bytes each way, audit once at the end -----------------------------
    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        self.flows[flow] = TcpState(self.session_of(flow.client_conn), self._modes.get(flow.server_conn, "raw_tcp"))

    def tcp_message(self, flow: tcp.TCPFlow) -> None:
        st = self.flows.get(flow)
        if st is None or not flow.messages:
            return
        if not self.connection_valid(flow.client_conn):
            # The session ended or its token was revoked: no byte passes any more (mitmproxy's TCP layer
            # cannot be killed from a hook, so every further message is emptied).
            for message in flow.messages:
                message.content = b""
            flow.messages.clear()
            return
        for message in flow.messages:
            if message.from_client:
                st.bytes_out += len(message.content)
            else:
                st.bytes_in += len(message.content)
        flow.messages.clear()           # a long-lived tunnel must not pile its bytes up in memory

    def tcp_end(self, flow: tcp.TCPFlow) -> None:
        self._finish(flow, "")

    def tcp_error(self, flow: tcp.TCPFlow) -> None:
        self._finish(flow, flow.error.msg if flow.error else "error")

    def _finish(self, flow: tcp.TCPFlow, error: str) -> None:
        st = self.flows.pop(flow, None)
        if st is None:
            return
        address = flow.server_conn.address
        host, port = (str(address[0]), int(address[1])) if address else (None, None)
        detail: dict = {"port": port, "mode": st.mode, **({"error": error[:200]} if error else {})}
        self.audit.record("tcp", session=st.session, action="allow", codes=[f"egress.{st.mode}"],
                          reasons=[], request_id=flow.id, method="CONNECT", host=host, path="",
                          bytes_in=st.bytes_in, bytes_out=st.bytes_out, detail=detail)
