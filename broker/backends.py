"""Secret backends (Vault/OpenBao KV v2, a local encrypted file, the environment) and a TTL cache.

Thin I/O adapters. Every blocking call (hvac, file access) runs in a worker thread
via `asyncio.to_thread`, so the event loop never waits on it. Every failure is a
`SecretUnavailable` with a stable code; no message ever carries a secret value.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets as pysecrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, Protocol

NOT_FOUND = "secret.not_found"
UNAVAILABLE = "secret.backend_unavailable"
FORBIDDEN = "secret.forbidden"
INVALID = "secret.invalid"

_LOCAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
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
    if kind == "local" and _LOCAL_NAME.match(rest):
        return Source("local", rest)
    if kind == "env" and _ENV_NAME.match(rest):
        return Source("env", rest)
    raise ValueError(f"secret source {text!r}: want vault:MOUNT/PATH#KEY, local:NAME or env:VAR")


class Backend(Protocol):
    async def get(self, ref: Any) -> str: ...


def _checked(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise SecretUnavailable(INVALID, f"{where} is not a non-empty string")
    return value


def _new_value(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("a secret value must be a non-empty string")
    return value


# ---------------------------------------------------------------- Vault / OpenBao

class VaultBackend:
    """KV v2 reads through hvac. Constructor values fall back to VAULT_ADDR, VAULT_TOKEN,
    VAULT_NAMESPACE, VAULT_CACERT; AppRole login when role_id and secret_id are given."""

    def __init__(self, url: str | None = None, token: str | None = None, namespace: str | None = None,
                 ca_cert: str | None = None, role_id: str | None = None, secret_id: str | None = None,
                 *, timeout_s: float = 3.0, approle_mount: str = "approle",
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.url = url or env.get("VAULT_ADDR", "")
        self.namespace = namespace or env.get("VAULT_NAMESPACE") or None
        self.ca_cert = ca_cert or env.get("VAULT_CACERT") or None
        self._token = token or env.get("VAULT_TOKEN", "")
        self._role_id, self._secret_id = role_id or "", secret_id or ""
        self.timeout_s = timeout_s
        self.approle_mount = approle_mount
        self._lock = threading.Lock()
        self._client_obj: Any = None
        if not self.url:
            raise ValueError("vault: no url ([vault] url or VAULT_ADDR)")
        if not self._token and not (self._role_id and self._secret_id):
            raise ValueError("vault: no token ([vault] token or VAULT_TOKEN) and no AppRole role_id/secret_id")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> VaultBackend:
        cfg = cfg or {}
        keys = ("url", "token", "namespace", "ca_cert", "role_id", "secret_id")
        return cls(**{k: (cfg.get(k) or None) for k in keys}, environ=environ)

    @property
    def uses_approle(self) -> bool:
        return bool(self._role_id and self._secret_id)

    def _client(self, relogin: bool = False) -> Any:
        import hvac

        with self._lock:
            if self._client_obj is None or relogin:
                client = hvac.Client(url=self.url, token=self._token or None, namespace=self.namespace,
                                     verify=self.ca_cert or True, timeout=self.timeout_s)
                if self.uses_approle:
                    client.auth.approle.login(role_id=self._role_id, secret_id=self._secret_id,
                                              mount_point=self.approle_mount)
                self._client_obj = client
            return self._client_obj

    def _call(self, ref: VaultRef, action: Callable[[Any], Any]) -> Any:
        import hvac.exceptions as hx
        import requests

        try:
            try:
                return action(self._client())
            except (hx.Forbidden, hx.Unauthorized):
                if not self.uses_approle:
                    raise
                return action(self._client(relogin=True))  # the AppRole token may have expired
        except hx.InvalidPath:
            raise SecretUnavailable(NOT_FOUND, f"vault: no secret at {ref.mount}/{ref.path}") from None
        except (hx.Forbidden, hx.Unauthorized) as exc:
            raise SecretUnavailable(FORBIDDEN, f"vault: access to {ref.mount}/{ref.path} refused "
                                               f"({type(exc).__name__})") from None
        except (hx.VaultError, requests.RequestException, OSError, ValueError) as exc:
            raise SecretUnavailable(UNAVAILABLE, f"vault: {type(exc).__name__} reading {ref.mount}/{ref.path}") from None

    def _read(self, ref: VaultRef) -> str:
        def read(client: Any) -> Any:
            return client.secrets.kv.v2.read_secret_version(
                path=ref.path, mount_point=ref.mount, raise_on_deleted_version=True)

        response = self._call(ref, read)
        try:
            data = response["data"]["data"]
        except (KeyError, TypeError):
            raise SecretUnavailable(UNAVAILABLE, f"vault: unexpected response for {ref.mount}/{ref.path}") from None
        if not isinstance(data, Mapping) or ref.key not in data:
            raise SecretUnavailable(NOT_FOUND, f"vault: no key {ref.key!r} at {ref.mount}/{ref.path}")
        return _checked(data[ref.key], f"vault: {ref}")

    def _write(self, ref: VaultRef, value: str) -> None:
        try:
            current = dict(self._call(ref, lambda c: c.secrets.kv.v2.read_secret_version(
                path=ref.path, mount_point=ref.mount, raise_on_deleted_version=False))["data"]["data"] or {})
        except SecretUnavailable as exc:
            if exc.code != NOT_FOUND:
                raise
            current = {}
        current[ref.key] = value
        self._call(ref, lambda c: c.secrets.kv.v2.create_or_update_secret(
            path=ref.path, secret=current, mount_point=ref.mount))

    async def get(self, ref: VaultRef | str) -> str:
        ref = ref if isinstance(ref, VaultRef) else parse_source(f"vault:{ref}").ref
        return await asyncio.to_thread(self._read, ref)

    async def put(self, ref: VaultRef | str, value: str) -> None:
        """Set one key of a KV v2 secret, keeping its other keys (tests, tooling)."""
        ref = ref if isinstance(ref, VaultRef) else parse_source(f"vault:{ref}").ref
        await asyncio.to_thread(self._write, ref, _new_value(value))


# ---------------------------------------------------------------- local encrypted file

class LocalBackend:
    """Secrets in DATA_DIR/secrets.json (mode 0600), each value Fernet-encrypted with the
    key in DATA_DIR/secrets.key (mode 0600, created on first write), a file apart from
    the sandgate database. Host bindings are kept beside each value as plain metadata.
    """

    def __init__(self, data_dir: str | os.PathLike, key_file: str | os.PathLike | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / "secrets.json"
        self.key_path = Path(key_file) if key_file else self.data_dir / "secrets.key"
        self._lock = threading.Lock()

    # -- files (run in worker threads)

    def _load(self) -> dict[str, Any]:
        try:
            with open(self.path, "rb") as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SecretUnavailable(UNAVAILABLE, f"local: cannot read {self.path.name} ({type(exc).__name__})") from None
        entries = doc.get("secrets") if isinstance(doc, dict) else None
        if not isinstance(entries, dict):
            raise SecretUnavailable(UNAVAILABLE, f"local: {self.path.name} is malformed")
        return entries

    def _fernet(self, create: bool) -> Any:
        from cryptography.fernet import Fernet

        try:
            info = os.stat(self.key_path)
        except FileNotFoundError:
            if not create:
                raise SecretUnavailable(UNAVAILABLE, f"local: key file {self.key_path.name} is missing") from None
            key = Fernet.generate_key()
            try:
                _write_private(self.key_path, key, exclusive=True)
                return Fernet(key)
            except FileExistsError:  # another process made one first: use it
                return self._fernet(create=False)
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise SecretUnavailable(UNAVAILABLE, f"local: {self.key_path.name} must be a regular file of mode 0600")
        try:
            return Fernet(self.key_path.read_bytes().strip())
        except (OSError, ValueError) as exc:
            raise SecretUnavailable(UNAVAILABLE, f"local: unusable key file ({type(exc).__name__})") from None

    def _read(self, name: str) -> str:
        from cryptography.fernet import InvalidToken

        entry = self._load().get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("ciphertext"), str):
            raise SecretUnavailable(NOT_FOUND, f"local: no secret named {name!r}")
        try:
            sealed = json.loads(self._fernet(create=False).decrypt(entry["ciphertext"].encode("ascii")))
        except (InvalidToken, ValueError, UnicodeError):
            raise SecretUnavailable(UNAVAILABLE, f"local: cannot decrypt {name!r} with this key") from None
        if not isinstance(sealed, dict) or sealed.get("name") != name:  # a value moved to another name
            raise SecretUnavailable(INVALID, f"local: stored entry for {name!r} does not belong to it")
        return _checked(sealed.get("value"), f"local: {name}")

    def _write(self, name: str, value: str | None, hosts: Iterable[str] = ()) -> bool:
        try:
            return self._write_locked(name, value, hosts)
        except OSError as exc:
            raise SecretUnavailable(UNAVAILABLE, f"local: cannot write ({type(exc).__name__})") from None

    def _write_locked(self, name: str, value: str | None, hosts: Iterable[str]) -> bool:
        with self._lock:
            entries = self._load()
            if value is None:
                if entries.pop(name, None) is None:
                    return False
            else:
                self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                if entries and not self.key_path.exists():
                    raise SecretUnavailable(UNAVAILABLE, "local: secrets exist but the key file is missing")
                plain = json.dumps({"name": name, "value": value}).encode("utf-8")
                entries[name] = {
                    "ciphertext": self._fernet(create=True).encrypt(plain).decode("ascii"),
                    "hosts": sorted(set(hosts)),
                    "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                }
            doc = json.dumps({"version": 1, "secrets": entries}, indent=1, sort_keys=True).encode("utf-8")
            _write_private(self.path, doc, exclusive=False)
            return True

    # -- async API

    async def get(self, name: str) -> str:
        return await asyncio.to_thread(self._read, _local_name(name))

    async def put(self, name: str, value: str, hosts: Iterable[str] = ()) -> None:
        if isinstance(hosts, str) or not all(isinstance(h, str) and h for h in hosts):
            raise ValueError("hosts must be a list of non-empty strings")
        await asyncio.to_thread(self._write, _local_name(name), _new_value(value), list(hosts))

    async def delete(self, name: str) -> None:
        if not await asyncio.to_thread(self._write, _local_name(name), None):
            raise SecretUnavailable(NOT_FOUND, f"local: no secret named {name!r}")

    async def list(self) -> list[dict[str, Any]]:
        entries = await asyncio.to_thread(self._load)
        return [{"name": n, "hosts": list(e.get("hosts", []))} for n, e in sorted(entries.items())
                if isinstance(e, dict)]


def _local_name(name: str) -> str:
    if not isinstance(name, str) or not _LOCAL_NAME.match(name):
        raise ValueError(f"bad local secret name {name!r}: use letters, digits, '_', '.', '-'")
    return name


def _write_private(path: Path, data: bytes, exclusive: bool) -> None:
    """Write `data` to `path` with mode 0600 through a temporary file: renamed over
    `path`, or if `exclusive` linked to it (FileExistsError if it exists)."""
    temp = path.with_name(f".{path.name}.{pysecrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            os.link(temp, path)
        else:
            os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


# ---------------------------------------------------------------- environment

class EnvBackend:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    async def get(self, ref: str) -> str:
        value = self._environ.get(ref)
        if not value:
            raise SecretUnavailable(NOT_FOUND, f"env: variable {ref} is not set")
        return value


# ---------------------------------------------------------------- cache

class CachedResolver:
    """Reads sources through their backends with an in-memory TTL cache.

    A value is served from the cache only until its TTL runs out; after that the
    backend is asked again and, if it fails, the caller gets SecretUnavailable
    (fail closed: never a stale value). Concurrent misses for one source share a read.
    """

    def __init__(self, backends: Mapping[str, Backend], ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s < 0:
            raise ValueError("cache ttl must be >= 0")
        self.backends = dict(backends)
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, source: str | Source) -> str:
        source = source if isinstance(source, Source) else parse_source(source)
        key = str(source)
        value = self._fresh(key)
        if value is not None:
            return value
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            value = self._fresh(key)
            if value is not None:
                return value
            backend = self.backends.get(source.kind)
            if backend is None:
                raise SecretUnavailable(UNAVAILABLE, f"no {source.kind} backend configured")
            try:
                value = _checked(await backend.get(source.ref), key)
            except SecretUnavailable:
                raise
            except Exception as exc:  # a backend bug must not leak as a stack trace or a stale value
                raise SecretUnavailable(UNAVAILABLE, f"{source.kind}: {type(exc).__name__}") from None
            if self.ttl_s > 0:
                self._cache[key] = (self._clock() + self.ttl_s, value)
            return value

    def _fresh(self, key: str) -> str | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._cache[key]
            return None
        return entry[1]

    def invalidate(self, source: str | Source | None = None) -> None:
        if source is None:
            self._cache.clear()
        else:
            self._cache.pop(str(source if isinstance(source, Source) else parse_source(source)), None)
