"""Red team: bytes a sandbox controls reach the policy engine as input. A header that is not UTF-8 (mitmproxy
hands it over with surrogate escapes) once made regorus segfault: a worker process per request (every session's
egress denied while they respawn), or the whole gateway with `policy.isolation = "thread"` or a shadow policy.
The engine now sees such text with U+FFFD in place of each bad byte; the request is decided normally."""
from __future__ import annotations

import base64
import socket
import subprocess
import sys

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate
from tests.support.tunnel import read_response


def test_evaluating_lone_surrogates_does_not_crash_the_interpreter():
    """In a child interpreter: a crash there cannot take the test run down."""
    code = ("from gateway.policy.rego import build_engine, evaluate\n"
            "from gateway.policy.loader import PolicySource\n"
            "import regorus\n"
            "e = regorus.Engine()\n"
            "e.add_policy('a.rego', 'package a\\nx := input.h\\ny := input.l[0].k\\n')\n"
            "print(ascii(evaluate(e, 'data.a.x', {'h': 'caf\\udce9'})))\n"
            "print(ascii(evaluate(e, 'data.a.y', {'l': [{'k': '\\ud800x'}], 'caf\\udce9': 1})))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["'caf\\ufffd'", "'\\ufffdx'"]


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_header_that_is_not_utf8_is_decided_and_the_gateway_lives(tmp_path, upstream, isolation):
    cfg = {**LOOPBACK_CONFIG, "policy": {"isolation": isolation}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        sess = sg.session(allow=["allowed.test"])
        auth = "Basic " + base64.b64encode(f"s:{sess['token']}".encode()).decode()
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", sg.proxy_port), timeout=10) as sock:
                sock.sendall(f"GET http://allowed.test:{upstream.port}/ HTTP/1.1\r\nHost: allowed.test:{upstream.port}"
                             f"\r\nProxy-Authorization: {auth}\r\n".encode() + b"X-Name: caf\xe9\r\n\r\n")
                reply = read_response(sock)
            assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
        assert sg.proc.poll() is None
        assert "worker exited" not in sg.log() and "restarted" not in sg.log()
        ok = requests.get(f"http://allowed.test:{upstream.port}/", proxies=sess["proxies"], timeout=20)
        assert ok.status_code == 200
