"""A small OAuth2 authorization server and the API it protects, on loopback over TLS (one server, two paths).

- `POST /token`: client_secret_basic (or client_id/client_secret in the form); `client_credentials` and
  `refresh_token` grants. Refresh tokens rotate: each use issues a new one and retires the old (a retired one is
  `invalid_grant`, as a replayed refresh token is at real providers). Access tokens are issued for `lifetime_s`
  (`expires_in`, `expires_at`) and accepted for `grace_s` longer: a test can have sandgate refresh often while a
  slow machine's late use of a token it still holds is not refused; a token a test wants refused, it expires itself
  (`expire_access_tokens`).
- `GET|POST /api/...`: 200 with the request echoed when the bearer token is current, else 401.
Everything is recorded so that tests can check what the server saw.
"""
from __future__ import annotations

import base64
import json
import secrets
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.upstream import CertPair


@dataclass
class AuthState:
    client_id: str
    client_secret: str
    lifetime_s: float
    grace_s: float = 0.0                                          # accepted this long after the announced expiry
    refresh_tokens: set[str] = field(default_factory=set)        # currently valid
    access: dict[str, float] = field(default_factory=dict)        # token -> announced expiry
    grants: list[str] = field(default_factory=list)               # grant_type of each token issued
    refused_grants: int = 0
    api_auth: list[str] = field(default_factory=list)             # Authorization headers /api saw
    api_status: list[int] = field(default_factory=list)
    token_delay_s: float = 0.0                                    # a slow token endpoint
    app_id: str = ""                                              # a GitHub App (installation tokens)
    installation_id: str = ""
    app_public_key: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new_refresh_token(self) -> str:
        token = "rt-" + secrets.token_urlsafe(24)
        with self.lock:
            self.refresh_tokens.add(token)
        return token

    def revoke_refresh_tokens(self) -> None:
        with self.lock:
            self.refresh_tokens.clear()

    def expire_access_tokens(self) -> None:
        with self.lock:
            self.access.clear()


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, doc: dict, extra: dict | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self) -> None:
        if self.path.startswith("/token"):
            return self._token()
        if self.path.startswith("/app/installations/"):
            return self._installation_token()
        return self._api()

    def _installation_token(self) -> None:
        """GitHub's POST /app/installations/ID/access_tokens: the app's JWT (RS256, iss = app id, at most ten
        minutes) in, an installation token out."""
        import jwt

        st = self.server.state
        self._body()
        auth = self.headers.get("Authorization", "")
        installation = self.path.split("/")[3]
        try:
            claims = jwt.decode(auth.removeprefix("Bearer "), st.app_public_key, algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"]})
            ok = (claims["iss"] == st.app_id and claims["exp"] - claims["iat"] <= 660
                  and installation == st.installation_id)
        except jwt.PyJWTError:
            ok = False
        if not ok:
            with st.lock:
                st.refused_grants += 1
            return self._send(401, {"message": "A JSON web token could not be decoded"})
        token = "ghs_" + secrets.token_urlsafe(27)
        expires = time.time() + st.lifetime_s
        with st.lock:
            st.access[token] = expires
            st.grants.append("github_app")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(expires)) + f"{expires % 1:.3f}"[1:] + "Z"
        self._send(201, {"token": token, "expires_at": stamp, "permissions": {"contents": "read"}})

    def do_GET(self) -> None:
        return self._api()

    def _token(self) -> None:
        st = self.server.state
        time.sleep(st.token_delay_s)
        form = dict(urllib.parse.parse_qsl(self._body().decode()))
        cid, secret = form.get("client_id"), form.get("client_secret")
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            cid, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
            cid, secret = urllib.parse.unquote(cid), urllib.parse.unquote(secret)
        if cid != st.client_id or secret != st.client_secret:
            with st.lock:
                st.refused_grants += 1
            return self._send(401, {"error": "invalid_client"})
        grant = form.get("grant_type")
        doc: dict = {}
        if grant == "refresh_token":
            with st.lock:
                ok = form.get("refresh_token") in st.refresh_tokens
                if ok:
                    st.refresh_tokens.discard(form["refresh_token"])
                else:
                    st.refused_grants += 1
            if not ok:
                return self._send(400, {"error": "invalid_grant", "error_description": "refresh token revoked"})
            doc["refresh_token"] = st.new_refresh_token()
        elif grant != "client_credentials":
            return self._send(400, {"error": "unsupported_grant_type"})
        token = "at-" + secrets.token_urlsafe(24)
        with st.lock:
            st.access[token] = time.time() + st.lifetime_s
            st.grants.append(grant)
        self._send(200, {"access_token": token, "token_type": "Bearer", "expires_in": st.lifetime_s, **doc})

    def _api(self) -> None:
        st = self.server.state
        body = self._body()
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme == "Basic":                      # git's form: x-access-token:TOKEN
            token = base64.b64decode(token).decode(errors="replace").partition(":")[2]
        elif scheme not in ("Bearer", "token"):
            token = ""
        with st.lock:
            st.api_auth.append(auth)
            ok = st.access.get(token, 0) + st.grace_s > time.time()
            st.api_status.append(200 if ok else 401)
        if not ok:
            return self._send(401, {"error": "invalid_token"}, {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        self._send(200, {"path": self.path, "authorization": auth, "body": body.decode("latin-1")})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: AuthState


class OAuthServer:
    """`with OAuthServer(cert, "cid", "csecret", lifetime_s=2) as auth:` -> auth.port, auth.state."""

    def __init__(self, cert: CertPair, client_id: str, client_secret: str, lifetime_s: float = 2,
                 grace_s: float = 0.0):
        self.state = AuthState(client_id, client_secret, lifetime_s, grace_s)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert.cert, cert.key)
        self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "OAuthServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
