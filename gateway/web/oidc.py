"""Approver login by OIDC ID token (optional; `[web.oidc]` issuer + audience).

The issuer's discovery document names its JWKS; PyJWKClient fetches and caches the keys. Every fetch is
blocking, so verification runs in a worker thread (`asyncio.to_thread`), never on the event loop.
"""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from typing import Any, Mapping

import jwt

from gateway.config import DEFAULT_APPROVER_VALUE, OidcSettings

__all__ = ["DEFAULT_APPROVER_VALUE", "OidcError", "OidcSettings", "OidcVerifier", "claim_grants", "display_name"]

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
FETCH_TIMEOUT_S = 10


class OidcError(Exception):
    """The ID token is not acceptable (bad signature, wrong issuer/audience, expired, not an approver)."""


def claim_grants(claims: Mapping[str, Any], claim: str, value: str) -> bool:
    """True when `claims[claim]` is `value` or a list (or space-separated string) containing it."""
    got = claims.get(claim)
    if isinstance(got, str):
        return value in got.split()
    if isinstance(got, (list, tuple)):
        return value in got
    return False


def display_name(claims: Mapping[str, Any]) -> str:
    for key in ("email", "preferred_username", "sub"):
        if isinstance(claims.get(key), str) and claims[key]:
            return claims[key]
    raise OidcError("the ID token names nobody")


class OidcVerifier:
    def __init__(self, settings: OidcSettings):
        self.settings = settings
        self._client: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    def _jwks_client(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._client is None:
                url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
                with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as resp:  # noqa: S310 - configured URL
                    doc = json.loads(resp.read(1024 * 1024))
                jwks_uri = doc.get("jwks_uri")
                if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                    raise OidcError("the issuer's discovery document has no jwks_uri")
                self._client = jwt.PyJWKClient(jwks_uri, cache_keys=True, lifespan=300, timeout=FETCH_TIMEOUT_S)
            return self._client

    def verify_sync(self, token: str) -> tuple[str, float | None]:
        """(the approver's name, the token's exp), or OidcError."""
        s = self.settings
        try:
            key = self._jwks_client().get_signing_key_from_jwt(token)
            claims = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=s.audience, issuer=s.issuer,
                                options={"require": ["exp", "iss", "aud", "sub"]})
        except OidcError:
            raise
        except (jwt.PyJWTError, OSError, ValueError) as exc:
            raise OidcError(f"ID token rejected: {exc.__class__.__name__}") from None
        if not claim_grants(claims, s.approver_claim, s.approver_value):
            raise OidcError("the ID token does not grant the approver role")
        return display_name(claims), claims.get("exp")

    async def verify(self, token: str) -> tuple[str, float | None]:
        return await asyncio.to_thread(self.verify_sync, token)
