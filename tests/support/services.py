"""sandgate's services wired in process, for tests without sockets: a real SQLite store, the real audit log,
approval queue, session registry, broker (local and environment backends) and the embedded policy engine
(threads), with the egress addons built on them as `gateway/app.py` builds them."""
from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.broker import Broker
from broker.registry import PlaceholderRegistry
from gateway.approvals.queue import ApprovalQueue
from gateway.audit.log import AuditLog
from gateway.auth.tokens import Revocations, TokenSigner, TokenVerifier
from gateway.config import ApprovalSettings, EgressSettings, PolicySettings, SessionSettings, load_config
from gateway.egress.aws import AwsSigning
from gateway.egress.addon import EgressAddon, EgressDeps
from gateway.egress.hold import HoldAddon
from gateway.egress.limits import ConnectionLimits, HeldLimits
from gateway.net.hosts import normalise_host
from gateway.egress.injection import InjectionAddon
from gateway.egress.recorder import FlowRecorder
from gateway.egress.resolver import StaticResolver
from gateway.egress.screen import SecretScreen
from gateway.packages.firewall import PackageFirewall
from gateway.packages.urls import registries_for
from gateway.store.packages import PackageStore
from gateway.runtime.metrics import Metrics
from gateway.policy.base import CachingEngine
from gateway.policy.factory import make_engine
from gateway.sessions.spec import MAX_TTL_S, parse_session_spec
from gateway.sessions.registry import SessionCache, SessionRegistry
from gateway.store import Store


class NoDns:
    """Names outside the test's static map do not resolve (tests never reach a real resolver)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        raise OSError(f"{host} is not in this test's name map")


@dataclass
class Services:
    store: Store
    audit: AuditLog
    metrics: Metrics
    approvals: ApprovalQueue
    placeholders: PlaceholderRegistry
    sessions: SessionRegistry
    broker: Broker
    signer: TokenSigner
    tokens: TokenVerifier
    engine: CachingEngine | None = None
    own_listeners: list[tuple[str, int]] = field(default_factory=list)

    async def events(self, session: str | None = None, kind: str | None = None) -> list[dict]:
        return await self.audit.read(session=session, kind=kind)

    async def session(self, by: str = "harness:test", **body: Any) -> tuple[dict, str]:
        """A new session (row, session token), as POST /v1/sessions makes one."""
        spec = parse_session_spec(body, self.broker.specs)
        placeholders = await self.broker.new_placeholders(spec.secrets) if spec.secrets else {}
        row = await self.sessions.create(spec, placeholders, by)
        token = self.signer.mint("session", row["id"], MAX_TTL_S, session_id=row["id"], workload=spec.workload)
        return row, token


async def open_services(stack: AsyncExitStack, tmp: Path, *, secrets: dict | None = None,
                        environ: dict | None = None, approvals: ApprovalSettings = ApprovalSettings(),
                        store: Store | None = None) -> Services:
    """The services on a SQLite store under `tmp` (or on `store`, shared like replicas share one)."""
    tmp.mkdir(parents=True, exist_ok=True)
    if store is None:
        store = Store(f"sqlite:///{tmp / 'sandgate.db'}")
        stack.callback(store.close)
        await store.open()
    metrics = Metrics()
    audit = AuditLog(store)
    audit.start()
    stack.push_async_callback(audit.close)
    queue = ApprovalQueue(store, audit, metrics, approvals)
    placeholders = PlaceholderRegistry()
    sessions = SessionRegistry(store, SessionCache(), placeholders, audit, queue)
    await sessions.load()
    cfg = load_config(None, tmp / "data", environ={}, overrides={"secrets": secrets or {}})
    broker = Broker.from_specs(cfg.broker.secrets, None, tmp, normalise_host=normalise_host, environ=environ or {})
    signer = TokenSigner(b"k" * 64)
    return Services(store=store, audit=audit, metrics=metrics, approvals=queue, placeholders=placeholders,
                    sessions=sessions, broker=broker, signer=signer, tokens=TokenVerifier(signer, Revocations()))


@dataclass
class EgressAddons:
    egress: EgressAddon
    hold: HoldAddon
    injection: InjectionAddon

    def chain(self) -> list[object]:
        return [self.egress, self.hold, self.injection]


async def egress_addons(stack: AsyncExitStack, services: Services, settings: EgressSettings,
                        names: dict[str, list[str]], limits: SessionSettings = SessionSettings()) -> EgressAddons:
    """The egress addons on `services`, deciding with the shipped policies; `names` is the only DNS there is."""
    engine = make_engine(PolicySettings(isolation="thread", workers=1))
    stack.push_async_callback(engine.close)
    await engine.start()
    services.engine = engine
    recorder = FlowRecorder(services.audit, services.metrics, services.sessions, engine)
    held = HeldLimits(limits.max_held, settings.max_held_bytes)
    screen = SecretScreen(services.placeholders, services.broker, services.sessions, recorder, services.metrics)
    egress = EgressAddon(EgressDeps(settings=settings, tokens=services.tokens, sessions=services.sessions,
                                    engine=engine, audit=services.audit, metrics=services.metrics,
                                    resolver=StaticResolver(names, NoDns()), recorder=recorder, screen=screen,
                                    packages=PackageFirewall(PackageStore(services.store), registries_for(
                                        {"host": h, "ecosystem": e} for h, e in settings.package_registries),
                                        settings.package_max_bytes),
                                    own_listeners=services.own_listeners, held=held,
                                    connections=ConnectionLimits(limits.max_connections)))
    hold = HoldAddon(services.approvals, services.sessions, services.placeholders, recorder, settings, held)
    injection = InjectionAddon(services.broker, services.placeholders, screen, recorder, services.metrics,
                               AwsSigning(services.broker, settings.inspect_max_bytes))
    return EgressAddons(egress, hold, injection)
