"""The HTTP API basics: auth roles, sessions, errors, health, metrics, token files and CLI."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import jwt
import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    env = {"SANDGATE_EGRESS__HOLD_TIMEOUT_S": "7", "SANDGATE_APPROVALS__QUORUM": "1"}
    with Sandgate(tmp_path_factory.mktemp("api"), LOOPBACK_CONFIG, env=env) as sg:
        yield sg


def test_harness_token_file_is_private(gw):
    mode = stat.S_IMODE(os.stat(gw.data_dir / "harness.token").st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(gw.data_dir / "signing.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(gw.data_dir / "mitmproxy-ca.pem").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(gw.data_dir).st_mode) == 0o700


def test_session_create_contract(gw):
    resp = gw.call("POST", "/v1/sessions", json={"workload": "persistent", "labels": {"team": "a"},
                                                  "allow": ["PyPI.org.", "*.github.com", "example.com:8443"],
                                                  "ttl_s": 600, "workspace": "/work", "ca_path": "/ca.pem"})
    assert resp.status_code == 201
    body = resp.json()
    assert {"id", "token", "expires_at", "proxy_url", "ca_pem", "env"} <= set(body)
    assert body["allow"] == ["pypi.org", "*.github.com", "example.com:8443"]
    assert body["proxy_url"] == f"http://sandgate:{body['token']}@127.0.0.1:{gw.proxy_port}"
    assert body["ca_pem"].startswith("-----BEGIN CERTIFICATE-----") and body["ca_pem"].count("BEGIN") > 50
    env = body["env"]
    assert env["HTTPS_PROXY"] == env["http_proxy"] == body["proxy_url"] and env["NO_PROXY"] == ""
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO",
                "NODE_EXTRA_CA_CERTS"):
        assert env[var] == "/ca.pem"
    claims = jwt.decode(body["token"], options={"verify_signature": False})
    assert claims["sid"] == body["id"] and claims["wl"] == "persistent" and claims["exp"]
    got = gw.call("GET", f"/v1/sessions/{body['id']}").json()
    assert got["status"] == "active" and "token" not in got and got["labels"] == {"team": "a"}
    assert body["id"] in [s["id"] for s in gw.call("GET", "/v1/sessions?status=active").json()]
    patched = gw.call("PATCH", f"/v1/sessions/{body['id']}", json={"frozen": True}).json()
    assert patched["frozen"] is True


@pytest.mark.parametrize("body", [
    {"workload": "forever"}, {"allow": ["*"]}, {"allow": ["a.*.com"]}, {"allow": "pypi.org"},
    {"ttl_s": -1}, {"ttl_s": "60"}, {"secrets": ["nope"]}, {"workspace": "relative"}, {"labels": {"a": 1}},
])
def test_bad_session_bodies_400(gw, body):
    resp = gw.call("POST", "/v1/sessions", json=body)
    assert resp.status_code == 400
    assert set(resp.json()) == {"error", "detail"} and "Traceback" not in resp.text


def test_unknown_fields_are_refused_by_name_and_nothing_is_made(gw):
    before = {s["id"] for s in gw.call("GET", "/v1/sessions").json()}
    resp = gw.call("POST", "/v1/sessions", json={"lables": {"team": "a"}})
    assert resp.status_code == 400 and resp.json()["error"] == "unknown_field" and "'lables'" in resp.json()["detail"]
    assert {s["id"] for s in gw.call("GET", "/v1/sessions").json()} == before
    sid = gw.call("POST", "/v1/sessions", json={"labels": {"team": "a"}}).json()["id"]
    for method, path, body in (("PATCH", f"/v1/sessions/{sid}", {"frozen": True, "frozn": True}),
                               ("POST", "/v1/toolcalls", {"session": sid, "tool": "shell", "arg": {}}),
                               ("POST", f"/v1/sessions/{sid}/scrub", {"texts": [], "text": "x"})):
        resp = gw.call(method, path, json=body)
        assert resp.status_code == 400 and resp.json()["error"] == "unknown_field", (path, resp.text)
    assert gw.call("GET", f"/v1/sessions/{sid}").json()["frozen"] is False       # the PATCH changed nothing
    for path, code in ((f"/v1/events?sesion={sid}", "unknown_field"), ("/v1/approvals?stauts=pending", "unknown_field"),
                       ("/v1/sessions?statsu=active", "unknown_field"), ("/v1/sessions?status=activ", "bad_request"),
                       ("/v1/approvals?kind=egres", "bad_request")):
        resp = gw.call("GET", path)
        assert resp.status_code == 400 and resp.json()["error"] == code, (path, resp.text)


def test_roles_401_403(gw):
    assert requests.get(gw.api + "/v1/sessions", timeout=10).status_code == 401
    assert gw.call("GET", "/v1/sessions", "not-a-jwt").status_code == 401
    approver = gw.token("approver", "alice")
    assert gw.call("POST", "/v1/sessions", approver, json={}).status_code == 403
    sess = gw.session()
    assert gw.call("GET", "/v1/sessions", sess["token"]).status_code == 403
    expired = gw.token("harness", "old", ttl_s=-5)
    assert gw.call("GET", "/v1/sessions", expired).status_code == 401
    assert gw.call("GET", "/v1/sessions", gw.token("admin", "root")).status_code == 200


def test_bad_json_is_a_clean_error(gw):
    resp = requests.post(gw.api + "/v1/sessions", data="{nope", timeout=10,
                         headers={"Authorization": f"Bearer {gw.harness_token}"})
    assert resp.status_code == 400 and resp.json()["error"] == "bad_json"


def test_healthz_and_metrics(gw, upstream):
    health = requests.get(gw.api + "/healthz", timeout=10).json()
    assert health["status"] == "ok" and len(health["policy_rev"]) == 12
    sess = gw.session(allow=["allowed.test"])
    requests.get(f"http://allowed.test:{upstream.port}/", proxies=sess["proxies"], timeout=10)
    requests.get(f"http://other.test:{upstream.port}/", proxies=sess["proxies"], timeout=10)
    text = requests.get(gw.api + "/metrics", timeout=10).text
    assert 'sandgate_decisions_total{action="allow",kind="egress"}' in text
    assert 'sandgate_decisions_total{action="deny",kind="egress"}' in text
    assert "sandgate_proxy_request_seconds_bucket" in text and "sandgate_sessions_live" in text


def test_env_override_applies(gw):
    # SANDGATE_EGRESS__HOLD_TIMEOUT_S=7 was set for this process; an invalid override refuses to start.
    proc = subprocess.run([sys.executable, "-m", "gateway", "token", "--role", "admin", "--name", "x",
                           "--data-dir", str(gw.data_dir)], capture_output=True, text=True,
                          env={**os.environ, "SANDGATE_EGRESS__HOLD_TIMEOUT_S": "soon"}, timeout=30)
    assert proc.returncode == 2 and "configuration error" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_config_refuses_to_start(tmp_path):
    sg = Sandgate(tmp_path, {"egress": {"private_allow": ["not-a-cidr"]}})
    with pytest.raises(RuntimeError, match="configuration error"):
        sg.start()                          # it exits: the wait ends then, however slow the machine


@pytest.mark.parametrize("text, named, in_process", [
    ("[apporvals]\nquorum = 2\n", "unknown section [apporvals]", False),
    ("[egress]\nprivat_allow = [\"127.0.0.0/8\"]\n", "unknown key 'egress.privat_allow'", True),
    ("[egress]\nprivate_allow = \"127.0.0.0/8\"\n", "egress.private_allow must be a list", True),
])
def test_serve_refuses_an_unknown_or_mistyped_key_by_name(tmp_path, text, named, in_process):
    # the configuration is read before any command runs: after one `sandgate serve` process, the same
    # gateway.cli.main in this process (tests/support/cli.py; an exception escaping it fails the test)
    (tmp_path / "sandgate.toml").write_text(text)
    args = ["serve", "--config", str(tmp_path / "sandgate.toml"), "--data-dir", str(tmp_path / "data")]
    proc = run_cli(*args) if in_process else subprocess.run([sys.executable, "-m", "gateway", *args],
                                                            capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and named in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "data").exists()                 # refused before anything was made


def test_advertise_url_names_the_proxy_for_sandboxes(tmp_path):
    cfg = {**LOOPBACK_CONFIG, "proxy": {"advertise_url": "http://sandgate.internal:3128"}}
    with Sandgate(tmp_path, cfg) as sg:
        body = sg.call("POST", "/v1/sessions", json={}).json()
        assert body["proxy_url"] == f"http://sandgate:{body['token']}@sandgate.internal:3128"
        assert body["env"]["HTTPS_PROXY"] == body["proxy_url"]
