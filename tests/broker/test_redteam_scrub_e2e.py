"""Red team: an upstream that echoes the injected secret where a scrubber may not look. Real sandgate, real TLS
upstream (tests/support/evil.py), raw HTTP/1 and HTTP/2 clients reading every byte the sandbox would get.

Whatever the upstream does, the real value never reaches the sandbox: it is scrubbed, or the response is refused
(502) when it cannot be scrubbed safely. Nor does it reach the audit trail or the log."""
from __future__ import annotations

import base64
import os
import re
import socket
import ssl
import time

import h2.connection
import h2.events
import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.support.evil import EvilUpstream
from tests.support import leaks
from tests.support.gateway import Sandgate
from tests.support.tunnel import open_tunnel, read_until_closed, tls_in_tunnel
from tests.support.upstream import make_cert

REAL = "sk-evil-" + "q" * 20 + "0123456789"       # lower case: HTTP/2 lowercases header names
MIXED = "Sk-Mixed-" + "AbCd" * 6                    # HTTP/2 lowercases it in a header name
ODD = "sk-odd-~~>>??~~>>??~~>>??0123"                # its base64 differs between the two alphabets


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("redteam-scrub")
    cert = make_cert(tmp / "certs", ["evil.test", "elsewhere.test"])
    with EvilUpstream(tls=cert) as evil:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {"evil.test": ["127.0.0.1"], "elsewhere.test": ["127.0.0.1"]}},
               "secrets": {"evil": {"source": "env:SG_EVIL", "hosts": ["evil.test"],
                                    "inject_in": ["header", "query", "body"]},
                           "mixed": {"source": "env:SG_MIXED", "hosts": ["evil.test"]},
                           "odd": {"source": "env:SG_ODD", "hosts": ["evil.test"]}}}
        sg = Sandgate(tmp / "gw", cfg, env={"SG_EVIL": REAL, "SG_MIXED": MIXED, "SG_ODD": ODD})
        sg.start()
        yield sg, evil
        events = sg.call("GET", "/v1/events").text
        sg.stop()
        for real in (REAL, MIXED, ODD):
            assert real not in events
            for path in (tmp / "gw").rglob("*"):
                if path.is_file():
                    assert real.encode() not in path.read_bytes(), f"the real value is in {path}"


def leaked(data: bytes, real: str = REAL) -> bool:
    """The value, upper-cased, or in base64 (either alphabet, any alignment) in `data`."""
    return leaks.leaked(data, real)


def tunnel(sg, sess, alpn: str) -> ssl.SSLSocket:
    sock = open_tunnel(sg.proxy_port, sess["token"], f"evil.test:{EVIL_PORT[0]}")
    return tls_in_tunnel(sock, sess["ca_file"], "evil.test", alpn=[alpn])


EVIL_PORT = [0]


def h1(sg, evil, path: str, extra: str = "", secret: str = "evil") -> bytes:
    """Every byte the sandbox gets for one HTTP/1.1 request carrying the placeholder."""
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=[secret])
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {sess['env'][secret.upper()]}\r\n{extra}Connection: close\r\n\r\n"
                    .encode())
        data, _ = read_until_closed(tls, 8)
    real = {"evil": REAL, "mixed": MIXED, "odd": ODD}[secret]
    assert evil.seen and evil.seen[-1][1].get("authorization") == f"Bearer {real}", "the secret was not injected"
    return data


def h2_all(sg, evil, path: str, secret: str = "evil") -> tuple[int, list, bytes, list]:
    """(status, headers, body, trailers) the sandbox gets for one HTTP/2 request carrying the placeholder."""
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=[secret])
    with tunnel(sg, sess, "h2") as tls:
        assert tls.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection()
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":path", path), (":scheme", "https"),
                              (":authority", f"evil.test:{evil.port}"),
                              ("authorization", f"Bearer {sess['env'][secret.upper()]}")], end_stream=True)
        tls.sendall(conn.data_to_send())
        tls.settimeout(30)
        status, headers, body, trailers, raw = 0, [], b"", [], b""
        deadline = time.time() + 30
        done = False
        while time.time() < deadline and not done:
            data = tls.recv(65536)
            if not data:
                break
            raw += data
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    headers = event.headers
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers = event.headers
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
            tls.sendall(conn.data_to_send())
    real = REAL if secret == "evil" else MIXED
    assert evil.seen and evil.seen[-1][1].get("authorization") == f"Bearer {real}", "the secret was not injected"
    return status, headers, body, trailers


