"""The credential broker: `[secrets.NAME]` specs, per-session placeholders, bindings.

`parse_secret_specs` validates the config (bad config refuses to start);
`Broker` issues placeholders at session creation and resolves a placeholder to a
`Binding` (with the real value) when a request needs it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.backends import (CachedResolver, EnvBackend, LocalBackend, SecretUnavailable,
                             VaultBackend, parse_source)
from broker.inject import LOCATIONS, Binding
from broker.placeholders import PlaceholderFormat, RandomSource, make_placeholder, parse_format

DEFAULT_INJECT_IN = frozenset({"header", "query"})
SPEC_KEYS = frozenset({"source", "hosts", "env", "format", "inject_in", "allow_plaintext", "ports"})
HostNormaliser = Callable[[str], str]     # the gateway's one normalise_host (ValueError for a bad host)
# Variables sandgate itself sets in the sandbox: a secret must not shadow them.
RESERVED_ENV = frozenset({
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS",
})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HOST = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\Z")


@dataclass(frozen=True)
class SecretSpec:
    name: str
    source: str
    hosts: tuple[str, ...]
    inject_in: frozenset[str] = DEFAULT_INJECT_IN
    env: str = ""  # "" -> NAME upper-cased, '-' and '.' as '_'
    format: PlaceholderFormat | None = None
    allow_plaintext: bool = False              # inject over cleartext http too (default: TLS only)
    ports: frozenset[int] = frozenset()        # only these destination ports (empty: any)

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", re.sub(r"[^A-Z0-9_]", "_", self.name.upper()))


def _host(name: str, entry: Any, normalise: HostNormaliser) -> str:
    if not isinstance(entry, str) or not entry.strip():
        raise ValueError(f"secrets.{name}.hosts: entries must be non-empty strings")
    text = entry.strip()
    if "/" in text or (text.count(":") == 1 and not text.startswith("[")):
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)")
    try:
        wildcard = text.startswith("*.")
        host = ("*." if wildcard else "") + normalise(text[2:] if wildcard else text.strip("[]"))
    except ValueError:
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)") from None
    if ":" in host and not host.startswith("*"):
        return host                                 # a canonical IPv6 literal
    if not _HOST.match(host) or len(host) > 253:
        raise ValueError(f"secrets.{name}.hosts: {entry!r} is not a host name (no scheme, port or path)")
    return host


def _ports(name: str, value: Any) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535 for p in value):
        raise ValueError(f"secrets.{name}.ports: a list of port numbers (1-65535)")
    return frozenset(value)


def _spec(name: str, table: Any, normalise: HostNormaliser) -> SecretSpec:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"secret name {name!r}: use letters, digits, '_', '.', '-' (max 64)")
    if not isinstance(table, Mapping):
        raise ValueError(f"secrets.{name} must be a table")
    unknown = set(table) - SPEC_KEYS
    if unknown:
        raise ValueError(f"secrets.{name}: unknown keys {sorted(unknown)}")
    if "source" not in table:
        raise ValueError(f"secrets.{name}: 'source' is required")
    try:
        parse_source(table["source"])
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.source: {exc}") from None
    hosts = table.get("hosts")
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise ValueError(f"secrets.{name}.hosts: a non-empty list of host names is required")
    inject_in = table.get("inject_in", sorted(DEFAULT_INJECT_IN))
    if isinstance(inject_in, str) or not isinstance(inject_in, Sequence) or not inject_in:
        raise ValueError(f"secrets.{name}.inject_in: a non-empty list from {sorted(LOCATIONS)}")
    bad = [x for x in inject_in if x not in LOCATIONS]
    if bad:
        raise ValueError(f"secrets.{name}.inject_in: unknown {bad}; allowed {sorted(LOCATIONS)}")
    env = table.get("env", "")
    if not isinstance(env, str) or (env and not _ENV.match(env)):
        raise ValueError(f"secrets.{name}.env: {env!r} is not a valid variable name")
    try:
        fmt = parse_format(table.get("format"))
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.format: {exc}") from None
    allow_plaintext = table.get("allow_plaintext", False)
    if not isinstance(allow_plaintext, bool):
        raise ValueError(f"secrets.{name}.allow_plaintext must be true or false")
    spec = SecretSpec(name=name, source=table["source"].strip(),
                      hosts=tuple(dict.fromkeys(_host(name, h, normalise) for h in hosts)),
                      inject_in=frozenset(inject_in), env=env, format=fmt, allow_plaintext=allow_plaintext,
                      ports=_ports(name, table.get("ports", [])))
    if spec.env.upper() in RESERVED_ENV or not _ENV.match(spec.env):
        raise ValueError(f"secrets.{name}.env: {spec.env!r} is reserved or invalid; set env explicitly")
    return spec


def parse_secret_specs(config_secrets: Mapping[str, Mapping], normalise: HostNormaliser) -> dict[str, SecretSpec]:
    """Validate the `[secrets.NAME]` tables (hosts put in canonical form by `normalise`). ValueError on anything
    wrong."""
    if not isinstance(config_secrets, Mapping):
        raise ValueError("[secrets] must be a table of tables")
    specs = {name: _spec(name, table, normalise) for name, table in config_secrets.items()}
    seen: dict[str, str] = {}
    for spec in specs.values():
        if spec.env in seen:
            raise ValueError(f"secrets.{spec.name}.env: {spec.env!r} is also used by secrets.{seen[spec.env]}")
        seen[spec.env] = spec.name
    return specs


class Broker:
    """Specs plus a CachedResolver: placeholders at session creation, bindings per request."""

    def __init__(self, specs: Mapping[str, SecretSpec], resolver: CachedResolver, *,
                 lookup_timeout_s: float = 2.0, rand: RandomSource | None = None) -> None:
        for spec in specs.values():
            kind = parse_source(spec.source).kind
            if kind not in resolver.backends:
                raise ValueError(f"secrets.{spec.name}: source kind {kind!r} has no backend configured")
        self.specs = dict(specs)
        self.resolver = resolver
        self.lookup_timeout_s = lookup_timeout_s
        self._rand = rand

    @classmethod
    def from_config(cls, secrets: Mapping[str, Mapping], vault: Mapping[str, Any] | None,
                    data_dir: str | os.PathLike, *, normalise_host: HostNormaliser, cache_ttl_s: float = 30.0,
                    environ: Mapping[str, str] | None = None) -> Broker:
        """Build from the `[secrets]` and `[vault]` sections. Vault is set up only if a
        secret uses it (ValueError if it is then not configured)."""
        specs = parse_secret_specs(secrets, normalise_host)
        backends: dict[str, Any] = {"local": LocalBackend(Path(data_dir)), "env": EnvBackend(environ)}
        if any(parse_source(s.source).kind == "vault" for s in specs.values()):
            backends["vault"] = VaultBackend.from_config(vault, environ=environ)
        return cls(specs, CachedResolver(backends, ttl_s=cache_ttl_s))

    def _spec(self, name: str) -> SecretSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise ValueError(f"unknown secret {name!r}") from None

    async def _value_or_none(self, spec: SecretSpec) -> str | None:
        try:
            return await asyncio.wait_for(self.resolver.get(spec.source), self.lookup_timeout_s)
        except (SecretUnavailable, asyncio.TimeoutError):
            return None

    def _placeholder(self, spec: SecretSpec, value: str | None) -> str:
        for _ in range(8):
            try:
                candidate = make_placeholder(spec.format, len(value) if value else None, self._rand)
            except ValueError:  # the real value is too short to copy its length safely
                candidate = make_placeholder(spec.format, None, self._rand)
            if not value or (candidate not in value and value not in candidate):
                return candidate
        raise RuntimeError("could not draw a placeholder distinct from the value")  # pragma: no cover

    async def new_placeholders(self, names: Sequence[str]) -> dict[str, str]:
        """A fresh placeholder for each named secret. Uses the real value's length when it
        can be read; if the backend is down, still issues one (format or default shape)."""
        specs = [self._spec(n) for n in dict.fromkeys(names)]
        values = await asyncio.gather(*(self._value_or_none(s) for s in specs))
        return {s.name: self._placeholder(s, v) for s, v in zip(specs, values)}

    async def binding(self, name: str, placeholder: str) -> Binding:
        """The binding for one session's placeholder; SecretUnavailable propagates."""
        spec = self._spec(name)
        value = await self.resolver.get(spec.source)
        if value == placeholder:
            raise SecretUnavailable("secret.invalid", f"{name}: placeholder equals the value")
        return Binding(name=name, placeholder=placeholder, value=value,
                       hosts=frozenset(spec.hosts), inject_in=spec.inject_in)

    async def bindings(self, placeholders: Mapping[str, str]) -> list[Binding]:
        return list(await asyncio.gather(*(self.binding(n, p) for n, p in placeholders.items())))

    def env(self, placeholders: Mapping[str, str]) -> dict[str, str]:
        """{env variable: placeholder} for the sandbox."""
        return {self._spec(name).env: ph for name, ph in placeholders.items()}
