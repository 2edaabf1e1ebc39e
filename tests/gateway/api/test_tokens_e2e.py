"""Tokens expire and can be revoked: the CLI, the admin API, the proxy's and the page's cached logins (replicas:
tests/gateway/approvals/test_access_replicas_e2e.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import jwt
import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli as cli_in_process
from tests.support.gateway import Sandgate


def claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("tokens"), LOOPBACK_CONFIG) as sg:
        sg.admin = sg.token("admin", "root")
        yield sg


def run_cli(sg, *args, env=None):
    """A `sandgate` process (each test below runs its command once this way: the entry point, exit status and
    streams); `in_process` runs the same `gateway.cli.main` in this process for the further calls."""
    return subprocess.run([sys.executable, "-m", "gateway", *args, "--data-dir", str(sg.data_dir),
                           "--config", str(sg.config_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def in_process(sg, *args, env=None):
    return cli_in_process(*args, "--data-dir", str(sg.data_dir), "--config", str(sg.config_path), env=env)


def test_token_always_expires_default_24h_or_ttl(gw):
    now = time.time()
    out = run_cli(gw, "token", "--role", "approver", "--name", "alice")
    assert out.returncode == 0, out.stderr
    c = claims(out.stdout.strip())
    assert abs(c["exp"] - (now + 24 * 3600)) < 60 and c["jti"] in out.stderr
    c = claims(in_process(gw, "token", "--role", "harness", "--name", "h", "--ttl-s", "90").stdout.strip())
    assert abs(c["exp"] - (now + 90)) < 60
    assert in_process(gw, "token", "--role", "harness").returncode == 2          # --name missing


def test_harness_token_is_reminted_at_every_start_with_30_days(gw):
    first = gw.harness_token                     # minted by the module's sandgate as it started
    c = claims(first)
    assert abs(c["exp"] - (gw.started_at + 30 * 86400)) < 120
    gw.stop()
    gw.start()
    assert gw.harness_token != first and claims(gw.harness_token)["jti"] != c["jti"]
    assert gw.call("GET", "/v1/sessions").status_code == 200


def test_revoke_cli_refuses_a_harness_token_at_once(gw):
    harness = gw.token("harness", "ci")
    assert gw.call("GET", "/v1/sessions", harness).status_code == 200      # verified and cached
    jti = claims(harness)["jti"]
    denied = run_cli(gw, "token", "revoke", jti, "--api-url", gw.api, "--token", harness)
    assert denied.returncode == 1 and "403" in denied.stderr                 # only an admin revokes
    out = in_process(gw, "token", "revoke", jti, "--api-url", gw.api, env={"SANDGATE_TOKEN": gw.admin})
    assert out.returncode == 0, out.stderr
    assert gw.call("GET", "/v1/sessions", harness).status_code == 401
    listed = gw.call("GET", "/v1/revocations", gw.admin).json()
    assert any(r["jti"] == jti and r["revoked_by"] == "admin:root" for r in listed)
    # Revoking again is harmless; a whole token names its own id.
    assert in_process(gw, "token", "revoke", harness, "--api-url", gw.api, "--token", gw.admin).returncode == 0
    assert gw.call("POST", "/v1/revocations", gw.admin, json={"jti": ""}).status_code == 400


def test_revoked_session_token_is_refused_on_an_open_keepalive_connection(gw, upstream):
    sess = gw.session(allow=["allowed.test"])
    client = requests.Session()
    url = f"http://allowed.test:{upstream.port}/keep"
    assert client.get(url, proxies=sess["proxies"], timeout=10).status_code == 200
    r = gw.call("POST", "/v1/revocations", gw.admin, json={"jti": claims(sess["token"])["jti"]})
    assert r.status_code == 201
    assert client.get(url, proxies=sess["proxies"], timeout=10).status_code == 407
    assert requests.get(url, proxies=sess["proxies"], timeout=10).status_code == 407


def test_revoked_approver_token_ends_its_page_login(gw):
    approver = gw.token("approver", "pat")
    page = requests.Session()
    r = page.post(gw.api + "/login", data={"token": approver, "next": "/"}, allow_redirects=False)
    assert r.status_code == 303
    assert page.get(gw.api + "/", allow_redirects=False).status_code == 200
    gw.call("POST", "/v1/revocations", gw.admin, json={"jti": claims(approver)["jti"]})
    r = page.get(gw.api + "/", allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"].startswith("/login")
    r = page.post(gw.api + "/login", data={"token": approver, "next": "/"}, allow_redirects=False)
    assert r.status_code == 401 and "Set-Cookie" not in r.headers      # refused, not failed: never a 500


def test_an_expired_token_is_refused_although_it_was_cached(gw):
    # Used (and cached) while good, then refused once its exp has passed on the clock the gateway reads. A machine
    # too slow to use a 2 s token inside its life gets a longer one: the first use is tried again, never the check.
    for ttl_s in (2, 10, 30):
        short = gw.token("harness", "brief", ttl_s=ttl_s)
        first = gw.call("GET", "/v1/sessions", short)
        if first.status_code == 200 or time.time() < claims(short)["exp"]:
            break
    assert first.status_code == 200
    while time.time() <= claims(short)["exp"]:
        time.sleep(claims(short)["exp"] - time.time() + 0.05)
    assert gw.call("GET", "/v1/sessions", short).status_code == 401


# test_revocation_reaches_another_replica_within_a_second is in tests/gateway/approvals/test_access_replicas_e2e.py,
# on that module's pair of replicas
