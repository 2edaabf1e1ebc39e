"""OAuth2 access tokens minted by sandgate: the sandbox holds a placeholder bearer token; sandgate gets, caches and
refreshes the real one at the token endpoint. Real sandgate, a real OAuth2 server on loopback (rotating refresh
tokens), real clients.

Tokens are issued for an hour unless a test says otherwise, so a token sandgate holds stays fresh however slow the
machine; a test that needs sandgate to mint makes it so itself: it expires tokens at the server (sandgate learns of
it from a 401), issues them already past their refresh time, or uses a secret no test has used before. The server
accepts tokens a minute past the expiry it announced (`grace_s`): sandgate's refreshes follow the announced
lifetime, and a slow machine's late use of a token is not what these tests check."""
from __future__ import annotations

import asyncio
import http.client
import json
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from broker.local import LocalBackend
from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.oauth_server import OAuthServer
from tests.broker.test_oauth2 import app_key
from tests.support.tunnel import open_tunnel, tls_in_tunnel
from tests.support.upstream import make_cert

CLIENT_ID, CLIENT_SECRET = "sandgate-client", "cs-" + "C" * 30
NAMES = ["auth.test", "api.test", "other.test"]
LIFETIME_S = 3600.0         # what the server announces unless a test says otherwise
GRACE_S = 60.0              # how long past that the API still accepts a token
SPENT_S = 0.001             # a lifetime that is past sandgate's refresh time (a fifth before expiry) on arrival


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oauth2")
    cert = make_cert(tmp / "certs", NAMES)
    with OAuthServer(cert, CLIENT_ID, CLIENT_SECRET, lifetime_s=LIFETIME_S, grace_s=GRACE_S) as auth:
        first_refresh = auth.state.new_refresh_token()
        app_private, auth.state.app_public_key = app_key()
        auth.state.app_id, auth.state.installation_id = "4242", "99"
        gw = tmp / "gw"
        asyncio.run(LocalBackend(gw / "data").put("crm_refresh", first_refresh, []))
        asyncio.run(LocalBackend(gw / "data").put("late_refresh", auth.state.new_refresh_token(), []))
        token_url = f"https://auth.test:{auth.port}/token"
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert,
                          "resolve": {n: ["127.0.0.1"] for n in NAMES}},
               "secrets": {
                   "crm": {"kind": "oauth2", "token_url": token_url, "grant": "refresh_token",
                           "client_id": "env:SG_CLIENT_ID", "client_secret": "env:SG_CLIENT_SECRET",
                           "refresh_token": "local:crm_refresh", "hosts": ["api.test"]},
                   "svc": {"kind": "oauth2", "token_url": token_url, "client_id": "env:SG_CLIENT_ID",
                           "client_secret": "env:SG_CLIENT_SECRET", "hosts": ["api.test"], "env": "SVC_TOKEN"},
                   # used by one test each: the first call with them mints
                   "slow": {"kind": "oauth2", "token_url": token_url, "client_id": "env:SG_CLIENT_ID",
                            "client_secret": "env:SG_CLIENT_SECRET", "hosts": ["api.test"], "env": "SLOW_TOKEN"},
                   "late": {"kind": "oauth2", "token_url": token_url, "grant": "refresh_token",
                            "client_id": "env:SG_CLIENT_ID", "client_secret": "env:SG_CLIENT_SECRET",
                            "refresh_token": "local:late_refresh", "hosts": ["api.test"], "env": "LATE_TOKEN"},
                   "gh": {"kind": "github_app", "app_id": 4242, "installation_id": 99, "private_key": "env:SG_GH_KEY",
                          "api_url": f"https://auth.test:{auth.port}", "hosts": ["api.test"], "env": "GH_TOKEN"},
               }}
        environ = {"SG_CLIENT_ID": CLIENT_ID, "SG_CLIENT_SECRET": CLIENT_SECRET, "SG_GH_KEY": app_private}
        with Sandgate(gw, cfg, env=environ) as sg:
            yield sg, auth, first_refresh
        secrets_seen = [CLIENT_SECRET, first_refresh, *auth.state.access,
                        "".join(app_private.splitlines()[1:3])]          # a piece of the app's private key
        for path in Path(gw).rglob("*"):
            if path.is_file() and path.name != "secrets.json":      # the local store holds the refresh token
                data = path.read_bytes()
                for value in secrets_seen:
                    assert value.encode() not in data, f"a real token or secret in {path}"


