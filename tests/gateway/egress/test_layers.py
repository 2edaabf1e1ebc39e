"""The next_layer addon in process (mitmproxy's own test helpers): stack levels, built layers, audit rows."""
from __future__ import annotations

import pytest
from mitmproxy import tcp
from mitmproxy.proxy import events, layer, layers
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers.http import HttpStream, HTTPMode
from mitmproxy.proxy.layers.http._upstream_proxy import HttpUpstreamProxy
from mitmproxy.proxy.layers.tls import parse_client_hello
from mitmproxy.test import taddons, tflow
from mitmproxy.tls import ClientHelloData

from gateway.net.hosts import parse_allow_entry
from gateway.egress.layers import LayerGate, Refused, stack_level
from gateway.egress.tunnels import Level
from tests.gateway.egress.test_tunnels import HELLO, client_hello


class Rows:
    def __init__(self):
        self.rows = []

    def record(self, kind, **fields):
        self.rows.append({"kind": kind, **fields})


def make_gate(valid=True):
    rows, refused = Rows(), []
    gate = LayerGate(raw_tcp=[parse_allow_entry("db.test:5432")], passthrough=[parse_allow_entry("pinned.test")],
                     audit=rows, session_of=lambda client: "s_1", on_refused=refused.append,
                     connection_valid=lambda client: valid)
    return gate, rows, refused


def context(level: Level, options, target=("allowed.test", 443)) -> Context:
    ctx = Context(tflow.tclient_conn(), options)
    ctx.server.address = target
    modes.HttpProxy(ctx)
    if level is Level.PROXY:
        return ctx
    layers.HttpLayer(ctx, HTTPMode.regular)
    stream_ctx = ctx.fork()
    HttpStream(stream_ctx, 1)
    if level is Level.TLS:
        layers.ServerTLSLayer(stream_ctx)
        layers.ClientTLSLayer(stream_ctx)
    return stream_ctx


def ask(gate, ctx, data: bytes) -> layer.NextLayer:
    nl = layer.NextLayer(ctx)
    nl.events = [events.Start(), events.DataReceived(ctx.client, data)] if data else [events.Start()]
    gate.next_layer(nl)
    return nl


@pytest.mark.parametrize("level", [Level.PROXY, Level.TUNNEL, Level.TLS])
def test_stack_level(level):
    with taddons.context() as tctx:
        assert stack_level(context(level, tctx.options)) is level


def test_unknown_stack_is_refused():
    gate, rows, refused = make_gate()
    with taddons.context() as tctx:
        ctx = Context(tflow.tclient_conn(), tctx.options)
        layers.TCPLayer(ctx)
        assert stack_level(ctx) is Level.UNKNOWN
        assert isinstance(ask(gate, ctx, b"GET / HTTP/1.1\r\n").layer, Refused)
    assert refused == ["egress.layer_unknown"]


def test_layers_built_for_each_choice():
    gate, rows, refused = make_gate()
    with taddons.context() as tctx:
        o = tctx.options
        proxy = ask(gate, context(Level.PROXY, o), b"CONNECT a.test:443 HTTP/1.1\r\n").layer
        assert isinstance(proxy, layers.HttpLayer) and proxy.mode is HTTPMode.regular
        assert ask(gate, context(Level.TUNNEL, o), b"GE").layer is None           # waits for more
        http = ask(gate, context(Level.TUNNEL, o), b"GET / HTTP/1.1\r\n").layer
        assert isinstance(http, layers.HttpLayer) and http.mode is HTTPMode.transparent
        tls = ask(gate, context(Level.TUNNEL, o), HELLO).layer
        assert isinstance(tls, layers.ServerTLSLayer) and isinstance(tls.child_layer, layers.ClientTLSLayer)
        assert isinstance(ask(gate, context(Level.TUNNEL, o, ("pinned.test", 443)), HELLO).layer, layers.TCPLayer)
        assert isinstance(ask(gate, context(Level.TUNNEL, o, ("db.test", 5432)), b"\x00").layer, layers.TCPLayer)
        assert isinstance(ask(gate, context(Level.TUNNEL, o, ("db.test", 5433)), b"\x00").layer, Refused)
    assert refused == ["egress.raw_refused"] and rows.rows[0]["codes"] == ["egress.raw_refused"]
    assert rows.rows[0]["session"] == "s_1" and rows.rows[0]["host"] == "db.test"
    assert rows.rows[0]["detail"] == {"port": 5433, "layer": "tunnel"}


def test_a_decision_already_taken_is_kept():
    gate, _, _ = make_gate()
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        nl = layer.NextLayer(ctx)
        nl.layer = sentinel = Refused(ctx)
        gate.next_layer(nl)
        assert nl.layer is sentinel


def test_an_internal_error_refuses():
    gate, _, _ = make_gate()
    gate.raw_tcp = None                                   # breaks matching: must fail closed
    with taddons.context() as tctx:
        assert isinstance(ask(gate, context(Level.TUNNEL, tctx.options), b"GET / HTTP/1.1\r\n").layer, Refused)


