"""Tokens: signed JWTs (HS256, the data dir's key) for harness, approver, admin and session principals."""
from __future__ import annotations

import os
import secrets
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import jwt

ROLES = ("harness", "approver", "admin", "session")
ISSUER = "sandgate"
_ALG = "HS256"


class AuthError(Exception):
    """The token is missing, malformed, expired or not signed by us."""


@dataclass(frozen=True)
class Principal:
    role: str
    name: str
    session_id: str | None = None
    workload: str | None = None
    jti: str | None = None
    exp: float | None = None
    purpose: str | None = None          # "page" for approval-page cookies (never accepted by the API)

    @property
    def ident(self) -> str:
        return f"{self.role}:{self.name}"


def write_private(path: Path, data: bytes) -> None:
    """Create `path` with mode 0600 (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, 0o600)


def load_or_create_key(data_dir: Path) -> bytes:
    path = data_dir / "signing.key"
    if path.exists():
        key = path.read_bytes().strip()
        if len(key) < 32:
            raise ValueError(f"{path} is too short to be a signing key")
        return key
    key = secrets.token_hex(32).encode()
    write_private(path, key)
    return key


class TokenSigner:
    def __init__(self, key: bytes):
        self._key = key

    def mint(self, role: str, name: str, ttl_s: float | None = None, *, session_id: str | None = None,
             workload: str | None = None, now: float | None = None, purpose: str | None = None) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        now = time.time() if now is None else now
        claims = {"iss": ISSUER, "role": role, "sub": name, "iat": int(now), "jti": uuid.uuid4().hex}
        if ttl_s is not None:
            claims["exp"] = int(now + ttl_s)
        if purpose is not None:
            claims["pur"] = purpose
        if session_id is not None:
            claims["sid"] = session_id
            claims["wl"] = workload
        return jwt.encode(claims, self._key, algorithm=_ALG)

    def verify(self, token: str) -> Principal:
        try:
            claims = jwt.decode(token, self._key, algorithms=[_ALG], issuer=ISSUER,
                                options={"require": ["iss", "role", "sub"]})
        except jwt.PyJWTError as exc:
            raise AuthError(str(exc)) from None
        role = claims.get("role")
        if role not in ROLES or (role == "session" and not claims.get("sid")):
            raise AuthError("bad role claim")
        return Principal(role=role, name=str(claims["sub"]), session_id=claims.get("sid"),
                         workload=claims.get("wl"), jti=claims.get("jti"), exp=claims.get("exp"),
                         purpose=claims.get("pur"))
