"""HTTPS through the intercepting proxy: curl trusts the session's CA; sandgate trusts the upstream via upstream_ca."""
from __future__ import annotations

import subprocess

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate
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
            yield sg, up


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
def test_host_header_fronting_refused(tls_env, http_version, code):
    """A request inside a tunnel to an allowed host must not name another host (domain fronting)."""
    sg, up = tls_env
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
def test_refused_large_upload_in_tunnel_ends_promptly(tls_env, tmp_path, http_version):
    """A refused request with a large body is closed, not drained into memory; the client does not hang."""
    import time

    sg, up = tls_env
    sess = sg.session(allow=["secure.test"])
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (20 << 20))
    before = len(up.recorder.requests)
    t0 = time.time()
    out = curl(sess, http_version, "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30",
               "-H", "Host: fronted.test", "--data-binary", f"@{big}", f"https://secure.test:{up.port}/up")
    assert time.time() - t0 < 10
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
