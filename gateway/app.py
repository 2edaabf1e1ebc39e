"""The composition root: builds every service and adapter of one sandgate process, and nothing else.

One asyncio loop runs the mitmproxy egress proxy, the aiohttp API and approval page, and the background work.
Each service gets the few collaborators it uses, typed, when it is built; an `AsyncExitStack` closes them in
the reverse order of opening (background tasks, API, proxy, policy engine, audit — flushed last — and store).
Only `cli.py` imports this module.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import json
import logging
import os
import signal
import socket
import ssl
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Mapping

from aiohttp import web

from broker.aws_ops import ServiceModels
from broker.backends import CachedResolver, EnvBackend, LocalBackend, VaultBackend, parse_source
from broker.broker import Broker
from broker.registry import PlaceholderRegistry
from gateway.api.state import ApiServices, PageSettings, PostgresEndpoint, ProxyEndpoint, TransparentEndpoint
from gateway.approvals import inside
from gateway.approvals.access import AccessRules
from gateway.approvals.queue import ApprovalQueue
from gateway.notify.delivery import Notifier
from gateway.store.outbox import Outbox
from gateway.audit.checkpoints import CheckpointWriter, load_or_create_audit_key
from gateway.audit.log import AuditLog
from gateway.auth.tokens import HARNESS_TOKEN_TTL_S, Revocations, TokenSigner, TokenVerifier, load_or_create_key, write_private
from gateway.store.changes import Change, ChangeFeed, LocalChangeFeed, PgChangeFeed
from gateway.config import Config, DatabaseSettings, postgres_authority, secret_source
from gateway.egress.addon import EgressAddon, EgressDeps
from gateway.egress.aws import AwsSigning
from gateway.egress.hold import HoldAddon
from gateway.egress.limits import ConnectionLimits, HeldLimits
from gateway.net.hosts import normalise_host
from gateway.egress.injection import InjectionAddon
from gateway.egress.layers import LayerGate
from gateway.egress.proxy import MasterSettings, build_master
from gateway.egress.recorder import FlowRecorder
from gateway.egress.resolver import Resolver, StaticResolver, SystemResolver, install_guard
from gateway.egress.screen import SecretScreen
from gateway.egress.tls import sandbox_bundle
from gateway.egress.transparent import TransparentAddon
from gateway.egress.upstream import UpstreamProxyAddon
from gateway.egress.token_transport import VettedTransport, tls_context
from gateway.egress.oauth_retry import OAuth2RetryAddon
from gateway.egress.tls import write_upstream_bundle
from gateway.net.addresses import OPERATOR_ENDPOINT_NETWORKS, AddressVerdict, vet_addresses
from gateway.net.upstream_proxy import UpstreamProxy, basic_credentials, bypassed
from gateway.gates.toolcall import ToolCallGate
from gateway.egress.packages import PackageIndexAddon
from gateway.packages.firewall import PackageFirewall
from gateway.packages.urls import registries_for
from gateway.store.packages import PackageStore
from gateway.store.decisions import DecisionStore
from gateway.store.offload import WriterProcess, target_of
from gateway.runtime.drain import Drain
from gateway.runtime.metrics import Metrics
from gateway.net.synthetic import SyntheticNames
from gateway.policy.decisionlog import DecisionLog
from gateway.policy.announce import PolicyRevisions
from gateway.policy.base import PolicyEngine
from gateway.policy.factory import make_engine
from gateway.auth.revocations import RevocationService
from gateway.sessions.spec import proxy_authority
from gateway.server import create_app
from gateway.sessions.registry import SessionCache, SessionRegistry
from gateway.store import Store, StoreError
from gateway.store.oauth2 import StoreTokenState
from gateway.toolcalls.memo import FactsMemo

if TYPE_CHECKING:
    from gateway.egress.dns import DnsServer

# Imported where they are started, when configured (start-up time of every other `serve`): the filtering
# resolver of transparent capture (dnspython) and the PostgreSQL gateway (pglast, scramp).

log = logging.getLogger("sandgate")
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Listening:
    proxy: tuple[str, int]
    api: tuple[str, int]
    transparent: tuple[str, int] | None = None
    dns: tuple[str, int] | None = None
    postgres: tuple[str, int] | None = None
    drain: Drain = field(default_factory=Drain)
    close_listeners: Callable[[], None] = lambda: None     # the proxy's: no new connection (drain)


def _hostport(addr: tuple[str, int]) -> str:
    return f"[{addr[0]}]:{addr[1]}" if ":" in addr[0] else f"{addr[0]}:{addr[1]}"


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - it is being stopped
        pass


def _background(stack: AsyncExitStack, coro: Coroutine[Any, Any, None], name: str) -> None:
    """Run `coro` until the stack closes (a reference is kept; cancelled and awaited on the way out)."""
    stack.push_async_callback(_cancel, asyncio.create_task(coro, name=name))


def _close_listeners(master: Any) -> None:
    """Stop the master's listening sockets; connections already accepted go on (Server.close, asyncio's and
    uvloop's)."""
    for instance in master.addons.get("proxyserver").servers:
        for server in getattr(instance, "_servers", ()):
            if hasattr(server, "sockets") and callable(getattr(server, "close", None)):
                server.close()


