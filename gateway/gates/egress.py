"""The egress gate: the one decision path of an outbound request, whatever carried it to the proxy.

`EgressGate.decide(EgressRequest, check_address) -> EgressOutcome`: the session's live access grants, a package
download's facts, the policy input, the policy's decision, then the destination's addresses (vetted by the
adapter's `check_address`, which knows what its connection already vetted) unless the upstream proxy resolves
them, and "ask" for a CONNECT turned into a deny (a tunnel cannot be held). What the proxy sees on the wire
(authentication, the request's authority and Host headers, TLS names, secrets in the head, an AWS call's
operation) the mitmproxy adapter (gateway/egress/addon.py) reads and hands over in the request; it applies the
outcome (answer, hold, stream) and records it. This module imports neither mitmproxy nor aiohttp.
"""
from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Mapping, NamedTuple

from gateway.config import EgressSettings
from gateway.net.addresses import AddressVerdict
from gateway.net.upstream_proxy import proxy_resolves
from gateway.packages.firewall import PackageFirewall
from gateway.policy.base import PolicyEngine
from gateway.policy.decision import Decision
from gateway.policy.inputs import build_egress_input
from gateway.sessions.registry import SessionRegistry
from gateway.store.records import Session

GrantSource = Callable[[str, float], Awaitable[list[dict]]]          # (session id, now) -> live grants
AddressCheck = Callable[[str, int], Awaitable[AddressVerdict]]       # (host, port) -> the addresses' verdict


class EgressRequest(NamedTuple):
    """One outbound request (or CONNECT) of a live session, as the policy will see it. Immutable; a NamedTuple
    rather than a frozen dataclass because one is built for every request, and a frozen dataclass's __init__
    (a setattr through object.__setattr__ per field) cost about three times as much here."""

    session: Session                         # the live session (the registry's)
    method: str
    host: str                                # normalised: no trailing dot, punycode, canonical IP
    port: int
    scheme: str = ""                         # "" for a CONNECT
    path: str = ""                           # without the query; "" for a CONNECT
    query: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    tunnel: bool = False                     # a request inside a tunnel whose CONNECT was allowed
    ip: str = ""                             # the host when it is an IP literal, and its class
    ip_class: str = ""
    secrets: tuple[str, ...] = ()            # the session's own secrets its URL and headers name
    markers: tuple[str, ...] = ()            # their placeholders (redacted from the headers the policy sees)
    aws: Mapping[str, Any] | None = None     # an AWS call's {"service", "region", "operation", "resource"}
    aws_ambiguous: bool = False              # the call names its operation more than once
    request_id: str = ""                     # what the user holds (every 403 body carries it)

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def is_connect(self) -> bool:
        return self.method == "CONNECT"


class EgressOutcome(NamedTuple):
    """What to do with the request: "allow", "ask" (hold it for approval) or "deny" with its code and reason.
    `decision` is the policy's (None when refused before the policy was asked)."""

    action: str
    code: str
    reason: str
    decision: Decision | None = None


class EgressGate:
    def __init__(self, *, settings: EgressSettings, engine: PolicyEngine, sessions: SessionRegistry,
                 packages: PackageFirewall, grants: GrantSource | None = None):
        self.settings = settings
        self.engine = engine
        self.sessions = sessions
        self.packages = packages
        self.grants = grants

    async def decide(self, req: EgressRequest, check_address: AddressCheck) -> EgressOutcome:
        if req.aws_ambiguous:
            return EgressOutcome("deny", "aws.ambiguous_operation", "this AWS call names its operation more than once")
        now = time.time()
        grants = await self.grants(req.session_id, now) if self.grants is not None else []
        doc = build_egress_input(
            session=self.sessions.with_stats(req.session), now=now, method=req.method, grants=grants,
            scheme=req.scheme, host=req.host, port=req.port, path=req.path, query=req.query, headers=req.headers,
            ip=req.ip, ip_class=req.ip_class, secrets=req.secrets, markers=req.markers,
            package=None if req.is_connect else self.packages.download(req.host, req.method, req.path),
            tunnel=req.tunnel, aws=req.aws)
        decision = await self.engine.decide("egress", doc, req.request_id)
        if decision.action == "deny":
            return EgressOutcome("deny", decision.code, decision.reason, decision)
        if not proxy_resolves(self.settings.upstream_proxy, req.host, req.port):
            verdict = await check_address(req.host, req.port)
            if not verdict.allowed:
                return EgressOutcome("deny", verdict.code, verdict.reason, decision)
        if decision.action == "ask" and req.is_connect:
            return EgressOutcome("deny", decision.code, decision.reason, decision)
        return EgressOutcome(decision.action, decision.code, decision.reason, decision)
