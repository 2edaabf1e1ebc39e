"""Red team: bytes a sandbox controls reach the policy engine as input. A header that is not UTF-8 (mitmproxy
hands it over with surrogate escapes; HTTP allows such obs-text) once made regorus segfault: a worker process per
request (every session's egress denied while they respawn), or the whole gateway with `policy.isolation =
"thread"` or a shadow policy. The engine refuses such input now (tests/gateway/policy/test_redteam_inputs.py);
the egress input carries U+FFFD in place of each bad byte, so the request is still decided normally."""
from __future__ import annotations

import base64
import json
import socket

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.tunnel import read_response


def test_the_egress_input_carries_valid_text_only():
    from gateway.policy.inputs import build_egress_input

    doc = build_egress_input(session={"id": "s", "workload": "ephemeral", "created_at": 0}, now=1.0, method="GET",
                             scheme="https", host="a.test", port=443, path="/caf\udce9", query="q=caf\udce9",
                             headers=[("X-Name", "caf\udce9"), ("X-\udcff", "1")])
    req = doc["request"]
    assert req["path"] == "/caf\ufffd" and req["query"] == {"q": ["caf\ufffd"]}
    assert req["headers"] == {"x-name": "caf\ufffd", "x-\ufffd": "1"}
    json.dumps(doc).encode("utf-8")                    # encodable: no lone surrogate left anywhere


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