def test_reason_phrase_is_scrubbed(env):
    sg, evil = env
    data = h1(sg, evil, "/reason")
    assert data.startswith(b"HTTP/1.1 200") and not leaked(data)


@pytest.mark.parametrize("secret", ["evil", "odd"])
def test_base64_echoes_in_both_alphabets_are_scrubbed(env, secret):
    """The upstream echoes the value in base64, standard and URL-safe, at each alignment (for "odd" the two
    alphabets differ): every form reaches the sandbox as the placeholder's."""
    sg, evil = env
    data = h1(sg, evil, "/b64", secret=secret)
    real = {"evil": REAL, "odd": ODD}[secret]
    assert data.startswith(b"HTTP/1.1 200") and not leaked(data, real), data
    head, _, body = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        chunks, rest = [], body
        while (size := int(rest.split(b"\r\n", 1)[0].split(b";")[0], 16)) > 0:
            rest = rest.split(b"\r\n", 1)[1]
            chunks.append(rest[:size])
            rest = rest[size + 2:]
        body = b"".join(chunks)
    forms = re.findall(rb"^((?:std|url)\d)=[A-Za-z0-9+/_-]+=*$", body, re.M)
    assert forms == [b"std0", b"url0", b"std1", b"url1", b"std2", b"url2"], data     # each echoed, each scrubbed


def test_http1_trailer_never_reaches_the_sandbox(env):
    """mitmproxy 12 does not relay HTTP/1 trailers (it drops the connection): the value stays out, and the proxy
    keeps serving."""
    sg, evil = env
    data = h1(sg, evil, "/trailer", "TE: trailers\r\n")
    assert data.startswith(b"HTTP/1.1 200") and not leaked(data)
    assert b"\r\n2\r\nok\r\n" in h1(sg, evil, "/plain")


def test_http2_trailer_is_scrubbed(env):
    sg, evil = env
    status, headers, body, trailers = h2_all(sg, evil, "/trailer")
    assert status == 200 and body == b"ok"
    assert not leaked(repr(headers).encode() + repr(trailers).encode())


@pytest.mark.parametrize("proto", ["h1", "h2"])
def test_header_name_is_scrubbed(env, proto):
    sg, evil = env
    if proto == "h1":
        data = h1(sg, evil, "/hname")
        assert data.startswith(b"HTTP/1.1 200") and not leaked(data)
    else:
        status, headers, _body, _ = h2_all(sg, evil, "/hname")
        assert status == 200 and not leaked(repr(headers).encode())


@pytest.mark.parametrize("path", ["/gzip", "/unknown-ce"])
def test_a_response_that_cannot_be_scanned_is_refused_with_502(env, path):
    sg, evil = env
    data = h1(sg, evil, path)
    assert data.startswith(b"HTTP/1.1 502") and b"secret.unscannable" in data and not leaked(data)


def test_a_compressed_http2_response_is_refused_with_502(env):
    sg, evil = env
    status, headers, body, _ = h2_all(sg, evil, "/gzip")
    assert status == 502 and b"secret.unscannable" in body and not leaked(body)


def test_websocket_101_headers_are_scrubbed(env):
    sg, evil = env
    key = base64.b64encode(os.urandom(16)).decode()
    data = h1(sg, evil, "/ws101", f"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n")
    assert data.startswith(b"HTTP/1.1 101") and not leaked(data)


@pytest.mark.parametrize("path", ["/badline", "/badname", "/dupte"])
def test_upstream_error_text_quoting_the_secret_never_reaches_the_sandbox(env, path):
    """A malformed status line or header: mitmproxy's own 502 would quote it (with the value) to the client."""
    sg, evil = env
    data = h1(sg, evil, path)
    assert not leaked(data)
    assert data.startswith(b"HTTP/1.1 502") and b"could not be relayed" in data


