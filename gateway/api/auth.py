"""Bearer-token authentication and role checks for the API."""
from __future__ import annotations

from aiohttp import web

from gateway.api.errors import ApiError
from gateway.api.state import TOKENS
from gateway.auth.tokens import AuthError, Principal


def bearer(request: web.Request) -> str | None:
    value = request.headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require(request: web.Request, *roles: str) -> Principal:
    """401 for a missing/invalid token, 403 for a valid token of another role. Admin may do everything."""
    token = bearer(request)
    if token is None:
        raise ApiError(401, "unauthorized", "a bearer token is required")
    try:
        principal = request.app[TOKENS].verify(token)
    except AuthError:
        raise ApiError(401, "unauthorized", "the token is invalid or expired") from None
    if principal.purpose is not None:
        raise ApiError(401, "unauthorized", "this token is not an API token")
    if principal.role == "admin" or principal.role in roles:
        return principal
    raise ApiError(403, "forbidden", f"a {principal.role} token may not do this")
