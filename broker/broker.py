"""The credential broker: secret specs, per-session placeholders, bindings, local secrets.

`Broker` issues placeholders at session creation, resolves a placeholder to a `Binding` (with the real value)
when a request needs it, and manages the secrets stored with `sandgate secrets put` (`put_local`,
`remove_local`). Spec parsing lives in `broker.specs` (re-exported here).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from broker.backends import (Backend, CachedResolver, EnvBackend, LocalBackend, SecretUnavailable, VaultBackend,
                             parse_source)
from broker.inject import Binding
from broker.oauth2 import MemoryTokenState, OAuth2Tokens, TokenState, TransportFactory
from broker.placeholders import BASE62, RandomSource, make_placeholder
from broker.sigv4 import Credentials
from broker.specs import (DEFAULT_INJECT_IN, RESERVED_ENV, SPEC_KEYS, HostNormaliser, SecretSpec, local_spec,
                          parse_secret_specs)

AWS_SECRET_PART = "#secret"             # a session's placeholders: {"aws": key id, "aws#secret": secret access key}
AWS_KEY_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def secret_of(placeholder_name: str) -> str:
    """The secret a session's placeholder entry belongs to ("aws#secret" -> "aws")."""
    return placeholder_name.partition("#")[0]

__all__ = ["DEFAULT_INJECT_IN", "RESERVED_ENV", "SPEC_KEYS", "Broker", "BrokerError", "HostNormaliser",
           "SecretSpec", "local_spec", "parse_secret_specs"]


def spec_sources(spec: SecretSpec) -> tuple[str, ...]:
    """The secret sources a spec reads (its value's, or an oauth2 secret's client and refresh token)."""
    return spec.oauth2.sources() if spec.oauth2 is not None else spec.all_sources()


