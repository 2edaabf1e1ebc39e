"""Tokens: signed JWTs (HS256, the data dir's key) for harness, approver, admin and session principals."""
from __future__ import annotations

import os
import secrets
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import jwt

if TYPE_CHECKING:          # an annotation only: importing gateway.store loads SQLAlchemy into every CLI command
    from gateway.store.records import Revocation

ROLES = ("harness", "approver", "admin", "session")
ISSUER = "sandgate"
_ALG = "HS256"
DEFAULT_TTL_S = 24 * 3600               # `sandgate token` without --ttl-s
HARNESS_TOKEN_TTL_S = 30 * 24 * 3600    # DATA_DIR/harness.token, re-minted at every start


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
    source_jti: str | None = None       # a page cookie: the jti of the token that logged in

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

    def mint(self, role: str, name: str, ttl_s: float = DEFAULT_TTL_S, *, session_id: str | None = None,
             workload: str | None = None, now: float | None = None, purpose: str | None = None,
             source_jti: str | None = None) -> str:
        """A signed token; it always expires (`exp` = now + ttl_s)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        now = time.time() if now is None else now
        claims = {"iss": ISSUER, "role": role, "sub": name, "iat": int(now), "jti": uuid.uuid4().hex,
                  "exp": int(now + ttl_s)}
        if purpose is not None:
            claims["pur"] = purpose
        if source_jti is not None:
            claims["src"] = source_jti
        if session_id is not None:
            claims["sid"] = session_id
            claims["wl"] = workload
        return jwt.encode(claims, self._key, algorithm=_ALG)

    def verify(self, token: str) -> Principal:
        try:
            claims = jwt.decode(token, self._key, algorithms=[_ALG], issuer=ISSUER,
                                options={"require": ["iss", "role", "sub", "exp", "jti"]})
        except jwt.PyJWTError as exc:
            raise AuthError(str(exc)) from None
        role = claims.get("role")
        if role not in ROLES or (role == "session" and not claims.get("sid")):
            raise AuthError("bad role claim")
        return Principal(role=role, name=str(claims["sub"]), session_id=claims.get("sid"),
                         workload=claims.get("wl"), jti=str(claims["jti"]), exp=float(claims["exp"]),
                         purpose=claims.get("pur"), source_jti=claims.get("src"))


class Revocations:
    """Revoked token ids (`jti`), mirrored from the store (`merge` takes rows newer than `last_id`)."""

    def __init__(self) -> None:
        self._jtis: set[str] = set()
        self.last_id = 0

    def add(self, jti: str) -> None:
        self._jtis.add(jti)

    def merge(self, rows: Iterable[Revocation]) -> None:
        for row in rows:
            self._jtis.add(row.jti)
            self.last_id = max(self.last_id, int(row.id or 0))

    def revoked(self, principal: Principal) -> bool:
        return principal.jti in self._jtis or (principal.source_jti is not None and principal.source_jti in self._jtis)

    def __len__(self) -> int:
        return len(self._jtis)


class TokenVerifier:
    """Verify tokens: the signature once per token (bounded cache), expiry and revocation on every use."""

    def __init__(self, signer: TokenSigner, revocations: Revocations, cache_size: int = 4096):
        self.signer = signer
        self.revocations = revocations
        self._cache: OrderedDict[str, Principal] = OrderedDict()
        self._cache_size = cache_size

    def verify(self, token: str, now: float | None = None) -> Principal:
        principal = self._cache.get(token)
        if principal is None:
            principal = self.signer.verify(token)
            self._cache[token] = principal
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self.check(principal, now)
        return principal

    def check(self, principal: Principal, now: float | None = None) -> None:
        """AuthError if the (already verified) principal has expired or was revoked."""
        now = time.time() if now is None else now
        if principal.exp is None or principal.exp <= now:
            raise AuthError("the token has expired")
        if self.revocations.revoked(principal):
            raise AuthError("the token was revoked")


MAX_TOKEN_FILE_BYTES = 16 * 1024


def read_harness_token_file(path: Path, signer: TokenSigner) -> str:
    """The harness token in `api.harness_token_file`: a token this data dir's key signed for the `harness` role,
    not expired (the harness uses it instead of DATA_DIR/harness.token). ValueError saying what is wrong."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"api.harness_token_file: cannot read {path}: {exc.strerror or exc}") from None
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        token = ""
    if not token or len(data) > MAX_TOKEN_FILE_BYTES:
        raise ValueError(f"api.harness_token_file: {path} does not hold a token")
    try:
        principal = signer.verify(token)
    except AuthError as exc:
        raise ValueError(f"api.harness_token_file: the token in {path} is not valid here ({exc}; mint one with "
                         "`sandgate token --role harness` and this data dir)") from None
    if principal.role != "harness" or principal.purpose is not None:
        raise ValueError(f"api.harness_token_file: the token in {path} is not a harness token "
                         f"(role {principal.role})")
    return token