@contextmanager
def issued(auth, lifetime_s: float, grace_s: float = GRACE_S):
    """Tokens issued inside the block announce `lifetime_s` and are accepted `grace_s` past it."""
    auth.state.lifetime_s, auth.state.grace_s = lifetime_s, grace_s
    try:
        yield
    finally:
        auth.state.lifetime_s, auth.state.grace_s = LIFETIME_S, GRACE_S


def session(sg, *secrets):
    return sg.session(allow=["api.test", "other.test"], secrets=list(secrets))


def call(sess, url, placeholder, **kw):
    return requests.get(url, headers={"Authorization": f"Bearer {placeholder}"}, proxies=sess["proxies"],
                        verify=sess["ca_file"], timeout=20, **kw)


def test_twenty_calls_over_ten_seconds_all_succeed_across_refreshes(env):
    sg, auth, first_refresh = env
    sess = session(sg, "crm")
    ph = sess["env"]["CRM"]
    assert ph and ph not in auth.state.access
    grants_before, calls_before = len(auth.state.grants), len(auth.state.api_status)
    statuses, bodies = [], []
    with issued(auth, lifetime_s=2), requests.Session() as client:
        for _ in range(20):
            resp = client.get(f"https://api.test:{auth.port}/api/things", headers={"Authorization": f"Bearer {ph}"},
                              proxies=sess["proxies"], verify=sess["ca_file"], timeout=20)
            statuses.append(resp.status_code)
            bodies.append(resp.text)
            time.sleep(0.5)
    assert statuses == [200] * 20, statuses
    refreshes = auth.state.grants[grants_before:]
    # tokens announce 2 s (used for 1.6 s), the calls span at least 9.5 s: six tokens or more, each minted ahead
    # of its use, never after the API refused one (accepted a minute late, so no 401 on a slow machine either)
    assert len(refreshes) >= 4 and set(refreshes) == {"refresh_token"}
    assert auth.state.api_status[calls_before:] == [200] * 20
    # the API saw only real tokens, the sandbox only its placeholder (echoed back, scrubbed)
    seen = auth.state.api_auth[-20:]
    assert all(a.startswith("Bearer at-") for a in seen) and not any(ph in a for a in seen)
    assert all(f"Bearer {ph}" in body and "at-" not in body for body in bodies)
    # the rotated refresh token went back to its (writable) source: the local store holds the current one
    stored = asyncio.run(LocalBackend(sg.data_dir).get("crm_refresh"))
    assert stored != first_refresh and stored in auth.state.refresh_tokens


def test_client_credentials_and_the_placeholder_only_to_bound_hosts_over_tls(env):
    sg, auth, _ = env
    sess = session(sg, "svc")
    ph = sess["env"]["SVC_TOKEN"]
    resp = call(sess, f"https://api.test:{auth.port}/api/x", ph)
    assert resp.status_code == 200 and "client_credentials" in auth.state.grants
    # another host: the placeholder blocks the request (and is an exfiltration event)
    auth.state.api_auth.clear()
    resp = call(sess, f"https://other.test:{auth.port}/api/x", ph)
    assert resp.status_code == 403 and resp.json()["code"] == "secret.exfiltration"
    assert auth.state.api_auth == []


def test_an_upstream_401_refreshes_the_token_and_retries_once(env):
    sg, auth, _ = env
    sess = session(sg, "svc")
    ph = sess["env"]["SVC_TOKEN"]
    assert call(sess, f"https://api.test:{auth.port}/api/warm", ph).status_code == 200
    grants = len(auth.state.grants)
    auth.state.expire_access_tokens()                 # revoked early: sandgate's cached token is still "fresh"
    auth.state.api_status.clear()
    resp = requests.post(f"https://api.test:{auth.port}/api/retry", data=b"payload=1",
                         headers={"Authorization": f"Bearer {ph}"}, proxies=sess["proxies"], verify=sess["ca_file"],
                         timeout=20)
    assert resp.status_code == 200, resp.text
    assert auth.state.api_status == [401, 200] and len(auth.state.grants) == grants + 1
    assert resp.json()["body"] == "payload=1" and resp.json()["authorization"] == f"Bearer {ph}"   # scrubbed
    # a retry that is refused again is passed on (once: no loop): the token it mints is expired on issue
    auth.state.expire_access_tokens()
    auth.state.api_status.clear()
    with issued(auth, lifetime_s=SPENT_S, grace_s=-1.0):
        resp = call(sess, f"https://api.test:{auth.port}/api/again", ph)
    assert resp.status_code == 401 and auth.state.api_status == [401, 401]
    assert "at-" not in resp.text


