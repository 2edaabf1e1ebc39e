"""The layer decision (pure): what a connection may carry, from its first bytes and its place in the stack."""
from __future__ import annotations

import ssl

import pytest
from hypothesis import given, strategies as st

from gateway.egress.tunnels import (MAX_HEAD_BYTES, Choice, Content, LayerArgs, Level, ServerFirstArgs,
                                    classify_content, decide_layer, server_first)


def client_hello(server_name: str = "secure.test", alpn: list[str] | None = None) -> bytes:
    ctx = ssl.create_default_context()
    if alpn:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


HELLO = client_hello()


@pytest.mark.parametrize("data, expected", [
    (b"", Content.MORE),
    (b"G", Content.MORE),
    (b"GE", Content.MORE),                                   # a method split across segments waits
    (b"GET", Content.MORE),
    (b"GET ", Content.MORE),
    (b"GET /x", Content.MORE),
    (b"GET /x HTTP/1.", Content.MORE),
    (b"GET /x HTTP/1.1\r", Content.MORE),
    (b"GET /x HTTP/1.1\r\n", Content.HTTP1),
    (b"GET /x HTTP/1.1\n", Content.HTTP1),
    (b"DELETE http://a.test/x HTTP/1.0\r\nHost: a\r\n\r\n", Content.HTTP1),
    (b"M-SEARCH * HTTP/1.1\r\n", Content.HTTP1),
    (b"\r\nGET /x HTTP/1.1\r\n", Content.OTHER),             # stray CRLF before the request
    (b"\r\n", Content.OTHER),
    (b" GET /x HTTP/1.1\r\n", Content.OTHER),
    (b"GET  /x HTTP/1.1\r\n", Content.OTHER),                # two spaces: not a request line
    (b"GET /x HTTP/2.0\r\n", Content.OTHER),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Content.OTHER),    # HTTP/2 prior knowledge in cleartext
    (b"GET /x\r\n", Content.OTHER),                          # HTTP/0.9
    (b"GET /x HTTP/1.1 extra\r\n", Content.OTHER),
    (b"GET /\x00 HTTP/1.1\r\n", Content.OTHER),
    (b"G\x00", Content.OTHER),
    (b"SSH-2.0-OpenSSH_9.6\r\n", Content.OTHER),
    (b"\x00\x01\x02binary", Content.OTHER),
    (b"\xff\xfe", Content.OTHER),
    (b"\x16", Content.MORE),
    (b"\x16\x03", Content.MORE),
    (b"\x16\x03\x01", Content.MORE),
    (b"\x16\x04\x01\x00\x05", Content.OTHER),
    (b"\x16\x03\x09\x00\x05", Content.OTHER),
    (b"\x16\x01", Content.OTHER),
    # a ClientHello's random bytes differ in every process: named ids keep the test ids equal in every
    # pytest-xdist worker (which must collect the same tests)
    pytest.param(HELLO, Content.TLS, id="client_hello"),
    pytest.param(HELLO[:40], Content.MORE, id="client_hello_40_bytes"),
    pytest.param(HELLO[:5] + b"\x00" * (len(HELLO) - 5), Content.OTHER, id="tls_record_of_garbage"),
    pytest.param(b"x" * (MAX_HEAD_BYTES + 1), Content.OTHER, id="no_request_line_within_the_cap"),
])
def test_classify_content(data, expected):
    assert classify_content(data) is expected


def test_tls_record_followed_by_application_bytes_is_still_tls():
    assert classify_content(HELLO + b"\x17\x03\x03\x00\x10" + b"x" * 16) is Content.TLS


@given(st.binary(max_size=300))
def test_classify_content_never_raises(data):
    assert classify_content(data) in Content


REQUEST_LINES = [b"GET /x HTTP/1.1\r\n", b"POST http://a.test:8080/p?q=1 HTTP/1.0\r\n", b"OPTIONS * HTTP/1.1\n"]


@given(st.sampled_from(REQUEST_LINES), st.data())
def test_every_proper_prefix_of_a_request_line_waits(line, data):
    cut = data.draw(st.integers(min_value=0, max_value=len(line) - 1))
    assert classify_content(line[:cut]) is Content.MORE
    assert classify_content(line) is Content.HTTP1


@given(st.binary(min_size=1, max_size=200).filter(lambda b: b[0] not in b"\x16" and not (b[:1].isalnum()
                                                                                            or b[:1] in b"!#$%&'*+-.^_`|~")))
def test_bytes_that_cannot_start_a_request_or_hello_are_other(data):
    assert classify_content(data) is Content.OTHER


