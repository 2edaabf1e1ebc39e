"""Nothing inside an allowed tunnel goes out undecided (real proxy, real upstreams, raw sockets).

Each trick is sent through a CONNECT tunnel to an allowed host. The recording upstream proves the outcome: a
refused trick opens no upstream connection at all; a trick that parses as HTTP is decided like any request.
"""
from __future__ import annotations

import time

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.h2upstream import H2Upstream
from tests.support.tunnel import (h2_request, open_tunnel, read_response, read_until_closed, send_segments,
                                  tls_in_tunnel)
from tests.support.upstream import EchoServer, Upstream, make_cert


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tunnels")
    cert = make_cert(tmp / "certs", ["secure.test", "other.test", "pinned.test"])
    with Upstream() as plain, Upstream(tls=cert) as secure, EchoServer() as echo:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert, "hold_timeout_s": 2,
                          "passthrough": ["pinned.test"], "raw_tcp": [f"echo.test:{echo.port}"],
                          "resolve": {**LOOPBACK_CONFIG["egress"]["resolve"], "echo.test": ["127.0.0.1"],
                                      "pinned.test": ["127.0.0.1"]}}}
        with Sandgate(tmp / "gw", cfg) as sg:
            yield sg, plain, secure, echo, cert


@pytest.fixture(scope="module")
def h2up(env):
    with H2Upstream(tls=env[4]) as up:
        yield up


def wait_events(sg, sid, predicate, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = [e for e in sg.events(sid) if predicate(e)]
        if rows:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"no matching audit row in {sg.events(sid)}")


def req(port: int, path: str, method: str = "GET", host: str = "allowed.test", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}Content-Length: 0\r\n\r\n".encode()