def tcp_flow(messages):
    flow = tflow.ttcpflow(messages=[])
    flow.server_conn.address = ("db.test", 5432)
    flow.messages = [tcp.TCPMessage(from_client, data) for from_client, data in messages]
    return flow


def test_tcp_tunnel_counts_bytes_each_way_and_audits_once():
    gate, rows, _ = make_gate()
    flow = tcp_flow([])
    gate.tcp_start(flow)
    for from_client, data in [(True, b"hello"), (False, b"hello back"), (True, b"!")]:
        flow.messages.append(tcp.TCPMessage(from_client, data))
        gate.tcp_message(flow)
        assert flow.messages == []                        # nothing piles up in memory
    gate.tcp_end(flow)
    gate.tcp_end(flow)
    (row,) = rows.rows
    assert row["kind"] == "tcp" and row["bytes_out"] == 6 and row["bytes_in"] == 10
    assert row["host"] == "db.test" and row["detail"] == {"port": 5432, "mode": "raw_tcp"}


def test_tcp_tunnel_of_an_ended_session_carries_nothing():
    gate, rows, _ = make_gate(valid=False)
    flow = tcp_flow([])
    gate.tcp_start(flow)
    message = tcp.TCPMessage(True, b"after the end")
    flow.messages.append(message)
    gate.tcp_message(flow)
    assert message.content == b""


def tunnel_gate(proxied=False, vetted=True):
    rows, refused = Rows(), []
    return LayerGate(raw_tcp=[], passthrough=[parse_allow_entry("pinned.test")], audit=rows,
                     session_of=lambda client: "s_1", on_refused=refused.append, connection_valid=lambda c: True,
                     tunnel_of=lambda client: ("allowed.test", 443), proxied=lambda host, port: proxied,
                     vetted=lambda client, target: vetted and target == ("allowed.test", 443))


def built_chain(top) -> list:
    chain = [top]
    while not isinstance(chain[-1], layers.ClientTLSLayer):
        chain.append(chain[-1].child_layer)
    return chain


def hello_data(ctx, alpn):
    return ClientHelloData(ctx, parse_client_hello(client_hello(alpn=alpn)))


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_intercepted_tunnel_through_the_upstream_proxy_goes_through_it(scheme):
    """With `via` set (upstream.py, at the CONNECT), the intercepted tunnel's layers sit on the proxy's CONNECT, so a
    server connection opened before the client's handshake goes through the proxy; the inner level is still TLS."""
    gate = tunnel_gate(proxied=True)
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        ctx.server.via = (scheme, ("proxy.corp", 3128))
        chain = built_chain(ask(gate, ctx, HELLO).layer)
        assert any(isinstance(item, HttpUpstreamProxy) and item.conn is ctx.server for item in chain)
        assert isinstance(chain[-2], layers.ServerTLSLayer) and chain[-2].conn is ctx.server
        assert stack_level(ctx) is Level.TLS
        data = hello_data(ctx, ["h2", "http/1.1"])
        gate.tls_clienthello(data)
        assert data.establish_server_tls_first


def test_the_upstream_first_only_for_h2_offers_to_the_decided_destination():
    gate = tunnel_gate()
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        chain = built_chain(ask(gate, ctx, HELLO).layer)
        assert not any(isinstance(item, HttpUpstreamProxy) for item in chain)
        for alpn, expected in [(["h2", "http/1.1"], True), (["http/1.1"], False), (None, False)]:
            data = hello_data(ctx, alpn)
            gate.tls_clienthello(data)
            assert data.establish_server_tls_first is expected, alpn
        other = context(Level.TUNNEL, tctx.options, target=("other.test", 443))     # not the decided tunnel
        ask(gate, other, HELLO)
        data = hello_data(other, ["h2"])
        gate.tls_clienthello(data)
        assert not data.establish_server_tls_first


def test_a_destination_nobody_vetted_is_not_dialled_early():
    """e.g. one sandgate answers itself: decided, but no address was vetted for it."""
    gate = tunnel_gate(vetted=False)
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        ask(gate, ctx, HELLO)
        data = hello_data(ctx, ["h2"])
        gate.tls_clienthello(data)
        assert not data.establish_server_tls_first


def test_a_proxied_destination_without_the_proxy_layers_stays_lazy():
    """e.g. a transparent connection, whose requests are routed to the proxy one by one: never dialled direct."""
    gate = tunnel_gate(proxied=True)
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        ask(gate, ctx, HELLO)
        data = hello_data(ctx, ["h2"])
        gate.tls_clienthello(data)
        assert not data.establish_server_tls_first


def test_an_internal_error_in_tls_clienthello_stays_lazy():
    gate = tunnel_gate()
    gate.tunnel_of = None                                   # breaks the hook
    with taddons.context() as tctx:
        ctx = context(Level.TUNNEL, tctx.options)
        ask(gate, ctx, HELLO)
        data = hello_data(ctx, ["h2"])
        data.establish_server_tls_first = True
        gate.tls_clienthello(data)
        assert not data.establish_server_tls_first
