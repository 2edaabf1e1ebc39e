"""OAuth2 access tokens minted by sandgate (`kind = "oauth2"`): the sandbox holds a placeholder bearer token; on the
way to a bound host sandgate puts a current access token in its place.

- `parse_oauth2` checks a `[secrets.NAME]` table's OAuth2 keys (pure).
- `OAuth2Tokens` mints tokens with authlib's client at `token_url` (`client_credentials` or `refresh_token`),
  through the transport the gateway gives it (which dials only vetted addresses), caches each until shortly
  before `expires_in`, refreshes one secret at a time (in this process, and across replicas through the
  `TokenState` store's lease), and keeps a rotated refresh token: written back to its source where that is
  writable (local store, Vault KV), else kept by the `TokenState` store (encrypted).
Every failure is a `SecretUnavailable` with a stable code (`secret.refresh_failed` when the token endpoint says no);
no message ever carries a token, a secret or the endpoint's answer.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from broker.sources import UNAVAILABLE, SecretUnavailable, parse_source

log = logging.getLogger("sandgate.broker")

REFRESH_FAILED = "secret.refresh_failed"
GRANTS = ("client_credentials", "refresh_token")
OAUTH2_KEYS = frozenset({"token_url", "grant", "client_id", "client_secret", "refresh_token", "scope"})
MAX_TOKEN_CHARS = 16384              # a longer access or refresh token is refused (the cache is capped)
MAX_CACHE_S = 12 * 3600.0            # a token is never cached longer, whatever its expires_in
DEFAULT_LIFETIME_S = 300.0           # an answer without expires_in is cached this long
KEPT_FOR_SCRUB = 4                   # recent access tokens of a secret scrubbed from responses
TOKEN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class OAuth2Params:
    token_url: str
    grant: str                       # "client_credentials" or "refresh_token"
    client_id: str                   # secret sources ("" when not used)
    client_secret: str = ""
    refresh_token: str = ""
    scope: str = ""

    def sources(self) -> tuple[str, ...]:
        return tuple(s for s in (self.client_id, self.client_secret, self.refresh_token) if s)


def parse_oauth2(name: str, table: Mapping[str, Any]) -> OAuth2Params:
    """The OAuth2 keys of `[secrets.NAME]`. ValueError naming the key."""
    url = table.get("token_url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme != "https" or not parts.hostname or parts.username or parts.fragment:
        raise ValueError(f"secrets.{name}.token_url: an https:// URL is required")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"secrets.{name}.token_url: bad port") from None
    grant = table.get("grant", "client_credentials")
    if grant not in GRANTS:
        raise ValueError(f"secrets.{name}.grant: one of {list(GRANTS)}")
    values: dict[str, str] = {}
    for key in ("client_id", "client_secret", "refresh_token"):
        value = table.get(key, "")
        if not isinstance(value, str):
            raise ValueError(f"secrets.{name}.{key}: a secret source (vault:, local:, env:)")
        if value:
            try:
                parse_source(value)
            except ValueError as exc:
                raise ValueError(f"secrets.{name}.{key}: {exc}") from None
        values[key] = value.strip()
    if grant == "client_credentials" and not (values["client_id"] and values["client_secret"]):
        raise ValueError(f"secrets.{name}: grant client_credentials needs client_id and client_secret")
    if grant == "refresh_token" and not values["refresh_token"]:
        raise ValueError(f"secrets.{name}: grant refresh_token needs refresh_token")
    if values["client_secret"] and not values["client_id"]:
        raise ValueError(f"secrets.{name}: client_secret needs client_id")
    scope = table.get("scope", "")
    if not isinstance(scope, str):
        raise ValueError(f"secrets.{name}.scope must be a string")
    return OAuth2Params(token_url=url, grant=grant, scope=scope.strip(), **values)


GITHUB_APP_KEYS = frozenset({"app_id", "private_key", "installation_id", "api_url"})
_ID = re.compile(r"[1-9][0-9]{0,18}\Z")       # GitHub's ids: positive integers (int64), no leading zeros


@dataclass(frozen=True)
class GitHubAppParams:
    """`kind = "github_app"`: installation tokens minted with the app's key (a JWT), injected like OAuth2 tokens."""

    app_id: str
    installation_id: str
    private_key: str                 # a secret source (the app's PEM private key)
    api_url: str = "https://api.github.com"

    @property
    def token_url(self) -> str:
        return f"{self.api_url}/app/installations/{self.installation_id}/access_tokens"

    def sources(self) -> tuple[str, ...]:
        return (self.private_key,)


