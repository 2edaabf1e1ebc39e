"""OIDC ID-token login against a real loopback issuer (discovery document + JWKS over HTTP)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gateway.web.oidc import OidcError, OidcSettings, OidcVerifier, claim_grants
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

    def claims(self, **claims) -> dict:
        now = int(time.time())
        return {"iss": self.url, "aud": AUDIENCE, "sub": "u-1", "email": "dana@example.com", "iat": now,
                "exp": now + 600, "groups": ["staff", "sandgate-approvers"], **claims}

    def token(self, key=None, **claims) -> str:
        return jwt.encode(self.claims(**claims), key or self.key, algorithm="RS256", headers={"kid": "k1"})

    def forged(self, how: str) -> str:
        """A token with valid claims and the issuer's key id that no verifier may accept: unsigned (`alg` none,
        in any case) or HMAC-signed with the issuer's public key as the secret (key confusion)."""
        def b64url(data: bytes) -> bytes:
            return base64.urlsafe_b64encode(data).rstrip(b"=")

        alg = {"none": "none", "None": "None", "NONE": "NONE"}.get(how, "HS256")
        head = b64url(json.dumps({"alg": alg, "typ": "JWT", "kid": "k1"}).encode())
        signing_input = head + b"." + b64url(json.dumps(self.claims()).encode())
        if alg != "HS256":
            return (signing_input + b".").decode()
        public = self.key.public_key()
        secret = {"hs256-spki-pem": public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo),
                  "hs256-pkcs1-pem": public.public_bytes(Encoding.PEM, PublicFormat.PKCS1),
                  "hs256-spki-der": public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)}[how]
        return (signing_input + b"." + b64url(hmac.new(secret, signing_input, hashlib.sha256).digest())).decode()


@pytest.fixture(scope="module")
def oidc_gate(tmp_path_factory):
    issuer = Issuer()
    cfg = page_config(web={"oidc": {"issuer": issuer.url, "audience": AUDIENCE}})
    with Sandgate(tmp_path_factory.mktemp("oidc"), cfg) as gate:
        yield gate, issuer
    issuer.server.shutdown()


def try_login(gate, token: str) -> requests.Response:
    return requests.post(gate.api + "/login", data={"token": token, "next": "/"}, allow_redirects=False)


@pytest.mark.e2e
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
@pytest.mark.e2e
def test_oidc_tokens_that_never_log_in(oidc_gate, claims):
    gate, issuer = oidc_gate
    r = try_login(gate, issuer.token(**claims))
    assert r.status_code == 401 and "set-cookie" not in {k.lower() for k in r.headers}


@pytest.mark.e2e
def test_oidc_token_signed_by_another_key_is_refused(oidc_gate):
    gate, issuer = oidc_gate
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert try_login(gate, issuer.token(key=other)).status_code == 401


FORGERIES = ["none", "None", "NONE", "hs256-spki-pem", "hs256-pkcs1-pem", "hs256-spki-der"]


@pytest.mark.e2e
@pytest.mark.parametrize("how", FORGERIES)
def test_oidc_unsigned_and_key_confusion_tokens_never_log_in(oidc_gate, how):
    gate, issuer = oidc_gate
    r = try_login(gate, issuer.forged(how))
    assert r.status_code == 401 and "set-cookie" not in {k.lower() for k in r.headers}


@pytest.fixture(scope="module")
def verifier():
    issuer = Issuer()
    yield OidcVerifier(OidcSettings.from_config({"issuer": issuer.url, "audience": AUDIENCE})), issuer
    issuer.server.shutdown()


@pytest.mark.parametrize("how", FORGERIES)
def test_verifier_refuses_unsigned_and_key_confusion_tokens(verifier, how):
    """In process (no sandgate): the verifier against the loopback issuer. The same issuer's real token passes."""
    check, issuer = verifier
    assert check.verify_sync(issuer.token())[0] == "dana@example.com"
    with pytest.raises(OidcError):
        check.verify_sync(issuer.forged(how))


@pytest.mark.e2e
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
