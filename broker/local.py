"""Local encrypted-file secret backend: Fernet-encrypted values in DATA_DIR/secrets.json.

Thin I/O adapter: every file access runs in a worker thread via `asyncio.to_thread`.
Every failure is a `SecretUnavailable` with a stable code; no message ever carries a secret value.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets as pysecrets
import stat
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from broker.sources import (INVALID, LOCAL_NAME, NOT_FOUND, UNAVAILABLE, SecretUnavailable, checked_secret,
                            valid_new_secret)


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
        return checked_secret(sealed.get("value"), f"local: {name}")

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

    def sealer(self) -> tuple[Callable[[str], str], Callable[[str], str]]:
        """(seal, unseal) with this data dir's key (created if missing), for values sandgate keeps elsewhere (the
        OAuth2 tokens in the store). unseal raises ValueError for text this key did not seal. Reads the key file:
        call once, at start."""
        from cryptography.fernet import InvalidToken

        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fernet = self._fernet(create=True)

        def seal(text: str) -> str:
            return fernet.encrypt(text.encode("utf-8")).decode("ascii")

        def unseal(text: str) -> str:
            try:
                return fernet.decrypt(text.encode("ascii")).decode("utf-8")
            except (InvalidToken, UnicodeError):
                raise ValueError("sealed with another key, or damaged") from None
        return seal, unseal

    # -- async API

    async def get(self, name: str) -> str:
        return await asyncio.to_thread(self._read, _local_name(name))

    async def put(self, name: str, value: str, hosts: Iterable[str] = ()) -> None:
        if isinstance(hosts, str) or not all(isinstance(h, str) and h for h in hosts):
            raise ValueError("hosts must be a list of non-empty strings")
        await asyncio.to_thread(self._write, _local_name(name), valid_new_secret(value), list(hosts))

    async def delete(self, name: str) -> None:
        if not await asyncio.to_thread(self._write, _local_name(name), None):
            raise SecretUnavailable(NOT_FOUND, f"local: no secret named {name!r}")

    async def list(self) -> list[dict[str, Any]]:
        entries = await asyncio.to_thread(self._load)
        return [{"name": n, "hosts": list(e.get("hosts", []))} for n, e in sorted(entries.items())
                if isinstance(e, dict)]


def _local_name(name: str) -> str:
    if not isinstance(name, str) or not LOCAL_NAME.match(name):
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