def parse_github_app(name: str, table: Mapping[str, Any]) -> GitHubAppParams:
    """The GitHub App keys of `[secrets.NAME]`. ValueError naming the key."""
    ids = {}
    for key in ("app_id", "installation_id"):
        value = table.get(key)
        value = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(value, str) or not _ID.match(value) or int(value) >= 2 ** 63:
            raise ValueError(f"secrets.{name}.{key}: a positive integer (GitHub's id of the "
                             f"{'app' if key == 'app_id' else 'installation'}) is required, not {str(value)[:40]!r}")
        ids[key] = value
    key_source = table.get("private_key")
    try:
        parse_source(key_source)
    except ValueError as exc:
        raise ValueError(f"secrets.{name}.private_key: {exc}") from None
    api_url = table.get("api_url", "https://api.github.com")
    parts = urlsplit(api_url) if isinstance(api_url, str) else None
    if parts is None or parts.scheme != "https" or not parts.hostname or parts.username or parts.query \
            or parts.fragment:
        raise ValueError(f"secrets.{name}.api_url: an https:// URL is required")
    return GitHubAppParams(app_id=ids["app_id"], installation_id=ids["installation_id"], private_key=key_source.strip(),
                           api_url=api_url.rstrip("/"))


@dataclass(frozen=True)
class AccessToken:
    value: str = field(repr=False)
    refresh_at: float                # wall-clock time after which it is not used any more (shortly before expiry)
    refresh_token: str | None = field(default=None, repr=False)   # a new refresh token in the same answer


def refresh_margin(lifetime: float) -> float:
    """How long before its expiry a token stops being used: a fifth of its life, at most a minute."""
    return min(60.0, lifetime / 5)


def parse_token_response(doc: Any, now: float) -> AccessToken:
    """A token endpoint's JSON answer -> AccessToken. ValueError for anything unusable (never quoting it)."""
    if not isinstance(doc, Mapping):
        raise ValueError("the token endpoint's answer is not a JSON object")
    value = doc.get("access_token")
    if not isinstance(value, str) or not value or len(value) > MAX_TOKEN_CHARS or not value.isascii() \
            or not value.isprintable() or " " in value:
        raise ValueError("the token endpoint's answer has no usable access_token")
    kind = doc.get("token_type", "bearer")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise ValueError("the token endpoint's answer is not a bearer token")
    lifetime = doc.get("expires_in", DEFAULT_LIFETIME_S)
    if isinstance(lifetime, str) and lifetime.isdigit():
        lifetime = int(lifetime)
    if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)) or lifetime <= 0:
        raise ValueError("the token endpoint's answer has a bad expires_in")
    lifetime = min(float(lifetime), MAX_CACHE_S)
    rotated = doc.get("refresh_token")
    if rotated is not None and (not isinstance(rotated, str) or not rotated or len(rotated) > MAX_TOKEN_CHARS):
        raise ValueError("the token endpoint's answer has a bad refresh_token")
    return AccessToken(value, now + lifetime - refresh_margin(lifetime), rotated)


class TokenState(Protocol):
    """What sandgate's store keeps for OAuth2 secrets, shared by replicas."""

    def lease(self, name: str) -> AbstractAsyncContextManager[None]:
        """Held while one replica refreshes `name` (others wait for it)."""

    async def load(self, name: str) -> tuple[AccessToken | None, str | None]:
        """The newest access token any replica minted (if still usable) and the newest rotated refresh token."""

    async def save(self, name: str, token: AccessToken, refresh_token: str | None) -> None: ...


class SecretReader(Protocol):
    backends: Mapping[str, Any]

    async def get(self, source: str) -> str: ...

    def invalidate(self, source: str | None = None) -> None: ...


