"""HTTPS through the intercepting proxy: curl trusts the session's CA; sandgate trusts the upstream via upstream_ca."""
from __future__ import annotations

import subprocess

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate
from tests.support.h2upstream import H2Upstream
from tests.support.upstream import Upstream, make_cert


@pytest.fixture(scope="module")
def tls_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    cert = make_cert(tmp / "certs", ["secure.test", "fronted.test"])
    with Upstream(tls=cert) as up:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert, "hold_timeout_s": 1,
                          "passthrough": ["pinned.test"],
                          "resolve": {"secure.test": ["127.0.0.1"], "fronted.test": ["127.0.0.1"],
                                      "pinned.test": ["127.0.0.1"], "rogue.test": ["127.0.0.1"]}}}
        with Sandgate(tmp / "gw", cfg) as sg:
            sg.upstream_cert = cert.cert
            sg.cert_pair = cert
            yield sg, up


@pytest.fixture(scope="module")
def h2up(tls_env):
    """An upstream that speaks HTTP/2 only (the other one, `up`, speaks HTTP/1.1 only)."""
    with H2Upstream(tls=tls_env[0].cert_pair) as up:
        yield up


def upstream_for(http_version, tls_env, h2up):
    """curl --http2 gets h2 only from an upstream that speaks it: such requests go to the h2 upstream."""
    return h2up if http_version == "--http2" else tls_env[1]


def curl(sess, *args):
    return subprocess.run([need_binary("curl"), "-s", "--cacert", sess["ca_file"], "-x", sess["proxy_url"], *args],
                          capture_output=True, text=True, timeout=30)


def test_https_allowed_200(tls_env):
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    out = curl(sess, "-o", "-", "-w", "\n%{http_code}", f"https://secure.test:{up.port}/ok")
    assert out.stdout.endswith("\n200"), out.stdout + out.stderr
    assert "hello from upstream" in out.stdout
    assert up.recorder.requests[-1].path == "/ok"


def test_https_delete_asks_and_is_refused(tls_env):
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    before = len(up.recorder.requests)
    out = curl(sess, "-i", "-X", "DELETE", f"https://secure.test:{up.port}/thing")
    status_lines = [line for line in out.stdout.splitlines() if line.startswith("HTTP/")]
    assert status_lines[-1].split()[1] == "403", out.stdout
    assert "approval required" in out.stdout
    assert len(up.recorder.requests) == before


def test_https_denied_connect_reason_in_status_line(tls_env):
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    out = subprocess.run([need_binary("curl"), "-sv", "--cacert", sess["ca_file"], "-x", sess["proxy_url"],
                          f"https://other.test:{up.port}/"], capture_output=True, text=True, timeout=30)
    assert "403 Forbidden by sandgate: other.test is not on this session's allow list" in out.stderr


def test_a_client_offering_h2_gets_http1_from_an_http1_upstream(tls_env):
    """curl offers h2 by default; an upstream that speaks only HTTP/1.1 gives it HTTP/1.1 (as with no proxy)."""
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    out = curl(sess, "-o", "-", "-w", "\n%{http_version} %{http_code}", f"https://secure.test:{up.port}/alpn1")
    assert out.stdout.endswith("\n1.1 200"), out.stdout + out.stderr
    assert "hello from upstream" in out.stdout
    assert up.recorder.requests[-1].path == "/alpn1"
    # kept alive: several requests on one tunnel, all HTTP/1.1
    urls = [arg for i in range(3) for arg in (f"https://secure.test:{up.port}/alpn1-{i}", "-o", "/dev/null")]
    out = curl(sess, "-w", "%{http_version} %{http_code} %{num_connects}\n", *urls)
    assert out.stdout.splitlines() == ["1.1 200 1", "1.1 200 0", "1.1 200 0"], out.stdout + out.stderr


def test_an_h2_client_gets_h2_end_to_end_from_an_h2_upstream(tls_env, h2up):
    sg, _ = tls_env
    sess = sg.session(allow=["secure.test"])
    urls = [f"https://secure.test:{h2up.port}/alpn2-{i}" for i in range(3)]
    out = curl(sess, "--http2", "-w", "\n%{http_version} %{http_code}\n", *urls)
    assert out.stdout.count("\n2 200\n") == 3, out.stdout + out.stderr
    assert "h2 /alpn2-0" in out.stdout and "h2 /alpn2-2" in out.stdout
    assert [r.path for r in h2up.recorder.requests[-3:]] == [f"/alpn2-{i}" for i in range(3)]
    assert h2up.alpns[-1] == "h2"


