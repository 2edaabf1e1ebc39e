"""Vault / OpenBao KV v2 secret backend, through hvac.

Thin I/O adapter: every blocking hvac call runs in a worker thread via `asyncio.to_thread`.
Every failure is a `SecretUnavailable` with a stable code; no message ever carries a secret value.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from broker.sources import (FORBIDDEN, NOT_FOUND, UNAVAILABLE, SecretUnavailable, VaultRef, checked_secret,
                            parse_source, valid_new_secret)


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
        return checked_secret(data[ref.key], f"vault: {ref}")

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
        await asyncio.to_thread(self._write, ref, valid_new_secret(value))