TransportFactory = Callable[[], Any]          # -> an httpx.AsyncBaseTransport that dials only vetted addresses


class OAuth2Tokens:
    def __init__(self, specs: Mapping[str, OAuth2Params | GitHubAppParams], secrets: SecretReader, transport: TransportFactory,
                 state: TokenState, clock: Callable[[], float] = time.time):
        self.specs = dict(specs)
        self._secrets = secrets
        self._transport = transport
        self._state = state
        self._clock = clock
        self._cache: dict[str, AccessToken] = {}
        self._recent: dict[str, list[str]] = {}
        self._locks = {name: asyncio.Lock() for name in self.specs}
        self._refused: set[tuple[str, str]] = set()      # tokens an upstream refused (capped)

    def fresh(self, name: str) -> str | None:
        """The cached access token while it is usable; None when `token` would have to mint one."""
        token = self._cache.get(name)
        if token is None or self._clock() >= token.refresh_at:
            return None
        return token.value

    def recent(self, name: str) -> list[str]:
        """The access tokens handed out lately for `name` (to scrub from responses)."""
        return list(self._recent.get(name, ()))

    def invalidate(self, name: str, value: str) -> None:
        """The upstream refused `value` (401): never use it again; the next `token` mints a new one."""
        token = self._cache.get(name)
        if token is not None and token.value == value:
            del self._cache[name]
        if len(self._refused) >= 64:
            self._refused.clear()
        self._refused.add((name, value))

    async def token(self, name: str) -> str:
        value = self.fresh(name)
        if value is not None:
            return value
        async with self._locks[name]:                # one refresh per secret in this process
            value = self.fresh(name)
            if value is not None:
                return value
            try:
                async with self._state.lease(name):      # ... and across replicas
                    stored, rotated = await self._state.load(name)
                    if stored is not None and self._clock() < stored.refresh_at \
                            and (name, stored.value) not in self._refused:
                        self._keep(name, stored)         # another replica minted it meanwhile
                        return stored.value
                    token = await self._mint(name, rotated)
                    await self._state.save(name, token, token.refresh_token or rotated)
                    if token.refresh_token:
                        await self._write_back(name, token.refresh_token)
            except SecretUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - the store failed: no token (fail closed)
                log.warning("oauth2 %s: the token state is unavailable (%s)", name, type(exc).__name__)
                raise SecretUnavailable(UNAVAILABLE, f"{name}: the token state is unavailable") from None
            self._keep(name, token)
            return token.value

    def _keep(self, name: str, token: AccessToken) -> None:
        self._cache[name] = token
        recent = self._recent.setdefault(name, [])
        if token.value not in recent:
            recent.append(token.value)
            del recent[:-KEPT_FOR_SCRUB]

    async def _mint(self, name: str, rotated: str | None) -> AccessToken:
        from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError

        params = self.specs[name]
        if isinstance(params, GitHubAppParams):
            return await self._mint_installation_token(name, params)
        client_id = await self._secrets.get(params.client_id) if params.client_id else None
        client_secret = await self._secrets.get(params.client_secret) if params.client_secret else None
        client = AsyncOAuth2Client(client_id=client_id, client_secret=client_secret, scope=params.scope or None,
                                   transport=self._transport(), timeout=TOKEN_TIMEOUT_S, trust_env=False)
        try:
            async with client:
                if params.grant == "refresh_token":
                    configured = await self._secrets.get(params.refresh_token)
                    try:
                        doc = await client.refresh_token(params.token_url, refresh_token=rotated or configured)
                    except OAuthError:
                        if not rotated or rotated == configured:
                            raise
                        # the kept rotated token was refused: the operator may have put a new one in the source
                        doc = await client.refresh_token(params.token_url, refresh_token=configured)
                else:
                    doc = await client.fetch_token(params.token_url, grant_type="client_credentials")
            return parse_token_response(dict(doc), self._clock())
        except OAuthError as exc:
            log.warning("oauth2 %s: the token endpoint refused (%s)", name, str(exc.error)[:64])
            raise SecretUnavailable(REFRESH_FAILED, f"{name}: the token endpoint refused to issue a token") from None
        except SecretUnavailable:
            raise
        except ValueError as exc:
            log.warning("oauth2 %s: %s", name, exc)
            raise SecretUnavailable(REFRESH_FAILED, f"{name}: the token endpoint's answer is unusable") from None
        except Exception as exc:  # noqa: BLE001 - network errors, refused addresses, bad TLS: no details out
            log.debug("oauth2 %s", name, exc_info=True)
            log.warning("oauth2 %s: the token endpoint could not be reached (%s)", name, type(exc).__name__)
            raise SecretUnavailable(REFRESH_FAILED, f"{name}: the token endpoint could not be reached") from None

    async def _mint_installation_token(self, name: str, params: GitHubAppParams) -> AccessToken:
        """A GitHub App installation token: a JWT signed with the app's key (RS256, ten minutes at most, as GitHub
        asks), exchanged at /app/installations/ID/access_tokens."""
        import httpx2
        import jwt

        key = await self._secrets.get(params.private_key)
        now = self._clock()
        try:
            assertion = jwt.encode({"iat": int(now) - 60, "exp": int(now) + 540, "iss": params.app_id}, key,
                                   algorithm="RS256")
            async with httpx2.AsyncClient(transport=self._transport(), timeout=TOKEN_TIMEOUT_S,
                                          trust_env=False) as client:
                answer = await client.post(params.token_url, headers={
                    "Authorization": f"Bearer {assertion}", "Accept": "application/vnd.github+json",
                    "X-GitHub-Api-Version": "2022-11-28"})
            if answer.status_code not in (200, 201):
                log.warning("github_app %s: the installation token was refused (HTTP %d)", name, answer.status_code)
                raise SecretUnavailable(REFRESH_FAILED, f"{name}: GitHub refused to issue an installation token")
            doc = answer.json()
            expires = datetime.fromisoformat(str(doc.get("expires_at", "")).replace("Z", "+00:00")).timestamp()
            return parse_token_response({"access_token": doc.get("token"), "expires_in": expires - now}, now)
        except SecretUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - a bad key, the network, an unusable answer: no details out
            log.warning("github_app %s: no installation token (%s)", name, type(exc).__name__)
            raise SecretUnavailable(REFRESH_FAILED, f"{name}: no installation token could be obtained") from None

    async def _write_back(self, name: str, value: str) -> None:
        """A rotated refresh token goes back to its source when that is writable (local store, Vault KV); the
        store (TokenState) keeps it in any case, so a restart or another replica uses the newest."""
        params = self.specs[name]
        source_text = params.refresh_token if isinstance(params, OAuth2Params) else ""
        if not source_text:
            return
        source = parse_source(source_text)
        backend = self._secrets.backends.get(source.kind)
        try:
            if source.kind == "local" and backend is not None:
                await backend.put(source.ref, value, await _local_hosts(backend, source.ref))
            elif source.kind == "vault" and backend is not None:
                await backend.put(source.ref, value)
            else:
                return
            self._secrets.invalidate(source_text)
        except Exception as exc:  # noqa: BLE001 - kept in the store all the same
            log.warning("oauth2 %s: the rotated refresh token could not be written back (%s)", name,
                        type(exc).__name__)


async def _local_hosts(backend: Any, ref: str) -> list[str]:
    for item in await backend.list():
        if item["name"] == ref:
            return list(item.get("hosts", []))
    return []


class MemoryTokenState:
    """A TokenState for one process with no store (tests, tools): a lock per name and the newest values."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._saved: dict[str, tuple[AccessToken, str | None]] = {}

    def lease(self, name: str) -> AbstractAsyncContextManager[None]:
        return self._locks.setdefault(name, asyncio.Lock())      # type: ignore[return-value]

    async def load(self, name: str) -> tuple[AccessToken | None, str | None]:
        return self._saved.get(name, (None, None))

    async def save(self, name: str, token: AccessToken, refresh_token: str | None) -> None:
        self._saved[name] = (token, refresh_token)
