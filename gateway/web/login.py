"""Page sessions: who may log in, and the signed cookie that carries the login.

The cookie holds a short-lived sandgate JWT minted by the gateway's signer for the same role and name as the
token that logged in, expiring at min(that token's exp, now + 12 h). Nothing is kept server-side except the
ids of sessions that logged out: revoked in the store like any token, so a logout holds on every replica and
across restarts, while a restart keeps everyone else logged in.
The JWT's `jti` is the per-login CSRF token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from aiohttp import web

from gateway.auth.tokens import AuthError, Principal, TokenSigner, TokenVerifier
from gateway.auth.revocations import RevocationService
from gateway.web.oidc import OidcError, OidcVerifier

PAGE_ROLES = ("approver", "admin")
MAX_SESSION_S = 12 * 3600
COOKIE = "sandgate_page"
SECURE_COOKIE = "__Host-sandgate_page"


class LoginError(Exception):
    """Shown to the person at the login form (never carries token contents)."""


@dataclass(frozen=True)
class PageUser:
    principal: Principal
    csrf: str

    @property
    def ident(self) -> str:
        return self.principal.ident


def session_ttl(token_exp: float | None, now: float) -> float:
    """Seconds the page session may live: until the token expires, at most 12 h."""
    end = now + MAX_SESSION_S if token_exp is None else min(float(token_exp), now + MAX_SESSION_S)
    return end - now


class PageSessions:
    def __init__(self, tokens: TokenVerifier, signer: TokenSigner, oidc: OidcVerifier | None,
                 revocations: RevocationService):
        self._tokens = tokens
        self._revocations = revocations
        self._signer = signer
        self.oidc = oidc
        self._revoked: dict[str, float] = {}

    async def login(self, token: str, now: float) -> tuple[str, float]:
        """Check a pasted token; return (cookie value, max age). LoginError for anything but an approver."""
        token = token.strip()
        if not token:
            raise LoginError("Paste an approver token.")
        try:
            p = self._tokens.verify(token)
        except AuthError:
            p = None
        source_jti = None
        if p is not None:
            if p.role not in PAGE_ROLES or p.purpose is not None:
                raise LoginError("This token may not log in here: use an approver or admin token.")
            role, name, exp, source_jti = p.role, p.name, p.exp, p.jti
        elif self.oidc is not None:
            try:
                name, exp = await self.oidc.verify(token)
            except OidcError:
                raise LoginError("The token is invalid or expired.") from None
            role = "approver"
        else:
            raise LoginError("The token is invalid or expired.")
        ttl = session_ttl(exp, now)
        if ttl <= 0:
            raise LoginError("The token is invalid or expired.")
        # exp is a whole second: the small pad keeps int(now + ttl) from landing a second early.
        # A revoked source token ends the page session too (the cookie names it).
        return self._signer.mint(role, name, ttl + 1e-3, now=now, purpose="page", source_jti=source_jti), ttl

    def user(self, request: web.Request) -> PageUser | None:
        value = request.cookies.get(SECURE_COOKIE) or request.cookies.get(COOKIE)
        if not value:
            return None
        try:
            p = self._tokens.verify(value)
        except AuthError:
            return None
        if (p.role not in PAGE_ROLES or p.purpose != "page" or p.exp is None or not p.jti
                or p.jti in self._revoked):
            return None
        return PageUser(p, p.jti)

    async def logout(self, user: PageUser) -> None:
        """End this login here at once, then on every replica: the cookie's token id is revoked like any token
        (stored, and notified to the other replicas and workers). Raises StoreError when it cannot be stored."""
        now = time.time()
        self._revoked = {j: e for j, e in self._revoked.items() if e > now}
        self._revoked[user.csrf] = float(user.principal.exp or now + MAX_SESSION_S)
        await self._revocations.revoke(user.csrf, user.ident)


def set_cookie(resp: web.StreamResponse, request: web.Request, value: str, max_age: float) -> None:
    name = SECURE_COOKIE if request.secure else COOKIE
    resp.set_cookie(name, value, max_age=max(1, int(max_age)), path="/", httponly=True, samesite="Strict",
                    secure=request.secure)


def clear_cookie(resp: web.StreamResponse, request: web.Request) -> None:
    for name in (COOKIE, SECURE_COOKIE):
        if name in request.cookies:
            resp.del_cookie(name, path="/", secure=name == SECURE_COOKIE, httponly=True, samesite="Strict")
