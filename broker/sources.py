"""Secret sources ("vault:MOUNT/PATH#KEY", "local:NAME", "env:VAR") and the failure every backend raises.

Pure: `parse_source` checks a source's syntax; `SecretUnavailable` carries a stable code and a
message that never contains a secret value.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

NOT_FOUND = "secret.not_found"
UNAVAILABLE = "secret.backend_unavailable"
FORBIDDEN = "secret.forbidden"
INVALID = "secret.invalid"

LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_VAULT_SEGMENT = re.compile(r"[A-Za-z0-9_.@+=-]+\Z")


class SecretUnavailable(Exception):
    """A secret could not be read. `code` is stable; `message` never contains the value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class VaultRef(NamedTuple):
    mount: str
    path: str
    key: str

    def __str__(self) -> str:
        return f"{self.mount}/{self.path}#{self.key}"


class Source(NamedTuple):
    kind: str  # "vault" | "local" | "env"
    ref: Any  # VaultRef for vault, else the name

    def __str__(self) -> str:
        return f"{self.kind}:{self.ref}"


def parse_source(text: str) -> Source:
    """"vault:MOUNT/PATH#KEY", "local:NAME" or "env:VAR" -> Source(kind, ref). ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("secret source must be a string")
    kind, sep, rest = text.strip().partition(":")
    if not sep or not rest:
        raise ValueError(f"secret source {text!r}: want vault:MOUNT/PATH#KEY, local:NAME or env:VAR")
    if kind == "vault":
        location, hash_, key = rest.partition("#")
        segments = location.split("/")
        if not hash_ or not key or len(segments) < 2:
            raise ValueError(f"secret source {text!r}: want vault:MOUNT/PATH#KEY")
        for segment in segments + [key]:
            if not _VAULT_SEGMENT.match(segment) or segment in (".", ".."):
                raise ValueError(f"secret source {text!r}: bad path segment or key {segment!r}")
        return Source("vault", VaultRef(segments[0], "/".join(segments[1:]), key))
    if kind == "local" and LOCAL_NAME.match(rest):
        return Source("local", rest)
    if kind == "env" and _ENV_NAME.match(rest):
        return Source("env", rest)
    raise ValueError(f"secret source {text!r}: want vault:MOUNT/PATH#KEY, local:NAME or env:VAR")


def checked_secret(value: Any, where: str) -> str:
    """A value read from a backend, if it is a secret (a non-empty string); else SecretUnavailable naming `where`."""
    if not isinstance(value, str) or not value:
        raise SecretUnavailable(INVALID, f"{where} is not a non-empty string")
    return value


def valid_new_secret(value: Any) -> str:
    """A value about to be stored, if it is a secret (a non-empty string); else ValueError."""
    if not isinstance(value, str) or not value:
        raise ValueError("a secret value must be a non-empty string")
    return value