def test_a_value_stored_upstream_and_read_back_without_a_secret_is_scrubbed(env):
    """The sandbox makes the bound host keep the value (one request with the placeholder), then reads it back
    with a request that carries no placeholder: that response must be scrubbed too."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=["evil"])
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET /store HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {sess['env']['EVIL']}\r\n\r\n".encode())
        time.sleep(0.5)
        tls.sendall(f"GET /fetch HTTP/1.1\r\nHost: evil.test:{evil.port}\r\nConnection: close\r\n\r\n".encode())
        data, _ = read_until_closed(tls, 8)
    assert evil.stored == REAL
    assert b"stored=" in data and not leaked(data)


def test_a_transfer_coded_compressed_response_never_reaches_the_sandbox(env):
    sg, evil = env
    data = h1(sg, evil, "/te-gzip")
    assert not leaked(data) and b"token=" not in data
    body = data.partition(b"\r\n\r\n")[2]
    assert data.startswith(b"HTTP/1.1 502") or body == b"", data[:300]
    import gzip as _gzip

    try:
        assert REAL.encode() not in _gzip.decompress(body)
    except (OSError, EOFError):
        pass


def test_a_bodyless_response_stays_bodyless_and_the_connection_in_sync(env):
    """A 204 with Content-Length: 0, scrubbed: no chunked terminator may follow it on a keep-alive connection."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=["evil"])
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET /nocontent HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {sess['env']['EVIL']}\r\n\r\n".encode())
        time.sleep(0.5)
        tls.sendall(f"GET /plain HTTP/1.1\r\nHost: evil.test:{evil.port}\r\nConnection: close\r\n\r\n".encode())
        data, _ = read_until_closed(tls, 8)
    assert not leaked(data)
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 204") and rest.startswith(b"HTTP/1.1 200"), data


def test_an_informational_response_is_scrubbed(env):
    sg, evil = env
    data = h1(sg, evil, "/early")
    assert not leaked(data), data


@pytest.mark.parametrize("path", ["/badline", "/badname", "/gzip", "/trailer", "/reason"])
def test_a_value_injected_into_the_query_stays_out_of_error_pages_logs_and_audit(env, path):
    """The injected URL is what mitmproxy knows the flow by: its errors and logs must not carry it (the module's
    teardown checks the log, the data directory and the events)."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=["evil"])
    ph = sess["env"]["EVIL"]
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET {path}?k={ph} HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {ph}\r\nConnection: close\r\n\r\n".encode())
        data, _ = read_until_closed(tls, 8)
    assert evil.seen[-1][0] == f"{path}?k={REAL}"
    assert not leaked(data)
    log = sg.log()
    assert REAL not in log


def test_a_value_split_by_header_folding_never_reaches_the_sandbox(env):
    sg, evil = env
    data = h1(sg, evil, "/fold")
    flat = data.replace(b"\r\n ", b"").replace(b"\r\n\t", b"")
    assert not leaked(flat), data
    assert REAL[10:].encode() not in data
    assert data.startswith(b"HTTP/1.1 502") and b"secret.unscannable" in data


def test_a_value_lowercased_by_http2_in_a_header_name_never_reaches_the_sandbox(env):
    """HTTP/2 lowercases header names: the echo is a case variant of the value, which a head check still finds."""
    sg, evil = env
    status, headers, body, _ = h2_all(sg, evil, "/hname", secret="mixed")
    assert MIXED.lower().encode() not in repr(headers).encode().lower() + body.lower()
    assert status == 502 and b"secret.unscannable" in body


@pytest.mark.parametrize("sized", [True, False])
def test_a_placeholder_in_http2_request_trailers_never_reaches_an_unbound_host(env, sized):
    """Request trailers follow the body (sent after the request hook): an unbound host never gets a placeholder
    in them. A declared small body is held and refused (403); an unsized one streams, its trailers dropped."""
    sg, evil = env
    sess = sg.session(allow=["evil.test", "elsewhere.test"], secrets=["evil"])
    ph = sess["env"]["EVIL"]
    before = len(evil.seen)
    tls = tls_in_tunnel(open_tunnel(sg.proxy_port, sess["token"], f"elsewhere.test:{evil.port}"),
                        sess["ca_file"], "elsewhere.test", alpn=["h2"])
    with tls:
        conn = h2.connection.H2Connection()
        conn.initiate_connection()
        headers = [(":method", "POST"), (":path", "/plain"), (":scheme", "https"),
                   (":authority", f"elsewhere.test:{evil.port}"), ("te", "trailers")]
        conn.send_headers(1, headers + ([("content-length", "5")] if sized else []))
        conn.send_data(1, b"hello")
        conn.send_headers(1, [("x-trailer", f"Bearer {ph}")], end_stream=True)
        tls.sendall(conn.data_to_send())
        tls.settimeout(30)
        status, deadline, done = 0, time.time() + 30, False
        while time.time() < deadline and not done:
            data = tls.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done = True
            tls.sendall(conn.data_to_send())
    time.sleep(0.3)
    for _path, seen in evil.seen[before:]:
        assert ph not in repr(seen)
    if sized:
        assert status == 403 and evil.seen[before:] == []


@pytest.mark.parametrize("with_placeholder", [True, False])
def test_a_header_that_is_not_utf8_survives_injection(env, with_placeholder):
    """Header bytes that are not UTF-8 (latin-1 filenames, say) in a request to a bound host: forwarded as they
    were, with or without a placeholder elsewhere in the request."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=["evil"])
    auth = f"Authorization: Bearer {sess['env']['EVIL']}\r\n" if with_placeholder else ""
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET /plain HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n{auth}".encode() +
                    b"X-Name: caf\xe9\r\nConnection: close\r\n\r\n")
        data, _ = read_until_closed(tls, 8)
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    assert evil.seen[-1][1]["x-name"] == b"caf\xe9".decode("latin-1")