def test_requests_library_https(tls_env):
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    resp = requests.get(f"https://secure.test:{up.port}/x", proxies=sess["proxies"], verify=sess["ca_file"],
                        timeout=20)
    assert resp.status_code == 200


@pytest.mark.parametrize("http_version, code", [
    ("--http1.1", "egress.host_mismatch"),          # the Host header
    ("--http2", "egress.authority_mismatch"),       # curl sends it as HTTP/2's :authority
])
def test_host_header_fronting_refused(tls_env, h2up, http_version, code):
    """A request inside a tunnel to an allowed host must not name another host (domain fronting)."""
    sg, _ = tls_env
    up = upstream_for(http_version, tls_env, h2up)
    sess = sg.session(allow=["secure.test"])
    before = len(up.recorder.requests)
    out = curl(sess, "-i", http_version, "-H", "Host: fronted.test", f"https://secure.test:{up.port}/front")
    status_lines = [line for line in out.stdout.splitlines() if line.startswith("HTTP/")]
    assert status_lines[-1].split()[1] == "403", out.stdout
    assert code in out.stdout
    assert len(up.recorder.requests) == before


def test_passthrough_host_is_not_intercepted(tls_env, tmp_path):
    sg, up = tls_env
    cert = make_cert(tmp_path / "pinned", ["pinned.test"])
    with Upstream(tls=cert) as pinned:
        sess = sg.session(allow=["pinned.test"])
        # The client trusts only the upstream's own certificate: this works only if sandgate does not intercept.
        out = subprocess.run([need_binary("curl"), "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                              cert.cert, "-x", sess["proxy_url"], f"https://pinned.test:{pinned.port}/pin"],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout == "200", out.stderr
        assert pinned.recorder.requests[-1].path == "/pin"
        other = sg.session(allow=["secure.test"])
        denied = subprocess.run([need_binary("curl"), "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                                 cert.cert, "-x", other["proxy_url"], f"https://pinned.test:{pinned.port}/pin"],
                                capture_output=True, text=True, timeout=30)
        assert denied.stdout != "200"


def test_untrusted_upstream_certificate_refused(tls_env, tmp_path):
    sg, _ = tls_env
    rogue_cert = make_cert(tmp_path / "rogue", ["rogue.test"])
    with Upstream(tls=rogue_cert) as rogue:
        sess = sg.session(allow=["rogue.test"])
        out = curl(sess, "-o", "/dev/null", "-w", "%{http_code}", f"https://rogue.test:{rogue.port}/")
        assert out.stdout != "200"
        assert rogue.recorder.requests == []


@pytest.mark.parametrize("http_version", ["--http1.1", "--http2"])
def test_refused_large_upload_in_tunnel_ends_promptly(tls_env, h2up, tmp_path, http_version):
    """A refused request with a large body is closed, not drained into memory; the client does not hang."""
    sg, _ = tls_env
    up = upstream_for(http_version, tls_env, h2up)
    sess = sg.session(allow=["secure.test"])
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (20 << 20))
    before = len(up.recorder.requests)
    out = curl(sess, http_version, "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "25",
               "-H", "Host: fronted.test", "--data-binary", f"@{big}", f"https://secure.test:{up.port}/up")
    assert out.returncode != 28, "curl hung until --max-time: the refused upload was not closed"   # 28: timeout
    assert out.stdout != "200"
    assert len(up.recorder.requests) == before


def test_sni_fronting_refused(tls_env):
    """Host header right, TLS server name another host: refused (domain fronting through the SNI)."""
    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    before = len(up.recorder.requests)
    out = curl(sess, "-i", "--connect-to", f"fronted.test:{up.port}:secure.test:{up.port}",
               "-H", f"Host: secure.test:{up.port}", f"https://fronted.test:{up.port}/sni")
    status_lines = [line for line in out.stdout.splitlines() if line.startswith("HTTP/")]
    assert status_lines and status_lines[-1].split()[1] == "403", out.stdout + out.stderr
    assert "egress.sni_mismatch" in out.stdout
    assert len(up.recorder.requests) == before