@pytest.mark.parametrize("args, choice", [
    (LayerArgs(Level.PROXY, b"GET http://a.test/ HTTP/1.1\r\n"), Choice.HTTP_PROXY),
    (LayerArgs(Level.PROXY, b"CONNECT a.test:443 HTTP/1.1\r\n"), Choice.HTTP_PROXY),
    (LayerArgs(Level.PROXY, b"CONN"), Choice.WAIT),
    (LayerArgs(Level.PROXY, HELLO), Choice.REFUSE),                     # no TLS to the proxy itself
    (LayerArgs(Level.PROXY, b"\x00junk"), Choice.REFUSE),
    (LayerArgs(Level.TUNNEL, HELLO), Choice.INTERCEPT_TLS),
    (LayerArgs(Level.TUNNEL, HELLO, passthrough=True), Choice.PASSTHROUGH),
    (LayerArgs(Level.TUNNEL, b"GET / HTTP/1.1\r\n", passthrough=True), Choice.HTTP),  # not TLS: intercepted
    (LayerArgs(Level.TUNNEL, b"\x00junk", passthrough=True), Choice.REFUSE),
    (LayerArgs(Level.TUNNEL, b"GET / HTTP/1.1\r\n"), Choice.HTTP),
    (LayerArgs(Level.TUNNEL, b"GE"), Choice.WAIT),
    (LayerArgs(Level.TUNNEL, b"\r\nGET / HTTP/1.1\r\n"), Choice.REFUSE),
    (LayerArgs(Level.TUNNEL, b"\x00\x01binary"), Choice.REFUSE),
    (LayerArgs(Level.TUNNEL, b"SSH-2.0-x\r\n"), Choice.REFUSE),
    (LayerArgs(Level.TUNNEL, b"\x00\x01binary", raw_tcp=True), Choice.RAW_TCP),
    (LayerArgs(Level.TUNNEL, HELLO, raw_tcp=True), Choice.RAW_TCP),
    (LayerArgs(Level.TUNNEL, b"", raw_tcp=True), Choice.RAW_TCP),
    (LayerArgs(Level.TLS, b"", alpn=b"h2"), Choice.HTTP),
    (LayerArgs(Level.TLS, b"", alpn=b"http/1.1"), Choice.HTTP),
    (LayerArgs(Level.TLS, b"", alpn=b"imap"), Choice.REFUSE),
    (LayerArgs(Level.TLS, b"GET / HTTP/1.1\r\n"), Choice.HTTP),
    (LayerArgs(Level.TLS, b"GE"), Choice.WAIT),
    (LayerArgs(Level.TLS, HELLO), Choice.REFUSE),                       # TLS inside TLS
    (LayerArgs(Level.TLS, b"\x00binary"), Choice.REFUSE),
    (LayerArgs(Level.TLS, b"\x00binary", raw_tcp=True), Choice.REFUSE),  # raw TCP is decided at the tunnel only
    (LayerArgs(Level.UNKNOWN, b"GET / HTTP/1.1\r\n"), Choice.REFUSE),
    (LayerArgs(Level.UNKNOWN, b"", raw_tcp=True), Choice.REFUSE),
    # a transparently captured connection is a tunnel to the destination it dialled, once that was decided
    (LayerArgs(Level.TRANSPARENT, HELLO), Choice.INTERCEPT_TLS),
    (LayerArgs(Level.TRANSPARENT, HELLO, passthrough=True), Choice.PASSTHROUGH),
    (LayerArgs(Level.TRANSPARENT, b"GET / HTTP/1.1\r\n"), Choice.HTTP),
    (LayerArgs(Level.TRANSPARENT, b"CONNECT a:1 HTTP/1.1\r\n"), Choice.HTTP),    # parsed, then decided (nested)
    (LayerArgs(Level.TRANSPARENT, b""), Choice.WAIT),
    (LayerArgs(Level.TRANSPARENT, b"SSH-2.0-x\r\n"), Choice.REFUSE),
    (LayerArgs(Level.TRANSPARENT, b"", raw_tcp=True), Choice.RAW_TCP),
    (LayerArgs(Level.TRANSPARENT, b"", raw_tcp=True, decided=False), Choice.REFUSE),
    (LayerArgs(Level.TRANSPARENT, HELLO, decided=False), Choice.REFUSE),
    (LayerArgs(Level.TRANSPARENT, b"GET / HTTP/1.1\r\n", decided=False), Choice.REFUSE),
])
def test_decide_layer(args, choice):
    decision = decide_layer(args)
    assert decision.choice is choice
    if choice is Choice.REFUSE:
        assert decision.code.startswith("egress.") and decision.reason


@given(st.sampled_from(list(Level)), st.binary(max_size=64), st.booleans(), st.booleans(),
       st.sampled_from([None, b"h2", b"http/1.1", b"x-other"]), st.booleans())
def test_raw_bytes_are_relayed_only_for_listed_tunnels(level, data, raw_tcp, passthrough, alpn, decided):
    decision = decide_layer(LayerArgs(level, data, alpn=alpn, raw_tcp=raw_tcp, passthrough=passthrough,
                                      decided=decided))
    tunnel = level is Level.TUNNEL or (level is Level.TRANSPARENT and decided)
    if decision.choice is Choice.RAW_TCP:
        assert tunnel and raw_tcp
    if decision.choice is Choice.PASSTHROUGH:
        assert tunnel and passthrough and classify_content(data) is Content.TLS
    if level is Level.TRANSPARENT and not decided:
        assert decision.choice is Choice.REFUSE


@pytest.mark.parametrize("bits", range(128))
def test_server_first_exhaustive(bits):
    """Upstream first only for a decided destination, a client offering h2, TLS to the server, not yet connected;
    through the upstream proxy exactly when it applies (a direct dial must never bypass it), and direct only to a
    destination whose addresses the decision vetted."""
    decided, vetted, offers_h2, server_tls, connected, proxied, wrapped = (bool(bits >> i & 1) for i in range(7))
    args = ServerFirstArgs(decided=decided, vetted=vetted, offers_h2=offers_h2, server_tls=server_tls,
                           connected=connected, proxied=proxied, via_wrapped=wrapped)
    expected = (decided and offers_h2 and server_tls and not connected
                and (wrapped if proxied else vetted and not wrapped))
    assert server_first(args) is expected
    if proxied != wrapped or not decided or (not proxied and not vetted):
        assert not server_first(args)