class BrokerError(Exception):
    """A secret-management request the broker refuses. `code` is stable ("not_found", "not_local",
    "bad_request"); `detail` is for people and never carries a value."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


class Broker:
    """Specs plus a CachedResolver: placeholders at session creation, bindings per request."""

    def __init__(self, specs: Mapping[str, SecretSpec], resolver: CachedResolver, *,
                 normalise_host: HostNormaliser, local: LocalBackend | None = None,
                 lookup_timeout_s: float = 2.0, rand: RandomSource | None = None,
                 oauth2: OAuth2Tokens | None = None) -> None:
        for spec in specs.values():
            for source in spec_sources(spec):
                kind = parse_source(source).kind
                if kind not in resolver.backends:
                    raise ValueError(f"secrets.{spec.name}: source kind {kind!r} has no backend configured")
            if spec.oauth2 is not None and (oauth2 is None or spec.name not in oauth2.specs):
                raise ValueError(f"secrets.{spec.name}: an oauth2 secret needs the token minter")
        self.oauth2 = oauth2
        self.specs = dict(specs)
        self.configured = frozenset(specs)           # defined in the configuration: never changed at run time
        self.resolver = resolver
        self.lookup_timeout_s = lookup_timeout_s
        self._local = local
        self._normalise = normalise_host
        self._rand = rand

    @classmethod
    def from_config(cls, secrets: Mapping[str, Mapping], vault: Mapping[str, Any] | None,
                    data_dir: str | os.PathLike, *, normalise_host: HostNormaliser, cache_ttl_s: float = 30.0,
                    environ: Mapping[str, str] | None = None) -> Broker:
        """Build from the `[secrets]` tables and the `[vault]` section (see `from_specs`)."""
        return cls.from_specs(parse_secret_specs(secrets, normalise_host), vault, data_dir,
                              normalise_host=normalise_host, cache_ttl_s=cache_ttl_s, environ=environ)

    @classmethod
    def from_specs(cls, specs: Mapping[str, SecretSpec], vault: Mapping[str, Any] | None,
                   data_dir: str | os.PathLike, *, normalise_host: HostNormaliser, cache_ttl_s: float = 30.0,
                   environ: Mapping[str, str] | None = None, oauth2_transport: TransportFactory | None = None,
                   token_state: TokenState | None = None) -> Broker:
        """Build from validated specs: the local and environment backends always, Vault only if a secret uses
        it (ValueError if it is then not configured). OAuth2 secrets need `oauth2_transport` (the gateway's
        vetted dialler) and, with replicas, the store's `token_state`."""
        local = LocalBackend(Path(data_dir))
        backends: dict[str, Backend] = {"local": local, "env": EnvBackend(environ)}
        if any(parse_source(src).kind == "vault" for s in specs.values() for src in spec_sources(s)):
            backends["vault"] = VaultBackend.from_config(vault, environ=environ)
        resolver = CachedResolver(backends, ttl_s=cache_ttl_s)
        flows = {s.name: s.oauth2 for s in specs.values() if s.oauth2 is not None}
        tokens = None
        if flows:
            if oauth2_transport is None:
                raise ValueError("oauth2 secrets need a transport to their token endpoints")
            tokens = OAuth2Tokens(flows, resolver, oauth2_transport, token_state or MemoryTokenState())
        return cls(specs, resolver, normalise_host=normalise_host, local=local, oauth2=tokens)

    # -- secrets stored with `sandgate secrets put` ------------------------------------------------
    async def load_local_specs(self) -> None:
        """Secrets stored with `sandgate secrets put` become specs bound to their hosts (the configuration's
        own specs win)."""
        if self._local is None:
            return
        for item in await self._local.list():
            if item["name"] not in self.specs and item.get("hosts"):
                self.specs[item["name"]] = local_spec(item["name"], item["hosts"], self._normalise)

    def _local_backend(self) -> LocalBackend:
        if self._local is None:
            raise BrokerError("not_local", "this broker has no local secret store")
        return self._local

    async def put_local(self, name: str, value: str, hosts: Sequence[str]) -> SecretSpec:
        """Store a secret locally (encrypted) and make it usable at once. A secret defined in the configuration
        keeps its configured hosts, format and injection points; one with another backend is `not_local`."""
        existing = self.specs.get(name)
        if existing is not None and (existing.kind != "token" or parse_source(existing.source).kind != "local"):
            raise BrokerError("not_local", f"secret {name} is defined in the configuration with another backend")
        try:
            spec = existing if existing is not None and name in self.configured else \
                local_spec(name, hosts, self._normalise)
            await self._local_backend().put(name, value, list(spec.hosts))
        except (SecretUnavailable, ValueError) as exc:
            raise BrokerError("bad_request", str(exc)) from None
        self.specs[name] = spec
        self.resolver.invalidate(spec.source)
        return spec

    async def remove_local(self, name: str) -> SecretSpec:
        """Delete a secret stored with `sandgate secrets put` (never one the configuration defines)."""
        spec = self.specs.get(name)
        if spec is None:
            raise BrokerError("not_found", "no such secret")
        if spec.kind != "token" or parse_source(spec.source).kind != "local" or name in self.configured:
            raise BrokerError("not_local", "only secrets stored with `sandgate secrets put` can be removed here")
        await self._local_backend().delete(name)
        self.specs.pop(name, None)
        self.resolver.invalidate(spec.source)
        return spec

    def listing(self) -> list[SecretSpec]:
        """Every spec, by name."""
        return sorted(self.specs.values(), key=lambda s: s.name)

    def env_names(self, names: Sequence[str]) -> dict[str, str]:
        """{secret name: the variable holding its placeholder in the sandbox}."""
        return {name: self._spec(name).env for name in names}

    def _spec(self, name: str) -> SecretSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise ValueError(f"unknown secret {name!r}") from None

    async def _value_or_none(self, spec: SecretSpec) -> str | None:
        if spec.kind != "token":
            return None                                 # a minted token: the placeholder takes the default shape
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

    def _aws_placeholders(self, spec: SecretSpec) -> dict[str, str]:
        """An AKIA-shaped key id (AKIA + 16 of A-Z 0-9: 82 random bits; the key id only names the key, the secret
        placeholder beside it, 40 characters of 238 bits, is what signs) and a secret access key."""
        rand = self._rand or secrets.SystemRandom()
        key_id = "AKIA" + "".join(rand.choice(AWS_KEY_ALPHABET) for _ in range(16))
        secret = "".join(rand.choice(BASE62) for _ in range(40))
        return {spec.name: key_id, spec.name + AWS_SECRET_PART: secret}

    async def new_placeholders(self, names: Sequence[str]) -> dict[str, str]:
        """A fresh placeholder for each named secret (an `aws` secret has two: its key id under its name, its
        secret access key under NAME#secret). Uses the real value's length when it can be read; if the backend is
        down, still issues one (format or default shape)."""
        specs = [self._spec(n) for n in dict.fromkeys(names)]
        token_specs = [s for s in specs if s.kind != "aws"]
        values = await asyncio.gather(*(self._value_or_none(s) for s in token_specs))
        out = {s.name: self._placeholder(s, v) for s, v in zip(token_specs, values)}
        for spec in specs:
            if spec.kind == "aws":
                out |= self._aws_placeholders(spec)
        return out

    async def binding(self, name: str, placeholder: str) -> Binding:
        """The binding for one session's placeholder; SecretUnavailable propagates. An `aws` secret's binding is
        its key id, injected nowhere (its requests are signed again instead)."""
        spec = self._spec(name)
        if spec.oauth2 is not None and self.oauth2 is not None:
            value = await self.oauth2.token(name)
        else:
            value = await self.resolver.get(spec.source)
        if value == placeholder:
            raise SecretUnavailable("secret.invalid", f"{name}: placeholder equals the value")
        return Binding(name=name, placeholder=placeholder, value=value,
                       hosts=frozenset(spec.hosts), inject_in=spec.inject_in)

    async def bindings(self, placeholders: Mapping[str, str]) -> list[Binding]:
        return list(await asyncio.gather(*(self.binding(n, p) for n, p in placeholders.items() if "#" not in n)))

    async def aws_credentials(self, name: str) -> Credentials:
        """The real AWS credentials of an `aws` secret; SecretUnavailable propagates."""
        spec = self._spec(name)
        token_source = spec.source_of("session_token")
        key, secret, token = await asyncio.gather(
            self.resolver.get(spec.source), self.resolver.get(spec.source_of("secret_access_key")),
            self.resolver.get(token_source) if token_source else _none())
        return Credentials(key, secret, token)

    def fresh_aws_credentials(self, name: str) -> Credentials | None:
        """What `aws_credentials` answers when every value is fresh in the cache, without awaiting; else None."""
        spec = self.specs.get(name)
        if spec is None or spec.kind != "aws":
            return None
        token_source = spec.source_of("session_token")
        key, secret = self.resolver.fresh(spec.source), self.resolver.fresh(spec.source_of("secret_access_key"))
        token = self.resolver.fresh(token_source) if token_source else ""
        if key is None or secret is None or token is None:
            return None
        return Credentials(key, secret, token or None)

    def fresh_bindings(self, placeholders: Mapping[str, str]) -> list[Binding] | None:
        """What `bindings` answers when every value is fresh in the resolver's cache (so that it would not wait for
        a backend), computed without awaiting; None otherwise (an unknown secret, a value not cached or equal to its
        placeholder included: `bindings` then gives the answer, or the error)."""
        out = []
        for name, placeholder in placeholders.items():
            if "#" in name:
                continue
            spec = self.specs.get(name)
            value = self._fresh_value(spec) if spec is not None else None
            if value is None or value == placeholder:
                return None
            out.append(Binding(name=name, placeholder=placeholder, value=value, hosts=frozenset(spec.hosts),
                               inject_in=spec.inject_in))
        return out

    def fresh_scrub_replacements(self, placeholders: Mapping[str, str]) -> dict[bytes, bytes] | None:
        """What `scrub_replacements` answers when every value it needs is fresh in the resolver's cache, computed
        without awaiting; None otherwise."""
        pairs = self._minted_pairs(placeholders)
        for name, source in self._scrub_sources(placeholders):
            value = self.resolver.fresh(source)
            if value is None:
                return None
            pairs.append((name, value))
        return {v.encode("utf-8"): placeholders[n].encode("utf-8") for n, v in pairs if v != placeholders[n]}

    def _scrub_sources(self, placeholders: Mapping[str, str]) -> list[tuple[str, str]]:
        """(placeholder entry, source) for every value scrubbed from a session's responses: an `aws` secret's key id,
        secret access key and session token (scrubbed to the secret placeholder) included."""
        out = []
        for name in placeholders:
            spec = self.specs.get(name)
            if spec is None or spec.kind not in ("token", "aws"):
                continue                            # an oauth2 secret's minted tokens: _minted_pairs
            out.append((name, spec.source))
            if spec.kind == "aws" and name + AWS_SECRET_PART in placeholders:
                out += [(name + AWS_SECRET_PART, src) for src in spec.all_sources()[1:]]
        return out

    async def scrub_replacements(self, placeholders: Mapping[str, str]) -> dict[bytes, bytes]:
        """{real value: placeholder} for scrubbing a session's responses, for every secret it holds that is still
        defined. A value the backend cannot give now is the last one read (scrubbing a stale value is safe);
        SecretUnavailable if there is none."""
        sources = self._scrub_sources(placeholders)
        names = [n for n, _src in sources]

        async def value(name: str, source: str) -> str:
            try:
                return await asyncio.wait_for(self.resolver.get(source), self.lookup_timeout_s)
            except (SecretUnavailable, asyncio.TimeoutError):
                known = self.resolver.last_read(source)
                if known is None:
                    raise SecretUnavailable("secret.backend_unavailable", f"{name}: no value to scrub with") from None
                return known

        values = await asyncio.gather(*(value(n, src) for n, src in sources))
        pairs = self._minted_pairs(placeholders) + list(zip(names, values))
        return {v.encode("utf-8"): placeholders[n].encode("utf-8") for n, v in pairs if v != placeholders[n]}

    def minted(self, name: str) -> bool:
        """Whether `name`'s value is a token sandgate mints (oauth2, github_app): getting one may take a request."""
        spec = self.specs.get(name)
        return spec is not None and spec.oauth2 is not None

    def _fresh_value(self, spec: SecretSpec) -> str | None:
        if spec.oauth2 is not None:
            return self.oauth2.fresh(spec.name) if self.oauth2 is not None else None
        return self.resolver.fresh(spec.source)

    def _minted_pairs(self, placeholders: Mapping[str, str]) -> list[tuple[str, str]]:
        """(name, access token) for each token lately minted for the session's oauth2 secrets (scrubbed)."""
        if self.oauth2 is None:
            return []
        return [(n, token) for n in placeholders if n in self.oauth2.specs for token in self.oauth2.recent(n)]

    def env(self, placeholders: Mapping[str, str], ca_path: str = "") -> dict[str, str]:
        """{env variable: placeholder} for the sandbox; an `aws` secret's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
        AWS_CA_BUNDLE (= `ca_path`)."""
        out = {}
        for name, ph in placeholders.items():
            spec = self._spec(secret_of(name))
            if "#" in name:
                out["AWS_SECRET_ACCESS_KEY"] = ph
                if ca_path:
                    out["AWS_CA_BUNDLE"] = ca_path
            else:
                out[spec.env] = ph
        return out


async def _none() -> None:
    return None
