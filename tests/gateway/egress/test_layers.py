"""The next_layer addon in process (mitmproxy's own test helpers): stack levels, built layers, audit rows."""
from __future__ import annotations

import pytest
from mitmproxy import tcp
from mitmproxy.proxy import events, layer, layers
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers.http import HttpStream, HTTPMode
from mitmproxy.test import taddons, tflow

from gateway.net.hosts import parse_allow_entry
from gateway.egress.layers import LayerGate, Refused, stack_level
from gateway.egress.tunnels import Level
from tests.gateway.egress.test_tunnels import HELLO


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