# (name, segments(port), expected): "refused" = closed without an HTTP answer, nothing dialled upstream;
# "403 CODE" = parsed as HTTP and decided (denied or held and timed out) before reaching the upstream.
TRICKS = [
    ("stray_crlf_then_request", lambda p: [b"\r\n", req(p, "/t-stray")], "refused"),
    ("stray_crlf_same_segment", lambda p: [b"\r\n" + req(p, "/t-stray2")], "refused"),
    ("stray_bytes_then_request", lambda p: [b"\x00\x00" + req(p, "/t-stray3")], "refused"),
    ("method_split_across_segments", lambda p: [b"DE", b"LE", req(p, "/t-split", "DELETE")[4:]],
     "403 approval.timeout"),
    ("request_one_byte_per_segment", lambda p: [bytes([b]) for b in req(p, "/t-bytes", host="other.test")],
     "403 egress.host_mismatch"),
    ("binary_bytes", lambda p: [b"\x00\x01\x02\x03binary\xff/t-bin"], "refused"),
    ("ssh_banner", lambda p: [b"SSH-2.0-OpenSSH_9.6\r\n"], "refused"),
    ("http2_prior_knowledge", lambda p: [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"], "refused"),
    ("http_0_9", lambda p: [b"GET /t-09\r\n"], "refused"),
    ("garbage_tls_record", lambda p: [b"\x16\x03\x01\x00\x20" + b"\x00" * 32], "refused"),
    ("non_websocket_upgrade", lambda p: [req(p, "/upgrade", extra="Connection: Upgrade\r\nUpgrade: x-raw\r\n"),
                                         b"RAW-AFTER-UPGRADE"], "403 egress.upgrade_refused"),
    ("h2c_upgrade_other_case", lambda p: [req(p, "/upgrade", extra="Connection: Upgrade\r\nUpgrade: H2C\r\n"),
                                          b"RAW-AFTER-UPGRADE"], "403 egress.upgrade_refused"),
    ("websocket_upgrade_without_version", lambda p: [
        req(p, "/upgrade", extra="Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n"),
        b"RAW-AFTER-UPGRADE"], "403 egress.upgrade_refused"),
    ("absolute_form_to_another_host", lambda p: [
        f"GET http://other.test:{p}/t-abs HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n".encode()],
     "403 egress.authority_mismatch"),
    ("absolute_form_to_another_port", lambda p: [
        f"GET http://allowed.test:{p + 1}/t-abs2 HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n".encode()],
     "403 egress.authority_mismatch"),
    ("host_header_other_port", lambda p: [req(p + 1, "/t-port")], "403 egress.authority_mismatch"),
    ("two_host_headers", lambda p: [req(p, "/t-2host", extra=f"Host: other.test:{p}\r\n")],
     "403 egress.host_mismatch"),
    # mitmproxy itself answers a CONNECT inside a tunnel with 400 (sandgate would refuse it too).
    ("nested_connect", lambda p: [f"CONNECT other.test:{p} HTTP/1.1\r\nHost: other.test:{p}\r\n\r\n".encode()],
     "400 -"),
]


@pytest.mark.parametrize("name, segments, expected", TRICKS, ids=[t[0] for t in TRICKS])
def test_tunnel_content_tricks_never_reach_upstream_undecided(env, name, segments, expected):
    sg, plain, _secure, _echo, _cert = env
    sess = sg.session(allow=["allowed.test"])
    plain.recorder.requests.clear()
    connections_before = plain.recorder.connections
    sock = open_tunnel(sg.proxy_port, sess["token"], f"allowed.test:{plain.port}")
    with sock:
        send_segments(sock, segments(plain.port), pause_s=0.05)
        if expected == "refused":
            reply, closed = read_until_closed(sock, timeout_s=8)
        else:
            reply = read_response(sock)
            time.sleep(0.3)
            send_segments(sock, [b"RAW-AFTER-ANSWER"])       # nothing more may leave either
    time.sleep(0.3)
    seen = [r for r in plain.recorder.requests if r.path.startswith("/t-") or r.method == "RAW"]
    assert seen == [], f"{name}: the upstream received {seen}"
    if expected == "refused":
        assert closed and not reply.startswith(b"HTTP/"), reply[:200]
        assert plain.recorder.connections == connections_before, "a refused tunnel must not dial the upstream"
        rows = wait_events(sg, sess["id"], lambda e: "egress.raw_refused" in e["codes"])
        assert rows[0]["action"] == "deny" and rows[0]["host"] == "allowed.test"
    else:
        status, code = expected.split()
        assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:300]
        if code != "-":
            assert code.encode() in reply
            wait_events(sg, sess["id"], lambda e: code in e["codes"])


H2_CASES = [
    ("authority_other_host", lambda p: f"other.test:{p}", "egress.authority_mismatch"),
    ("authority_other_port", lambda p: f"secure.test:{p + 1}", "egress.authority_mismatch"),
    ("authority_with_userinfo", lambda p: f"x@secure.test:{p}", None),     # a stream error, or a 403
]


@pytest.mark.parametrize("name, authority, code", H2_CASES, ids=[c[0] for c in H2_CASES])
def test_http2_mismatched_authority_refused(env, h2up, name, authority, code):
    sg, _plain, _secure, _echo, _cert = env
    secure = h2up
    sess = sg.session(allow=["secure.test", "other.test"])
    secure.recorder.requests.clear()
    tls = tls_in_tunnel(open_tunnel(sg.proxy_port, sess["token"], f"secure.test:{secure.port}"),
                        sess["ca_file"], "secure.test", alpn=["h2"])
    with tls:
        assert tls.selected_alpn_protocol() == "h2"
        status, body = h2_request(tls, [(":method", "GET"), (":path", "/t-h2"), (":scheme", "https"),
                                        (":authority", authority(secure.port))])
    if code is None:
        assert status in (0, 400, 403), (status, body)
    else:
        assert status == 403 and code.encode() in body, body
    assert secure.recorder.requests == []


def test_http2_matching_authority_passes(env, h2up):
    sg, _plain, _secure, _echo, _cert = env
    secure = h2up
    sess = sg.session(allow=["secure.test"])
    tls = tls_in_tunnel(open_tunnel(sg.proxy_port, sess["token"], f"secure.test:{secure.port}"),
                        sess["ca_file"], "secure.test", alpn=["h2"])
    with tls:
        status, body = h2_request(tls, [(":method", "GET"), (":path", "/h2-ok"), (":scheme", "https"),
                                        (":authority", f"secure.test:{secure.port}")])
    assert status == 200 and body.startswith(b"h2 /h2-ok")
    assert secure.recorder.requests[-1].path == "/h2-ok"


@pytest.mark.parametrize("alpn, payload", [
    (None, b"\x00\x01binary inside TLS"),
    (None, b"\r\nGET /t-tls HTTP/1.1\r\n\r\n"),
    (["x-custom"], b"\x00\x01binary inside TLS"),
])
def test_non_http_inside_intercepted_tls_is_refused(env, alpn, payload):
    sg, _plain, secure, _echo, _cert = env
    sess = sg.session(allow=["secure.test"])
    connections_before = secure.recorder.connections
    tls = tls_in_tunnel(open_tunnel(sg.proxy_port, sess["token"], f"secure.test:{secure.port}"),
                        sess["ca_file"], "secure.test", alpn=alpn)
    with tls:
        tls.sendall(payload)
        reply, closed = read_until_closed(tls)
    assert closed and not reply.startswith(b"HTTP/")
    assert secure.recorder.connections == connections_before
    wait_events(sg, sess["id"], lambda e: "egress.raw_refused" in e["codes"])


def test_raw_tcp_target_carries_an_echo_exchange(env):
    sg, _plain, _secure, echo, _cert = env
    sess = sg.session(allow=["echo.test"])
    payload = b"\x00\x01 not http at all \xff" * 50
    with open_tunnel(sg.proxy_port, sess["token"], f"echo.test:{echo.port}") as sock:
        sock.sendall(payload)
        got = b""
        sock.settimeout(10)
        while len(got) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "the tunnel closed before the echo came back"
            got += chunk
    assert got == payload
    rows = wait_events(sg, sess["id"], lambda e: e["kind"] == "tcp")
    assert rows[0]["bytes_out"] == len(payload) and rows[0]["bytes_in"] == len(payload)
    assert rows[0]["host"] == "echo.test" and rows[0]["detail"]["port"] == echo.port
    assert rows[0]["detail"]["mode"] == "raw_tcp"


def test_raw_tcp_needs_the_listed_port_and_the_policy(env):
    sg, _plain, _secure, echo, _cert = env
    with EchoServer() as unlisted:
        sess = sg.session(allow=["echo.test"])
        with open_tunnel(sg.proxy_port, sess["token"], f"echo.test:{unlisted.port}") as sock:
            send_segments(sock, [b"\x00raw bytes"])
            reply, closed = read_until_closed(sock)
        assert closed and reply == b"" and unlisted.connections == 0
    # Listed in egress.raw_tcp, but the session may not reach it: the CONNECT itself is refused.
    other = sg.session(allow=["allowed.test"])
    with pytest.raises(AssertionError, match="refused"):
        open_tunnel(sg.proxy_port, other["token"], f"echo.test:{echo.port}")


def test_passthrough_is_decided_by_the_connect_target_not_the_sni(env):
    """CONNECT names an intercepted host, the ClientHello names a passthrough host: stays intercepted (sandgate's
    certificate, per-request decisions), and the mismatched name is refused."""
    sg, _plain, secure, _echo, _cert = env
    sess = sg.session(allow=["secure.test", "pinned.test"])
    secure.recorder.requests.clear()
    sock = open_tunnel(sg.proxy_port, sess["token"], f"secure.test:{secure.port}")
    tls = tls_in_tunnel(sock, sess["ca_file"], "pinned.test")       # trusts sandgate's CA only
    with tls:
        issuer = dict(x[0] for x in tls.getpeercert()["issuer"])
        assert (issuer.get("commonName"), issuer.get("organizationName")) == ("sandgate egress CA", "sandgate")
        tls.sendall(f"GET /t-sni HTTP/1.1\r\nHost: secure.test:{secure.port}\r\n\r\n".encode())
        reply, _ = read_until_closed(tls, timeout_s=3)
    assert reply.startswith(b"HTTP/1.1 403") and b"egress.sni_mismatch" in reply
    assert secure.recorder.requests == []


def test_passthrough_target_is_relayed_whatever_the_sni(env):
    """CONNECT names the passthrough host: the TLS stream is relayed (the upstream's own certificate), and the
    tunnel is audited as kind `tcp`."""
    sg, _plain, secure, _echo, cert = env
    sess = sg.session(allow=["pinned.test"])
    sock = open_tunnel(sg.proxy_port, sess["token"], f"pinned.test:{secure.port}")
    tls = tls_in_tunnel(sock, cert.cert, "secure.test")             # trusts the upstream's certificate only
    with tls:
        tls.sendall(f"GET /pinned HTTP/1.1\r\nHost: secure.test:{secure.port}\r\nConnection: close\r\n\r\n".encode())
        reply, _ = read_until_closed(tls)
    assert reply.startswith(b"HTTP/1.1 200")
    rows = wait_events(sg, sess["id"], lambda e: e["kind"] == "tcp")
    assert rows[0]["detail"]["mode"] == "passthrough" and rows[0]["bytes_out"] > 0 and rows[0]["bytes_in"] > 0


def test_plain_http_to_a_passthrough_target_is_still_decided(env):
    """Only TLS is relayed to a passthrough target; plain HTTP in such a tunnel is parsed and decided."""
    sg, plain, _secure, _echo, _cert = env
    sess = sg.session(allow=["pinned.test"])
    plain.recorder.requests.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"pinned.test:{plain.port}") as sock:
        send_segments(sock, [req(plain.port, "/t-pass", host="other.test")])
        reply, _ = read_until_closed(sock, timeout_s=3)
    assert reply.startswith(b"HTTP/1.1 403") and b"egress.host_mismatch" in reply
    assert plain.recorder.requests == []


def test_tls_to_the_proxy_listener_itself_is_refused(env):
    import socket
    import ssl

    sg = env[0]
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)) as refused:
            with ctx.wrap_socket(raw, server_hostname="proxy.test") as tls:
                tls.recv(10)
    assert not isinstance(refused.value, TimeoutError), "the proxy must refuse the handshake, not leave it hanging"


def test_raw_tcp_tunnel_stops_when_its_session_ends(env):
    sg, _plain, _secure, echo, _cert = env
    sess = sg.session(allow=["echo.test"])
    with open_tunnel(sg.proxy_port, sess["token"], f"echo.test:{echo.port}") as sock:
        sock.sendall(b"\x00first")
        sock.settimeout(5)
        assert sock.recv(100) == b"\x00first"
        assert sg.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
        before = len(echo.received)
        sock.sendall(b"\x00after-the-end")
        reply, _ = read_until_closed(sock, timeout_s=1.5)
    assert reply == b"" and b"after-the-end" not in echo.received[before:]