def test_a_value_stored_at_the_bound_host_and_read_back_through_another_host_is_scrubbed(env):
    """The bound host keeps the value (a gist, a request log) and serves it from another name: every response a
    session holding the secret gets is scrubbed, not only those of the bound host."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test", "elsewhere.test"], secrets=["evil"])
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET /store HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {sess['env']['EVIL']}\r\nConnection: close\r\n\r\n".encode())
        read_until_closed(tls, 8)
    assert evil.stored == REAL
    other = open_tunnel(sg.proxy_port, sess["token"], f"elsewhere.test:{evil.port}")
    with tls_in_tunnel(other, sess["ca_file"], "elsewhere.test", alpn=["http/1.1"]) as tls:
        tls.sendall(f"GET /fetch HTTP/1.1\r\nHost: elsewhere.test:{evil.port}\r\nConnection: close\r\n\r\n".encode())
        data, _ = read_until_closed(tls, 8)
    assert evil.seen[-1][0] == "/fetch"
    assert b"stored=" in data and not leaked(data), data


def test_a_stored_value_read_back_in_byte_ranges_is_never_pieced_together(env):
    """Two Range requests for two halves of a kept value: no half is the value, so no scrubber would see one. A
    session holding secrets never gets a partial response: its Range headers are dropped."""
    sg, evil = env
    EVIL_PORT[0] = evil.port
    sess = sg.session(allow=["evil.test"], secrets=["evil"])
    got = b""
    with tunnel(sg, sess, "http/1.1") as tls:
        tls.sendall(f"GET /store HTTP/1.1\r\nHost: evil.test:{evil.port}\r\n"
                    f"Authorization: Bearer {sess['env']['EVIL']}\r\nConnection: close\r\n\r\n".encode())
        read_until_closed(tls, 8)
    assert evil.stored == REAL
    half = 7 + len(REAL) // 2
    for first, last in ((7, half - 1), (half, 7 + len(REAL) - 1)):
        with tunnel(sg, sess, "http/1.1") as tls:
            tls.sendall(f"GET /fetch HTTP/1.1\r\nHost: evil.test:{evil.port}\r\nRange: bytes={first}-{last}\r\n"
                        f"Connection: close\r\n\r\n".encode())
            data, _ = read_until_closed(tls, 8)
        assert not leaked(data)
        got += data.partition(b"\r\n\r\n")[2]
    assert REAL[: len(REAL) // 2].encode() not in got and REAL[len(REAL) // 2:].encode() not in got
