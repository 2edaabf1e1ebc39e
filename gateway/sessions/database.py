"""A session's login to the PostgreSQL gateway (gateway/postgres/): its user name, its placeholder password
(handed to the sandbox once, never stored), the SCRAM-SHA-256 verifier sandgate keeps to check it (and the
server side of that exchange), the URL the sandbox connects with. Pure."""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

ITERATIONS = 4096


@functools.cache
def _mechanism() -> Any:
    """scramp's SCRAM-SHA-256, loaded by the first session given a database (scramp and asn1crypto are not
    imported by every start)."""
    from scramp import ScramMechanism

    return ScramMechanism("SCRAM-SHA-256")


@dataclass(frozen=True)
class Verifier:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        return {"salt": base64.b64encode(self.salt).decode(), "stored_key": base64.b64encode(self.stored_key).decode(),
                "server_key": base64.b64encode(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, doc: dict) -> "Verifier":
        return cls(base64.b64decode(doc["salt"]), base64.b64decode(doc["stored_key"]),
                   base64.b64decode(doc["server_key"]), int(doc["iterations"]))


def new_password() -> str:
    return "sgpg_" + secrets.token_urlsafe(24)


def make_verifier(password: str) -> Verifier:
    return Verifier(*_mechanism().make_auth_info(password, iteration_count=ITERATIONS))


def __getattr__(name: str) -> Any:
    """DUMMY, what an unknown user is checked against (the exchange runs its course and fails, as for a wrong
    password): made once, by the first import of it (the PostgreSQL gateway's), not by every start (PEP 562)."""
    if name != "DUMMY":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    dummy = globals()["DUMMY"] = make_verifier(secrets.token_urlsafe(24))
    return dummy


def database_url(user: str, password: str, advertise: str, name: str, ca_path: str) -> str:
    return (f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{advertise}/{quote(name, safe='')}"
            f"?sslmode=verify-full&sslrootcert={quote(ca_path, safe='/')}")


class ScramError(Exception):
    """A SCRAM exchange that fails: wrong password, or a malformed message."""


class ScramServer:
    """The server side of SCRAM-SHA-256 as PostgreSQL runs it (RFC 5802, 7677): the user name inside the
    exchange is ignored (libpq sends it empty; the start-up packet names the user), no channel binding offered."""

    def __init__(self, verifier: Verifier) -> None:
        self._v = verifier
        self._first_bare = self._server_first = self._gs2 = self._nonce = ""
        self._signature = b""

    def client_first(self, message: str) -> str:
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1] != "":
            raise ScramError("unsupported GS2 header (channel binding is not offered)")
        self._gs2 = parts[0] + ",,"
        self._first_bare = parts[2]
        attrs = dict(a.split("=", 1) for a in self._first_bare.split(",") if "=" in a)
        cnonce = attrs.get("r", "")
        if not cnonce or any(c in cnonce for c in ", "):
            raise ScramError("missing client nonce")
        self._nonce = cnonce + base64.b64encode(secrets.token_bytes(18)).decode()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._v.salt).decode()},"
                              f"i={self._v.iterations}")
        return self._server_first

    def client_final(self, message: str) -> str:
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        if not sep:
            raise ScramError("missing proof")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode() or attrs.get("r") != self._nonce:
            raise ScramError("channel binding or nonce mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise ScramError("malformed proof") from None
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.new(self._v.stored_key, auth, hashlib.sha256).digest()
        if len(proof) != len(client_signature):
            raise ScramError("malformed proof")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self._v.stored_key):
            raise ScramError("wrong password")
        self._signature = hmac.new(self._v.server_key, auth, hashlib.sha256).digest()
        return "v=" + base64.b64encode(self._signature).decode()
