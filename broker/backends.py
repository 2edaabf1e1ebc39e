"""Secret backends (Vault/OpenBao KV v2, a local encrypted file, the environment) and a TTL cache.

Thin I/O adapters. Every blocking call (hvac, file access) runs in a worker thread
via `asyncio.to_thread`, so the event loop never waits on it. Every failure is a
`SecretUnavailable` with a stable code; no message ever carries a secret value.

The backends live in their own modules (`broker.vault`, `broker.local`), source parsing and the
error type in `broker.sources`; their public names are re-exported here.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from broker.local import LocalBackend
from broker.sources import (FORBIDDEN, INVALID, NOT_FOUND, UNAVAILABLE, SecretUnavailable, Source, VaultRef,
                            checked_secret, parse_source)
from broker.vault import VaultBackend

__all__ = ["FORBIDDEN", "INVALID", "NOT_FOUND", "UNAVAILABLE", "Backend", "CachedResolver", "EnvBackend",
           "LocalBackend", "SecretUnavailable", "Source", "VaultBackend", "VaultRef", "parse_source"]


class Backend(Protocol):
    async def get(self, ref: Any) -> str: ...


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

@functools.lru_cache(maxsize=1024)
def _source_key(text: str) -> str:
    """The cache key of a source's text (its parsed form, as text); ValueError, never cached, for a bad one."""
    return str(parse_source(text))


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
        self._known: dict[str, str] = {}             # the last value read per source (kept: scrubbing only)
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
                value = checked_secret(await backend.get(source.ref), key)
            except SecretUnavailable:
                raise
            except Exception as exc:  # a backend bug must not leak as a stack trace or a stale value
                raise SecretUnavailable(UNAVAILABLE, f"{source.kind}: {type(exc).__name__}") from None
            if self.ttl_s > 0:
                self._cache[key] = (self._clock() + self.ttl_s, value)
            self._known[key] = value
            return value

    def fresh(self, source: str | Source) -> str | None:
        """The value `get` would answer from the cache right now (its TTL not run out), or None when `get` would
        have to ask the backend. Never waits, never reads a backend."""
        if type(source) is str:
            return self._fresh(_source_key(source))
        return self._fresh(str(source if isinstance(source, Source) else parse_source(source)))

    def last_read(self, source: str | Source) -> str | None:
        """The last value read from `source` (also after its TTL ran out), or None: only ever for scrubbing, a
        stale value is never injected."""
        return self._known.get(str(source if isinstance(source, Source) else parse_source(source)))

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