async def _start_proxy(stack: AsyncExitStack, addons: list[object],
                       settings: MasterSettings) -> tuple[dict[str, tuple[str, int]], Callable[[], None]]:
    """Start the master; the bound address of each of its modes ("regular", "transparent"), and a function that
    closes its listeners."""
    master, ready = build_master(addons, settings)
    task = asyncio.create_task(master.run(), name="sandgate-proxy")

    async def stop() -> None:
        master.shutdown()
        try:
            await asyncio.wait_for(task, 5)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001
            task.cancel()
    stack.push_async_callback(stop)
    waiter = asyncio.create_task(ready.event.wait())
    done, _ = await asyncio.wait({waiter, task}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    host, port = settings.listen
    if waiter not in done:
        waiter.cancel()
        raise RuntimeError(f"the egress proxy could not start on {host}:{port}")
    bound = {server.mode.type_name: (server.listen_addrs[0][0], server.listen_addrs[0][1])
             for server in master.addons.get("proxyserver").servers if server.listen_addrs}
    if "regular" not in bound:
        raise RuntimeError(f"the egress proxy is not listening on {host}:{port}")
    if settings.transparent is not None and "transparent" not in bound:
        raise RuntimeError("the transparent listener is not listening on {}:{}".format(*settings.transparent))
    return bound, functools.partial(_close_listeners, master)


async def _start_api(stack: AsyncExitStack, app: web.Application, listen: tuple[str, int]) -> tuple[str, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, *listen)
    await site.start()
    sock = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
    return sock[0], sock[1]


async def _housekeeping(sessions: SessionRegistry, approvals: ApprovalQueue, metrics: Metrics,
                        dns: DnsServer | None, refresh_every_s: int) -> None:
    """Once a second: expiry and metrics; every `refresh_every_s` the sessions are re-read (the backstop
    behind change notifications, the only path for replicas on one SQLite file)."""
    tick = 0
    store_ok = True
    while True:
        await asyncio.sleep(1.0)
        tick += 1
        try:
            if tick % refresh_every_s == 0:
                await sessions.refresh()
                if dns is not None:
                    dns.retain(sessions.live_ids())
            metrics.sessions_live.set(sessions.count_live())
            await asyncio.shield(sessions.sync_stats())     # the stop cancels this task, never a sync half way
            await sessions.check_denials()                  # denials_per_10m, on every replica's counts
            await approvals.tick()
            store_ok = True
        except StoreError:
            if store_ok:
                log.warning("the store is unreachable; housekeeping retries every second")
            store_ok = False
        except Exception:  # noqa: BLE001 - keep housekeeping alive
            log.exception("housekeeping failed")


async def _presence(store: Store) -> None:
    """Whether another sandgate has joined (or left) this SQLite store, asked every PRESENCE_POLL_S: a process
    that joins waits longer than that before it writes (open_gateway), so none of its writes is missed."""
    while True:
        await asyncio.sleep(PRESENCE_POLL_S)
        was = store.sole_writer()
        if store.check_writers() != was:
            log.info("tool-call memory: %s", "kept in memory (the only sandgate on this SQLite store)" if not was
                     else "read from the store on every call (another sandgate uses this SQLite store)")


async def _last_counts(sessions: SessionRegistry) -> None:
    """On stop: the session counters taken since the last once-a-second sync (a restart must not forget them)."""
    try:
        await asyncio.wait_for(sessions.sync_stats(), LAST_SYNC_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - the store is unreachable: say so, and stop
        log.error("sandgate stopped with session counters unwritten (the store did not answer): %s",
                  str(exc) or type(exc).__name__)


def _operator_secrets(sources: list[str], cfg: Config) -> CachedResolver:
    """A reader of secret sources the operator configured outside `[secrets]` (the upstream proxy's credentials):
    the local store and the environment, Vault when these use it."""
    backends: dict[str, Any] = {"local": LocalBackend(cfg.data_dir), "env": EnvBackend()}
    if "vault" in {parse_source(s).kind for s in sources if s}:
        backends["vault"] = VaultBackend.from_config(cfg.broker.vault.as_mapping())
    return CachedResolver(backends, ttl_s=cfg.broker.cache_ttl_s)


async def _given(value: str) -> str:
    return value


def _notifier(cfg: Config, store: Store, audit: AuditLog, metrics: Metrics, api: tuple[str, int]) -> Notifier:
    """The deliverer of approval events to notify.webhook_url (its signing key read from its secret source at each
    delivery, or given as it is)."""
    secret = cfg.notify.secret
    key: Callable[[], Awaitable[str]] | None = None
    if secret_source(secret):
        key = functools.partial(_operator_secrets([secret], cfg).get, secret)
    elif secret:
        key = functools.partial(_given, secret)
    settings = cfg.notify
    if not settings.public_url:                 # the page where it listens (reachable on this host only)
        host = "127.0.0.1" if api[0] in ("0.0.0.0", "::", "") else api[0]
        settings = dataclasses.replace(settings, public_url=f"http://{_hostport((host, api[1]))}")
        if settings.format == "slack":
            log.warning("notify: web.public_url is not set; Slack messages link to %s", settings.public_url)
    return Notifier(settings, Outbox(store), audit, key, _upstream_tls(cfg), metrics)


def _proxied(proxy: UpstreamProxy | None) -> Callable[[str, int], bool]:
    """Whether egress.upstream_proxy carries the connections to a (normalised host, port)."""
    if proxy is None:
        return lambda host, port: False
    return lambda host, port: not bypassed(proxy, host, port)


def _proxy_auth(cfg: Config, reader: CachedResolver | None) -> Callable[[], Awaitable[str | None]] | None:
    """The Proxy-Authorization value for sandgate's own requests through the upstream proxy."""
    proxy = cfg.egress.upstream_proxy
    if proxy is None or reader is None or not proxy.user:
        return None

    async def auth() -> str | None:
        return basic_credentials(await reader.get(proxy.user), await reader.get(proxy.password))
    return auth


def _upstream_tls(cfg: Config) -> ssl.SSLContext:
    """Public roots plus egress.upstream_ca, for the connections sandgate's own clients open upstream."""
    return tls_context(str(write_upstream_bundle(cfg.data_dir, cfg.egress.upstream_ca)))


def _token_transport(cfg: Config, resolver: Resolver, own_listeners: list[tuple[str, int]],
                     proxy_auth: Callable[[], Awaitable[str | None]] | None):
    """What sandgate's OAuth2 client dials token endpoints with: a name in `token_url` resolved as egress resolves
    it, and dialled at the address resolved. A token endpoint is an endpoint the operator configured, so it is
    dialled without `egress.private_allow` (an internal identity provider must not open private ranges to every
    sandbox); only sandgate's own listeners are refused.

    Its TLS context (the public roots plus egress.upstream_ca: about 50 ms of CPU to load) is made once, at once
    when the configuration has an OAuth2 secret or an upstream_ca (a bundle OpenSSL cannot load stops the start),
    else only if a transport is ever asked for: without OAuth2 secrets none is."""
    tls = functools.cache(functools.partial(_upstream_tls, cfg))
    if cfg.egress.upstream_ca or any(spec.oauth2 is not None for spec in cfg.broker.secrets.values()):
        tls()

    def vet(addresses: list[str], port: int) -> AddressVerdict:
        return vet_addresses(addresses, port, private_allow=OPERATOR_ENDPOINT_NETWORKS, own_listeners=own_listeners)
    return lambda: VettedTransport(resolver, vet, tls(), proxy=cfg.egress.upstream_proxy, proxy_auth=proxy_auth)


def _token_state(cfg: Config, store: Store) -> StoreTokenState | None:
    """OAuth2 secrets' tokens and refresh lease in the store (shared by replicas), sealed with the data dir's key."""
    if not any(s.oauth2 is not None for s in cfg.broker.secrets.values()):
        return None
    return StoreTokenState(store, *LocalBackend(cfg.data_dir).sealer())


def _resolver(cfg: Config, given: Resolver | None = None) -> Resolver:
    """The resolver of upstream dials, with the guard installed on the loop (`given`: a test's own)."""
    system = SystemResolver(install_guard(asyncio.get_running_loop()))
    if given is not None:
        return given
    return StaticResolver(cfg.egress.resolve, system) if cfg.egress.resolve else system


@dataclass
class Services:
    """The services of one sandgate process, built and started by `open_services` (for `serve`, and for the tests
    that drive them in process: tests/support/services.py), before any listener or background task exists."""
    cfg: Config
    store: Store
    feed: ChangeFeed
    metrics: Metrics
    checkpoints: CheckpointWriter
    audit: AuditLog
    signer: TokenSigner
    tokens: TokenVerifier
    revocations: RevocationService
    decision_log: DecisionLog | None
    engine: PolicyEngine
    dial_resolver: Resolver
    own_listeners: list[tuple[str, int]]     # filled once the listeners are bound
    proxy_secrets: CachedResolver | None     # egress.upstream_proxy's credentials
    broker: Broker
    placeholders: PlaceholderRegistry
    approvals: ApprovalQueue
    sessions: SessionRegistry
    policy_revisions: PolicyRevisions
    toolcalls: ToolCallGate


async def open_services(cfg: Config, stack: AsyncExitStack, *, resolver: Resolver | None = None,
                        store: Store | None = None, environ: Mapping[str, str] | None = None,
                        writer_process: bool = False) -> Services:
    """Build and start the services; `stack` closes them. A test may give its own upstream `resolver`, a `store`
    already open (replicas sharing one), and the `environ` the broker's env: secrets are read from.
    `writer_process`: the audit and decision-log rows written by a process of their own (gateway/store/offload.py;
    `serve` with SANDGATE_WRITER=process), when the store is one another process can open."""
    if not cfg.data_dir.exists():
        cfg.data_dir.mkdir(parents=True, mode=0o700)
    signer = TokenSigner(load_or_create_key(cfg.data_dir))
    revocation_set = Revocations()
    tokens = TokenVerifier(signer, revocation_set)

    if store is None:
        store = Store(cfg.store_url)
        stack.callback(store.close)
        await store.open()
        if store.join_writers():    # before anything is written: another process on the same SQLite file sees it
            # and stops keeping tool-call memory at its next poll: let that poll happen before this one writes.
            await asyncio.sleep(3 * PRESENCE_POLL_S)
    # Replicas (and --workers processes) on PostgreSQL hear each other's changes by LISTEN/NOTIFY.
    feed: ChangeFeed = PgChangeFeed(store.libpq_url()) if store.is_postgres else LocalChangeFeed()
    metrics = Metrics()
    checkpoints = CheckpointWriter(store, load_or_create_audit_key(cfg.data_dir), cfg.audit.checkpoint_rows,
                                   cfg.audit.checkpoint_interval_s)
    stack.push_async_callback(checkpoints.close)           # after the audit log's last flush: seals the tail
    target = target_of(store) if writer_process else None
    offload = WriterProcess(target) if target is not None else None
    if offload is not None:
        stack.push_async_callback(offload.close)           # after the audit log's and the decision log's last flush
    audit = AuditLog(store, max_pending=cfg.audit.max_pending, offload=offload)
    audit.start()
    stack.push_async_callback(audit.close)
    revocations = RevocationService(store, revocation_set, audit, feed)
    await revocations.load()
    decision_log = DecisionLog(store, offload=offload) if cfg.policy.decision_log else None
    if decision_log is not None:
        decision_log.start()
        stack.push_async_callback(decision_log.close)      # after the engine: its last decisions are written
    engine = make_engine(cfg.policy, decision_log)
    stack.push_async_callback(engine.close)
    await engine.start()
    dial_resolver = _resolver(cfg, resolver)
    own_listeners: list[tuple[str, int]] = []        # filled by open_gateway, once the listeners are bound
    up = cfg.egress.upstream_proxy
    proxy_secrets = _operator_secrets([up.user, up.password], cfg) if up is not None else None
    broker = Broker.from_specs(cfg.broker.secrets, cfg.broker.vault.as_mapping(), cfg.data_dir,
                               normalise_host=normalise_host, cache_ttl_s=cfg.broker.cache_ttl_s, environ=environ,
                               oauth2_transport=_token_transport(cfg, dial_resolver, own_listeners,
                                                                 _proxy_auth(cfg, proxy_secrets)),
                               token_state=_token_state(cfg, store))
    await broker.load_local_specs()
    placeholders = PlaceholderRegistry()
    approvals = ApprovalQueue(store, audit, metrics, cfg.approvals, feed, max_pending=cfg.sessions.max_pending_approvals,
                              access=AccessRules(cfg.approvals.max_grant_ttl_s, cfg.egress.resolve,
                                                 cfg.egress.private_allow))
    if cfg.notify.webhook_url:
        approvals.outbox = Outbox.entry         # each filing and decision writes its event in the same transaction
    sessions = SessionRegistry(store, SessionCache(), placeholders, audit, approvals, feed, budgets=cfg.budgets,
                               lifetimes=(cfg.sessions.max_lifetime_s, cfg.sessions.ephemeral_max_lifetime_s))
    await sessions.load()
    stack.push_async_callback(_last_counts, sessions)      # after the proxy and the API have stopped
    policy_revisions = PolicyRevisions(engine, feed)
    toolcalls = ToolCallGate(sessions, approvals, audit, metrics, engine, FactsMemo())
    feed.subscribe("session", sessions)
    feed.subscribe("approval", approvals)
    feed.subscribe("revocation", revocations)
    feed.subscribe("policy", policy_revisions)
    await feed.start()
    stack.push_async_callback(feed.close)
    return Services(cfg=cfg, store=store, feed=feed, metrics=metrics, checkpoints=checkpoints, audit=audit,
                    signer=signer, tokens=tokens, revocations=revocations, decision_log=decision_log, engine=engine,
                    dial_resolver=dial_resolver, own_listeners=own_listeners, proxy_secrets=proxy_secrets,
                    broker=broker,
                    placeholders=placeholders, approvals=approvals, sessions=sessions,
                    policy_revisions=policy_revisions, toolcalls=toolcalls)


@dataclass
class Egress:
    """The egress proxy's addons on the services (`chain()`: in the order mitmproxy runs them), and the pieces they
    share."""
    recorder: FlowRecorder
    screen: SecretScreen
    held: HeldLimits
    packages: PackageFirewall
    gate: LayerGate
    egress: EgressAddon
    hold: HoldAddon
    package_index: PackageIndexAddon
    injection: InjectionAddon
    drain: Drain                             # SIGTERM: what is held may still be decided, nothing new is
    extra: list[object]                      # by configuration: the OAuth2 retry, the upstream proxy

    def chain(self) -> list[object]:
        addons: list[object] = [self.gate, self.egress, self.hold, self.package_index, self.injection]
        for addon in self.extra:
            if isinstance(addon, OAuth2RetryAddon):
                addons.insert(-1, addon)     # before the credential addon: the answer the sandbox gets (the
            else:                            # retry's or the 401) is scrubbed like any
                addons.append(addon)         # last: the upstream proxy is handed requests already decided,
        return addons                        # vetted and injected


async def open_egress(cfg: Config, svc: Services, resolver: Resolver) -> Egress:
    """The egress addons on `svc`, dialling upstreams with `resolver` (the package firewall's index read)."""
    packages = PackageFirewall(PackageStore(svc.store), registries_for(
        {"host": h, "ecosystem": e} for h, e in cfg.egress.package_registries), cfg.egress.package_max_bytes)
    await packages.refresh()
    recorder = FlowRecorder(svc.audit, svc.metrics, svc.sessions, svc.engine)
    held = HeldLimits(cfg.sessions.max_held, cfg.egress.max_held_bytes)
    screen = SecretScreen(svc.placeholders, svc.broker, svc.sessions, recorder, svc.metrics)
    egress = EgressAddon(EgressDeps(settings=cfg.egress, tokens=svc.tokens, sessions=svc.sessions, engine=svc.engine,
                                    audit=svc.audit, metrics=svc.metrics, resolver=resolver, recorder=recorder,
                                    screen=screen, packages=packages, own_listeners=svc.own_listeners,
                                    held=held, connections=ConnectionLimits(cfg.sessions.max_connections),
                                    aws_models=ServiceModels(), grants=svc.approvals.grants_for,
                                    inside=functools.partial(inside.answer, svc.approvals)))
    gate = LayerGate(raw_tcp=cfg.egress.raw_tcp, passthrough=cfg.egress.passthrough, audit=svc.audit,
                     session_of=egress.session_of, connection_valid=egress.connection_valid,
                     on_refused=lambda code: svc.metrics.decision("egress", "deny"), tunnel_of=egress.tunnel_of,
                     proxied=_proxied(cfg.egress.upstream_proxy), vetted=egress.vetted_now,
                     granted_only=egress.granted_only)
    extra: list[object] = []
    up, proxy_secrets = cfg.egress.upstream_proxy, svc.proxy_secrets
    if svc.broker.oauth2 is not None:
        extra.append(OAuth2RetryAddon(svc.broker.oauth2, resolver, egress.vet, _upstream_tls(cfg), recorder,
                                      cfg.egress.inspect_max_bytes, cfg.egress.upstream_proxy,
                                      _proxy_auth(cfg, proxy_secrets)))
    if up is not None:
        extra.append(UpstreamProxyAddon(up, proxy_secrets, egress.check_address, recorder))
    drain = Drain()
    return Egress(recorder=recorder, screen=screen, held=held, packages=packages, gate=gate, egress=egress,
                  hold=HoldAddon(svc.approvals, svc.sessions, svc.placeholders, recorder, cfg.egress, held, drain),
                  package_index=PackageIndexAddon(packages, held),
                  injection=InjectionAddon(svc.broker, svc.placeholders, screen, recorder, svc.metrics,
                                           AwsSigning(svc.broker, cfg.egress.inspect_max_bytes)),
                  drain=drain, extra=extra)


def preload_parsers(cfg: Config, broker: Broker) -> None:
    """What the first wire statement (the SQL grammars) or AWS-signed request (botocore's signers) would import
    on the event loop, 0.1-0.3 s of CPU each with every request stalled behind it: imported now, on a thread,
    when the configuration says they will be needed (databases; a secret of kind `aws`)."""
    if cfg.databases:
        from gateway.toolcalls.sqlentry import load_grammars

        load_grammars()
    if any(spec.kind == "aws" for spec in broker.specs.values()):
        from broker.sigv4 import load_botocore

        load_botocore()


async def open_gateway(cfg: Config, stack: AsyncExitStack, worker: bool = False,
                       resolver: Resolver | None = None) -> Listening:
    """Build and start everything; `stack` stops it. Raises when something cannot start. A `worker` (of `serve
    --workers N`) leaves the harness token and listen.json to its supervisor."""
    svc = await open_services(cfg, stack, resolver=resolver,
                              writer_process=os.environ.get("SANDGATE_WRITER", "thread") == "process")
    await asyncio.to_thread(preload_parsers, cfg, svc.broker)
    svc.engine.watch()
    store, feed, metrics, audit, engine = svc.store, svc.feed, svc.metrics, svc.audit, svc.engine
    signer, tokens, sessions, approvals, broker = svc.signer, svc.tokens, svc.sessions, svc.approvals, svc.broker
    toolcalls, revocations, own_listeners = svc.toolcalls, svc.revocations, svc.own_listeners
    out = await open_egress(cfg, svc, svc.dial_resolver)
    egress, packages, drain, addons = out.egress, out.packages, out.drain, out.chain()
    transparent = cfg.proxy.transparent
    dns: DnsServer | None = None
    dns_addr: tuple[str, int] | None = None
    if transparent is not None:
        # Transparent capture (`sandgate run --isolate`): a second listener in the same master, and the filtering
        # resolver whose synthetic addresses it reads back.
        from gateway.egress.dns import DnsServer, open_resolver

        names = SyntheticNames()
        addons.insert(0, TransparentAddon(egress, sessions, names))
        await approvals.load_index()            # grants' hosts resolve from the first query (never waited for)
        dns = DnsServer(sessions, names, audit, metrics,
                        granted=lambda sid: approvals.granted_hosts(sid, time.time()))
        dns_transport, sockname = await open_resolver(dns, transparent.dns_listen)
        stack.callback(dns_transport.close)
        dns_addr = (sockname[0], sockname[1])
    bound, close_listeners = await _start_proxy(stack, addons, MasterSettings(
        listen=cfg.proxy.listen, confdir=cfg.data_dir, upstream_ca=cfg.egress.upstream_ca,
        transparent=transparent.listen if transparent is not None else None))
    proxy_addr = bound["regular"]
    transparent_addr = bound.get("transparent")
    ca_pem = sandbox_bundle((cfg.data_dir / "mitmproxy-ca-cert.pem").read_text())
    endpoint = None
    if transparent is not None and transparent_addr is not None and dns_addr is not None:
        endpoint = TransparentEndpoint(_hostport(transparent_addr), _hostport(dns_addr), transparent.sources)

    pg_listen = cfg.proxy.postgres_listen
    pg_endpoint = None
    if pg_listen is not None:
        from gateway.postgres.server import postgres_socket

        pg_sock = postgres_socket(pg_listen, reuse_port=worker)        # bound now: its port goes into the sessions' URLs
        pg_bound = pg_sock.getsockname()[:2]
        pg_endpoint = PostgresEndpoint(postgres_authority(cfg.proxy.postgres_advertise, pg_bound),
                                       {n: d.env_name for n, d in cfg.databases.items()})
    app = create_app(ApiServices(
        tokens=tokens, signer=signer, sessions=sessions, approvals=approvals, audit=audit, metrics=metrics,
        engine=engine, broker=broker, revocations=revocations,
        proxy=ProxyEndpoint(proxy_authority(cfg.proxy.advertise_url, proxy_addr), ca_pem, endpoint, pg_endpoint),
        page=PageSettings(oidc=cfg.oidc, hold_timeout_s=cfg.egress.hold_timeout_s,
                          reuse_window_s=cfg.approvals.reuse_window_s,
                          trusted_proxies=cfg.api.trusted_proxies), toolcalls=toolcalls,
        decisions=DecisionStore(store) if svc.decision_log is not None else None, drain=drain))
    api_addr = await _start_api(stack, app, cfg.api.listen)
    postgres_addr = None
    if pg_listen is not None and pg_endpoint is not None:
        postgres_addr = await _start_postgres(stack, cfg, pg_sock, pg_endpoint.advertise, sessions, approvals,
                                              audit, metrics, broker, toolcalls, feed)
    own_listeners[:] = [proxy_addr, api_addr] + [a for a in (transparent_addr, dns_addr, postgres_addr)
                                                 if a is not None]

    if not cfg.api.harness_token_file and not worker:
        token = signer.mint("harness", "harness", HARNESS_TOKEN_TTL_S)
        write_private(cfg.data_dir / "harness.token", token.encode() + b"\n")
    listen = {"proxy": f"{proxy_addr[0]}:{proxy_addr[1]}", "api": f"{api_addr[0]}:{api_addr[1]}"}
    if endpoint is not None:
        listen |= {"transparent": endpoint.listen, "dns": endpoint.dns}
    if postgres_addr is not None:
        listen["postgres"] = _hostport(postgres_addr)
    if not worker:
        (cfg.data_dir / "listen.json").write_text(json.dumps(listen))

    notified = isinstance(feed, PgChangeFeed)
    _background(stack, _presence(store), "sandgate-presence")
    _background(stack, _housekeeping(sessions, approvals, metrics, dns, 5), "sandgate-housekeeping")
    _background(stack, revocations.poll(2.0 if notified else 0.25), "sandgate-revocations")
    _background(stack, svc.policy_revisions.announce(), "sandgate-policy-revisions")
    _background(stack, packages.poll(), "sandgate-packages")
    _background(stack, svc.checkpoints.run(), "sandgate-audit-checkpoints")
    if cfg.notify.webhook_url:
        notifier = _notifier(cfg, store, audit, metrics, api_addr)
        _background(stack, notifier.run(approvals.subscribe()), "sandgate-notify")
    log.info("sandgate ready: proxy %s:%d, api %s:%d, policy rev %s", *proxy_addr, *api_addr, engine.rev)
    return Listening(proxy_addr, api_addr, transparent_addr, dns_addr, postgres_addr, drain, close_listeners)


async def _start_postgres(stack: AsyncExitStack, cfg: Config, sock: socket.socket, advertise: str,
                          sessions: SessionRegistry, approvals: ApprovalQueue, audit: AuditLog, metrics: Metrics,
                          broker: Broker, toolcalls: ToolCallGate, feed: ChangeFeed) -> tuple[str, int]:
    """The PostgreSQL gateway (gateway/postgres/): its statements are decided by the tool-call gate, in this
    process, with via "postgres" (gateway/postgres/gate.py)."""
    from gateway.postgres.connection import GatewayDeps
    from gateway.postgres.gate import GateJudge
    from gateway.postgres.registry import ConnectionRegistry
    from gateway.postgres.secrets import database_secrets
    from gateway.postgres.server import PostgresGateway, SessionLogins, StatementRecorder, server_tls

    judge = GateJudge(toolcalls, approvals)
    secrets = database_secrets(broker.resolver, cfg.databases.values(), cfg.broker.vault.as_mapping(),
                               cfg.broker.cache_ttl_s)
    registry = ConnectionRegistry()

    async def password(db: DatabaseSettings) -> str:
        return await secrets.get(db.password)

    deps = GatewayDeps(databases=cfg.databases, logins=SessionLogins(sessions), password=password, judge=judge,
                       recorder=StatementRecorder(audit, metrics), registry=registry,
                       tls=server_tls(cfg.data_dir, advertise.rsplit(":", 1)[0].strip("[]")),
                       elsewhere=lambda pid, key: feed.publish(Change("pgcancel", f"{pid}:{key}", "cancel")))
    gateway = PostgresGateway(deps, sessions)
    feed.subscribe("pgcancel", gateway)
    sessions.watch_ends(gateway.session_ended)
    bound = await gateway.start(cfg.proxy.postgres_listen or ("127.0.0.1", 0), sock=sock)
    stack.push_async_callback(gateway.close)
    _background(stack, gateway.sweep(), "sandgate-postgres-sweep")
    log.info("postgres gateway on %s (advertised as %s)", _hostport(bound), advertise)
    return bound


GC_YOUNG = 10_000
LAST_SYNC_TIMEOUT_S = 5.0
PRESENCE_POLL_S = 0.2


def _settle_heap() -> None:
    """Move everything alive after start-up (modules, mitmproxy, the engines, the caches' first entries) out of
    the collector's sight. A full collection otherwise walks all of it: 100-130 ms with every request of the
    proxy and the API stalled behind it (measured with tool calls at 1,200/s: it was their p99).

    The youngest generation is then collected every GC_YOUNG net new container objects instead of every 700.
    Nearly everything a request allocates is freed by reference counting before that, and a young collection
    costs in proportion to what is still alive in it, so far fewer collections do the same work at a fraction
    of the fixed cost (4-5% of the CPU of a tool call, measured). The older generations keep their ratios."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, older, oldest)


async def run_gateway(cfg: Config, worker: bool = False) -> int:
    """`sandgate serve`: run until SIGINT or SIGTERM, then stop cleanly (pending audit flushed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as stack:
        try:
            listening = await open_gateway(cfg, stack, worker)
        except Exception as exc:  # noqa: BLE001 - report and exit non-zero, no traceback for users
            log.error("sandgate failed to start: %s", exc)
            log.debug("start failure", exc_info=True)
            return 1
        extra = (f"  transparent {_hostport(listening.transparent)}  dns {_hostport(listening.dns)}"
                 if listening.transparent is not None and listening.dns is not None else "")
        print(f"sandgate: proxy {listening.proxy[0]}:{listening.proxy[1]}  api {listening.api[0]}:"
              f"{listening.api[1]}{extra}  data {cfg.data_dir}", flush=True)
        _settle_heap()
        await stop.wait()
        await _drain(listening, cfg.egress.drain_s, loop)
        log.info("sandgate stopping")
    return 0


async def _drain(listening: Listening, limit_s: float, loop: asyncio.AbstractEventLoop) -> None:
    """SIGTERM: no new proxy connection, /readyz 503, new asks refused; requests already held may be decided
    for `limit_s` (a second signal ends that at once); those still held are then answered 503 sandgate.stopping."""
    drain = listening.drain
    drain.begin()
    listening.close_listeners()
    again = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, again.set)
    held = drain.held
    if held and limit_s > 0:
        log.info("sandgate draining: %d held requests may still be decided for %.0f s", held, limit_s)
        await drain.settle(limit_s, again)
    drain.stop()
    if drain.held:                              # those still waiting are answered 503, those let through answered
        if drain.waiting:
            log.info("sandgate stopping: %d held requests answered 503 sandgate.stopping", drain.waiting)
        await drain.settle(2.0, again)
    if held:
        await asyncio.sleep(0.2)                # the last answers are written before the proxy closes
