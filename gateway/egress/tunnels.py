"""What may flow through a connection: the layer decision, as pure functions of plain values.

mitmproxy's own layer detection guesses from the first bytes and falls back to raw TCP for anything it does
not take for HTTP (a request split across segments, stray bytes, binary data): those bytes would leave
undecided. sandgate decides instead, by these rules:

- the proxy listener speaks plain HTTP/1 (requests and CONNECT); anything else is refused;
- a connection to the transparent listener is a tunnel whose destination is the address the client dialled
  (transparent.py decides it as it would a CONNECT first): the tunnel rules below apply; one whose
  destination was not decided is refused;
- inside a CONNECT tunnel whose target is listed in `egress.raw_tcp`: raw TCP (host-level decision only);
- inside a tunnel whose target is listed in `egress.passthrough` and that starts with a TLS ClientHello:
  the TLS stream is relayed without interception (host-level decision only);
- inside any other tunnel: a TLS ClientHello is intercepted; an HTTP/1 request line is parsed as HTTP (every
  request decided); anything else is refused;
- inside intercepted TLS: HTTP (by ALPN, or an HTTP/1 request line); anything else is refused.

`classify_content` never guesses: "more" means the bytes so far are a prefix of something acceptable and
the decision waits for more; a prefix that cannot become a request line or a ClientHello is "other".
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from mitmproxy.proxy.layers.tls import HTTP_ALPNS, parse_client_hello

MAX_HEAD_BYTES = 16 * 1024          # a request line or ClientHello longer than this is refused
_TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_TARGET = rb"[\x21-\x7e]"
_REQUEST_LINE = re.compile(_TCHAR + rb"+ " + _TARGET + rb"+ HTTP/1\.[01]\r?\n")
_REQUEST_LINE_PREFIX = re.compile(
    _TCHAR + rb"*\Z|" + _TCHAR + rb"+ " + _TARGET + rb"*\Z|"
    + _TCHAR + rb"+ " + _TARGET + rb"+ (?:H(?:T(?:T(?:P(?:/(?:1(?:\.(?:[01]\r?)?)?)?)?)?)?)?)?\Z")


class Content(enum.Enum):
    MORE = "more"        # an acceptable prefix: wait for more bytes
    TLS = "tls"          # a complete, parseable TLS ClientHello
    HTTP1 = "http1"      # a complete HTTP/1.x request line
    OTHER = "other"      # anything else: never forwarded undecided


def classify_content(data: bytes) -> Content:
    """Classify the first bytes a client sent on a connection (pure; never raises)."""
    if not data:
        return Content.MORE
    if data[0] == 0x16:
        return _classify_tls(data)
    newline = data.find(b"\n")
    if newline < 0:
        if len(data) <= MAX_HEAD_BYTES and _REQUEST_LINE_PREFIX.match(data):
            return Content.MORE
        return Content.OTHER
    if newline < MAX_HEAD_BYTES and _REQUEST_LINE.match(data, 0, newline + 1):
        return Content.HTTP1
    return Content.OTHER


def _classify_tls(data: bytes) -> Content:
    if len(data) < 3:
        return Content.MORE if data[1:2] in (b"", b"\x03") else Content.OTHER
    if data[1] != 0x03 or data[2] > 0x03:
        return Content.OTHER
    try:
        hello = parse_client_hello(data)
    except Exception:  # noqa: BLE001 - a malformed hello (ValueError and friends) is simply not TLS
        return Content.OTHER
    if hello is None:
        return Content.MORE if len(data) <= 4 * MAX_HEAD_BYTES else Content.OTHER
    return Content.TLS


class Level(enum.Enum):
    PROXY = "proxy"      # the first bytes on a connection to the proxy listener
    TUNNEL = "tunnel"    # the first bytes inside a CONNECT tunnel
    TRANSPARENT = "transparent"  # the first bytes on a transparently captured connection (a tunnel too)
    TLS = "tls"          # the first bytes inside TLS that sandgate intercepted in a tunnel
    UNKNOWN = "unknown"  # any other position in the layer stack (refused)


class Choice(enum.Enum):
    WAIT = "wait"                # decide later, with more bytes
    HTTP_PROXY = "http_proxy"    # HTTP/1 proxy requests (absolute-form, CONNECT)
    INTERCEPT_TLS = "intercept"  # terminate TLS with sandgate's CA, then decide again
    HTTP = "http"                # parse as HTTP: every request is decided
    RAW_TCP = "raw_tcp"          # relay bytes (egress.raw_tcp target): host-level decision only
    PASSTHROUGH = "passthrough"  # relay TLS unintercepted (egress.passthrough target)
    REFUSE = "refuse"            # close the connection; audited


@dataclass(frozen=True)
class LayerArgs:
    level: Level
    data: bytes = b""
    alpn: bytes | None = None    # the ALPN agreed with the client (intercepted TLS)
    raw_tcp: bool = False        # the CONNECT target is listed in egress.raw_tcp
    passthrough: bool = False    # the CONNECT target is listed in egress.passthrough
    decided: bool = True         # TRANSPARENT: the destination was decided (as a CONNECT would be)


@dataclass(frozen=True)
class LayerDecision:
    choice: Choice
    code: str = ""
    reason: str = ""


WAIT = LayerDecision(Choice.WAIT)


def _refuse(code: str, reason: str) -> LayerDecision:
    return LayerDecision(Choice.REFUSE, code, reason)


def decide_layer(args: LayerArgs) -> LayerDecision:
    """The next protocol layer for a connection (pure). Default: refuse."""
    if args.level is Level.UNKNOWN:
        return _refuse("egress.layer_unknown", "sandgate cannot place this connection")
    if args.level is Level.TRANSPARENT:
        if not args.decided:
            return _refuse("egress.undecided", "the connection's destination was not decided")
        args = LayerArgs(Level.TUNNEL, args.data, args.alpn, args.raw_tcp, args.passthrough)
    if args.level is Level.TUNNEL and args.raw_tcp:
        return LayerDecision(Choice.RAW_TCP, "egress.raw_tcp", "raw TCP is allowed to this target")
    if args.level is Level.TLS and args.alpn:
        if args.alpn in HTTP_ALPNS:
            return LayerDecision(Choice.HTTP)
        return _refuse("egress.raw_refused", "the TLS stream negotiated a protocol that is not HTTP")
    content = classify_content(args.data)
    if content is Content.MORE:
        return WAIT
    if args.level is Level.PROXY:
        if content is Content.HTTP1:
            return LayerDecision(Choice.HTTP_PROXY)
        return _refuse("egress.proxy_protocol", "the proxy speaks plain HTTP/1 only")
    if args.level is Level.TUNNEL:
        if content is Content.TLS:
            return LayerDecision(Choice.PASSTHROUGH if args.passthrough else Choice.INTERCEPT_TLS)
        if content is Content.HTTP1:
            return LayerDecision(Choice.HTTP)
        return _refuse("egress.raw_refused", "the tunnel carries bytes that are not HTTP or TLS")
    if content is Content.HTTP1:            # Level.TLS: decrypted bytes must be HTTP
        return LayerDecision(Choice.HTTP)
    return _refuse("egress.raw_refused", "the TLS stream carries bytes that are not HTTP")


@dataclass(frozen=True)
class ServerFirstArgs:
    """What sandgate knows when an intercepted tunnel's ClientHello arrives (mitmproxy's `tls_clienthello`)."""

    decided: bool            # the server is the connection's decided destination (allowed CONNECT / transparent)
    vetted: bool             # sandgate vetted that destination's addresses when it decided it (a dial can follow)
    offers_h2: bool          # the client offers h2 in its ALPN
    server_tls: bool         # mitmproxy will speak TLS to that server (a ServerTLSLayer sits under the client's)
    connected: bool          # the server connection is open already
    proxied: bool            # egress.upstream_proxy applies to the destination (not bypassed)
    via_wrapped: bool        # the tunnel's layers go through the upstream proxy (layers.LayerGate wrapped them)


def server_first(args: ServerFirstArgs) -> bool:
    """Whether to open the upstream TLS connection before answering the client's ClientHello, so the client is
    offered only the ALPN the upstream chose (mitmproxy's eager strategy, per tunnel): a client offering h2 gets h2
    only from an upstream that speaks it, and plain HTTP/1.1 end to end otherwise. Only for a destination already
    decided and, for a direct dial, vetted (a destination nobody vetted, e.g. one sandgate answers itself, is never
    dialled early); through the upstream proxy only when the tunnel's layers go through it (a direct dial would
    bypass it). Otherwise the connection stays lazy (mitmproxy then offers h2 itself)."""
    if not (args.decided and args.offers_h2 and args.server_tls) or args.connected:
        return False
    if args.proxied:
        return args.via_wrapped
    return args.vetted and not args.via_wrapped
