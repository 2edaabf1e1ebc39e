"""OIDC ID-token login against a real loopback issuer (discovery document + JWKS over HTTP)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.web.oidc import OidcSettings, claim_grants
from tests.gateway.web.conftest import page_config, parse_html
from tests.support.gateway import Sandgate

AUDIENCE = "sandgate-page"


class Issuer:
    """A minimal OpenID provider: /.well-known/openid-configuration and /jwks.json, one RSA key."""

    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                docs = {"/.well-known/openid-configuration": {"issuer": issuer.url,
                                                              "jwks_uri": issuer.url + "/jwks.json"},
                        "/jwks.json": jwks}
                body = json.dumps(docs.get(self.path, {})).encode()
                self.send_response(200 if self.path in docs else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, key=None, **claims) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "u-1", "email": "dana@example.com", "iat": now,
                "exp": now + 600, "groups": ["staff", "sandgate-approvers"], **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def oidc_gate(tmp_path_factory):
    issuer = Issuer()
    cfg = page_config(web={"oidc": {"issuer": issuer.url, "audience": AUDIENCE}})
    with Sandgate(tmp_path_factory.mktemp("oidc"), cfg) as gate:
        yield gate, issuer
    issuer.server.shutdown()


def try_login(gate, token: str) -> requests.Response:
    return requests.post(gate.api + "/login", data={"token": token, "next": "/"}, allow_redirects=False)


def test_oidc_approver_logs_in(oidc_gate):
    gate, issuer = oidc_gate
    s = requests.Session()
    r = s.post(gate.api + "/login", data={"token": issuer.token(), "next": "/history"}, allow_redirects=False)
    assert r.status_code == 303 and r.headers["Location"] == "/history"
    doc = parse_html(s.get(gate.api + "/").text)
    assert doc.find("span", **{"class": "who"}).text().strip() == "Signed in as approver:dana@example.com"


@pytest.mark.parametrize("claims", [
    {"groups": ["staff"]},                        # not in the approvers group
    {"aud": "someone-else"},                      # minted for another relying party
    {"iss": "http://127.0.0.1:1"},                # another issuer
    {"exp": int(time.time()) - 60},               # expired
])
def test_oidc_tokens_that_never_log_in(oidc_gate, claims):
    gate, issuer = oidc_gate
    r = try_login(gate, issuer.token(**claims))
    assert r.status_code == 401 and "set-cookie" not in {k.lower() for k in r.headers}


def test_oidc_token_signed_by_another_key_is_refused(oidc_gate):
    gate, issuer = oidc_gate
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert try_login(gate, issuer.token(key=other)).status_code == 401


def test_sandgate_tokens_still_work_next_to_oidc(oidc_gate):
    gate, _ = oidc_gate
    assert try_login(gate, gate.token("approver", "erin")).status_code == 303
    assert try_login(gate, gate.harness_token).status_code == 401


@pytest.mark.parametrize("claims, ok", [
    ({"groups": ["a", "sandgate-approvers"]}, True),
    ({"groups": "a sandgate-approvers"}, True),
    ({"groups": ["sandgate-approvers-2"]}, False),
    ({"groups": {"sandgate-approvers": True}}, False),
    ({}, False),
])
def test_claim_grants(claims, ok):
    assert claim_grants(claims, "groups", "sandgate-approvers") is ok


def test_settings_need_issuer_and_audience():
    assert OidcSettings.from_config({"issuer": "https://id.example", "audience": ""}) is None
    s = OidcSettings.from_config({"issuer": "https://id.example/", "audience": "x", "approver_value": ""})
    assert s.approver_value == "sandgate-approvers" and s.approver_claim == "groups"
