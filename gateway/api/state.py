"""The API's typed application state: one `web.AppKey` per service (set once, by `create_app`), and read_json."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from aiohttp import web

from broker.broker import Broker
from gateway.api.errors import ApiError
from gateway.net.jsonbody import parse_body
from gateway.approvals.queue import ApprovalQueue
from gateway.audit.log import AuditLog
from gateway.auth.tokens import TokenSigner, TokenVerifier
from gateway.config import OidcSettings
from gateway.gates.toolcall import ToolCallGate
from gateway.runtime.drain import Drain
from gateway.runtime.metrics import Metrics
from gateway.net.addresses import IPNetwork
from gateway.policy.base import CachingEngine
from gateway.auth.revocations import RevocationService
from gateway.sessions.registry import SessionRegistry
from gateway.store.decisions import DecisionStore


@dataclass(frozen=True)
class TransparentEndpoint:
    """Where transparent capture ends: the transparent listener and the filtering resolver (bound host:port), and
    the networks a session's source address may come from."""

    listen: str
    dns: str
    sources: tuple[IPNetwork, ...]


@dataclass(frozen=True)
class PostgresEndpoint:
    """How sandboxes reach the PostgreSQL gateway: host:port in their database URLs, and each configured
    database's environment variable."""

    advertise: str
    env_names: Mapping[str, str]


@dataclass(frozen=True)
class ProxyEndpoint:
    """How sandboxes reach the egress proxy: host:port for `proxy_url`, and the CA bundle they trust."""

    authority: str
    ca_pem: str
    transparent: TransparentEndpoint | None = None      # None: this sandgate has no transparent listener
    postgres: PostgresEndpoint | None = None            # None: the PostgreSQL gateway is off


@dataclass(frozen=True)
class PageSettings:
    oidc: OidcSettings | None
    hold_timeout_s: float            # how long a held egress request waits (shown on its approval)
    reuse_window_s: float = 600.0    # approvals.reuse_window_s: an identical retry within it passes (shown)
    trusted_proxies: tuple[IPNetwork, ...] = ()     # api.trusted_proxies: whose X-Forwarded-Proto counts


@dataclass(frozen=True)
class ApiServices:
    """Everything the API and the approval page use."""

    tokens: TokenVerifier
    signer: TokenSigner
    sessions: SessionRegistry
    approvals: ApprovalQueue
    audit: AuditLog
    metrics: Metrics
    engine: CachingEngine
    broker: Broker
    revocations: RevocationService
    proxy: ProxyEndpoint
    page: PageSettings
    toolcalls: ToolCallGate
    decisions: DecisionStore | None = None      # the decision log's table (None: policy.decision_log is off)
    drain: Drain | None = None                  # stopping (SIGTERM): /readyz answers 503 while it drains


TOKENS = web.AppKey("tokens", TokenVerifier)
SIGNER = web.AppKey("signer", TokenSigner)
SESSIONS = web.AppKey("sessions", SessionRegistry)
APPROVALS = web.AppKey("approvals", ApprovalQueue)
AUDIT = web.AppKey("audit", AuditLog)
METRICS = web.AppKey("metrics", Metrics)
ENGINE = web.AppKey("engine", CachingEngine)
BROKER = web.AppKey("broker", Broker)
REVOCATIONS = web.AppKey("revocations", RevocationService)
PROXY = web.AppKey("proxy", ProxyEndpoint)
TOOLCALLS = web.AppKey("toolcalls", ToolCallGate)
DECISIONS = web.AppKey("decisions", object)             # DecisionStore | None
DRAIN = web.AppKey("drain", Drain)


def install(app: web.Application, services: ApiServices) -> None:
    app[TOKENS] = services.tokens
    app[SIGNER] = services.signer
    app[SESSIONS] = services.sessions
    app[APPROVALS] = services.approvals
    app[AUDIT] = services.audit
    app[METRICS] = services.metrics
    app[ENGINE] = services.engine
    app[BROKER] = services.broker
    app[REVOCATIONS] = services.revocations
    app[PROXY] = services.proxy
    app[TOOLCALLS] = services.toolcalls
    app[DECISIONS] = services.decisions
    app[DRAIN] = services.drain or Drain()


def path_param(request: web.Request, name: str) -> str:
    """A parameter of the route's path (`{sid}`, `{aid}`, `{name}`): a string, never empty."""
    return request.match_info[name]


async def read_json(request: web.Request) -> Any:
    """The request's JSON body ({} when there is none); 400 `bad_json` when it is not strict JSON (jsonbody)."""
    if not request.can_read_body:
        return {}
    raw = await request.read()
    try:
        return parse_body(raw)
    except ValueError as exc:
        raise ApiError(400, "bad_json", f"the request body is not valid JSON ({exc})"[:300]) from None