def test_the_retry_answers_a_client_that_offered_http2_too(env):
    """A client offering h2 gets the upstream's own protocol (this API speaks HTTP/1.1 and names no ALPN, so
    neither does the client's TLS), and the retry after the 401 answers it."""
    sg, auth, _ = env
    sess = session(sg, "svc")
    ph = sess["env"]["SVC_TOKEN"]
    assert call(sess, f"https://api.test:{auth.port}/api/warm", ph).status_code == 200
    auth.state.expire_access_tokens()
    auth.state.api_status.clear()
    with open_tunnel(sg.proxy_port, sess["token"], f"api.test:{auth.port}") as sock:
        tls = tls_in_tunnel(sock, sess["ca_file"], "api.test", alpn=["h2", "http/1.1"])
        assert tls.selected_alpn_protocol() in (None, "http/1.1")        # the upstream's: it offers no h2
        tls.sendall(f"GET /api/h2 HTTP/1.1\r\nHost: api.test:{auth.port}\r\nAuthorization: Bearer {ph}\r\n"
                    f"Connection: close\r\n\r\n".encode())
        answer = http.client.HTTPResponse(tls)          # chunked: read as a client would
        answer.begin()
        body = answer.read()
    assert answer.status == 200 and auth.state.api_status == [401, 200]
    assert json.loads(body)["authorization"] == f"Bearer {ph}"


def test_a_streamed_request_is_not_replayed_but_the_next_one_gets_a_fresh_token(env):
    sg, auth, _ = env
    sess = session(sg, "svc")
    ph = sess["env"]["SVC_TOKEN"]
    assert call(sess, f"https://api.test:{auth.port}/api/warm", ph).status_code == 200
    auth.state.expire_access_tokens()
    auth.state.api_status.clear()
    big = b"x" * (2 * 1024 * 1024)                    # above inspect_max_bytes: streamed, cannot be replayed
    resp = requests.post(f"https://api.test:{auth.port}/api/upload", data=big,
                         headers={"Authorization": f"Bearer {ph}"}, proxies=sess["proxies"], verify=sess["ca_file"],
                         timeout=30)
    assert resp.status_code == 401 and auth.state.api_status == [401]
    assert call(sess, f"https://api.test:{auth.port}/api/next", ph).status_code == 200


def test_github_app_installation_tokens_in_every_form_git_and_the_api_use(env):
    sg, auth, _ = env
    sess = session(sg, "gh")
    ph = sess["env"]["GH_TOKEN"]
    url = f"https://api.test:{auth.port}/api/repos"
    for auth_header in (f"token {ph}", f"Bearer {ph}"):
        resp = requests.get(url, headers={"Authorization": auth_header}, proxies=sess["proxies"],
                            verify=sess["ca_file"], timeout=20)
        assert resp.status_code == 200 and resp.json()["authorization"] == auth_header     # scrubbed back
    resp = requests.get(url, auth=("x-access-token", ph), proxies=sess["proxies"], verify=sess["ca_file"], timeout=20)
    assert resp.status_code == 200                                   # git's Basic form
    assert auth.state.grants.count("github_app") == 1 and auth.state.refused_grants == 0
    assert all("ghs_" in a or a.startswith("Basic ") for a in auth.state.api_auth[-3:])


def test_a_slow_token_endpoint_is_waited_for(env):
    sg, auth, _ = env
    sess = session(sg, "slow")                        # no test used it before: this call mints
    ph = sess["env"]["SLOW_TOKEN"]
    grants = len(auth.state.grants)
    auth.state.token_delay_s = 4.0                    # longer than a secret store lookup may take
    try:
        assert call(sess, f"https://api.test:{auth.port}/api/slow", ph).status_code == 200
    finally:
        auth.state.token_delay_s = 0.0
    assert auth.state.grants[grants:] == ["client_credentials"]


def test_a_revoked_refresh_token_is_a_clear_502_and_never_the_placeholder_upstream(env):
    sg, auth, _ = env
    sess = session(sg, "late")
    ph = sess["env"]["LATE_TOKEN"]
    with issued(auth, lifetime_s=SPENT_S):            # the access token sandgate keeps is past its refresh time
        assert call(sess, f"https://api.test:{auth.port}/api/before-revoke", ph).status_code == 200
    assert auth.state.grants[-1] == "refresh_token"   # ... and the refresh token it keeps is a rotated one
    auth.state.revoke_refresh_tokens()
    auth.state.api_auth.clear()
    resp = call(sess, f"https://api.test:{auth.port}/api/after-revoke", ph)
    assert resp.status_code == 502
    assert resp.json()["code"] == "secret.refresh_failed"
    assert auth.state.api_auth == []                  # the API was never asked, least of all with the placeholder
    assert CLIENT_SECRET not in resp.text
