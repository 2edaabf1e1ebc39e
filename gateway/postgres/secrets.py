"""The real database passwords: read from their sources (vault:, local:, env:) through the broker's backends
and cache, with a Vault backend of their own when only a database uses Vault."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from broker.backends import CachedResolver, VaultBackend, parse_source
from gateway.config import DatabaseSettings


def database_secrets(resolver: CachedResolver, databases: Iterable[DatabaseSettings], vault: Mapping[str, Any],
                     cache_ttl_s: float) -> CachedResolver:
    backends = dict(resolver.backends)
    kinds = {parse_source(d.password).kind for d in databases}
    if "vault" in kinds and "vault" not in backends:
        backends["vault"] = VaultBackend.from_config(vault)
    missing = kinds - set(backends)
    if missing:
        raise ValueError(f"databases: no backend for password sources of kind {sorted(missing)[0]!r}")
    return CachedResolver(backends, ttl_s=cache_ttl_s)
