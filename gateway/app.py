"""The Gateway: one process, one asyncio loop — mitmproxy egress proxy, aiohttp API and page, store, policy."""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from typing import Any

from aiohttp import web

from gateway.audit import AuditLog
from gateway.auth import (HARNESS_TOKEN_TTL_S, Revocations, TokenSigner, TokenVerifier, load_or_create_key,
                          write_private)
from gateway.config import Config
from gateway.egress.addresses import parse_networks
from gateway.egress.resolver import StaticResolver, SystemResolver, install_guard
from gateway.egress.tls import sandbox_bundle
from gateway.metrics import Metrics
from gateway.policy.factory import make_engine
from gateway.sessions import SessionCache
from gateway.store import Store, StoreError

log = logging.getLogger("sandgate")
REVOCATION_POLL_S = 0.25


class Gateway:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.metrics = Metrics()
        self.store = Store(cfg.store_url)
        self.sessions = SessionCache()
        self.audit = AuditLog(self.store, max_pending=int(cfg.raw["audit"]["max_pending"]))
        self.engine = make_engine(cfg)
        self.signer: TokenSigner | None = None
        self.revocations = Revocations()
        self.tokens: TokenVerifier | None = None
        self.private_allow = parse_networks(cfg.raw["egress"]["private_allow"])
        self.own_listeners: list[tuple[str, int]] = []
        self.inspect_max_bytes = int(cfg.raw["egress"]["inspect_max_bytes"])
        self.resolver: Any = None
        self.broker: Any = None
        self.broker_hooks: Any = None
        self.approvals: Any = None
        self.ca_pem = ""
        self.proxy_addr: tuple[str, int] | None = None
        self.api_addr: tuple[str, int] | None = None
        self.started_at = time.time()
        self._master: Any = None
        self._master_task: asyncio.Task | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.cfg
        if not cfg.data_dir.exists():
            cfg.data_dir.mkdir(parents=True, mode=0o700)
        self.signer = TokenSigner(load_or_create_key(cfg.data_dir))
        self.tokens = TokenVerifier(self.signer, self.revocations)
        await self.store.open()
        self.revocations.merge(await self.store.list_revocations())
        self.sessions.replace_all(await self.store.list_sessions())
        await self.engine.start()
        self.engine.watch()
        self.audit.start()
        loop = asyncio.get_running_loop()
        original = install_guard(loop)
        system = SystemResolver(original)
        overrides = cfg.raw["egress"].get("resolve") or {}
        self.resolver = StaticResolver(overrides, system) if overrides else system
        self._setup_optional()
        if self.broker_hooks is not None:
            await self.broker_hooks.load_local_specs()
        await self._start_proxy()
        await self._start_api()
        self.own_listeners[:] = [self.proxy_addr, self.api_addr]
        self._write_runtime_files()
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="sandgate-housekeeping"))
        self._tasks.append(asyncio.create_task(self._poll_revocations(), name="sandgate-revocations"))
        log.info("sandgate ready: proxy %s:%d, api %s:%d, policy rev %s", *self.proxy_addr, *self.api_addr,
                 self.engine.rev)

    def _setup_optional(self) -> None:
        """Credential broker and approval queue."""
        from gateway.approvals import ApprovalQueue
        from gateway.broker_glue import setup_broker

        setup_broker(self)
        self.approvals = ApprovalQueue(self)

    async def _start_proxy(self) -> None:
        from gateway.egress.proxy import build_master

        host, port = self.cfg.proxy_listen
        self._master, ready, _addon = build_master(self, host, port)
        self._master_task = asyncio.create_task(self._master.run(), name="sandgate-proxy")
        waiter = asyncio.create_task(ready.event.wait())
        done, _ = await asyncio.wait({waiter, self._master_task}, timeout=30,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
            raise RuntimeError(f"the egress proxy could not start on {host}:{port}")
        addrs = self._master.addons.get("proxyserver").listen_addrs()
        if not addrs:
            raise RuntimeError(f"the egress proxy is not listening on {host}:{port}")
        self.proxy_addr = (addrs[0][0], addrs[0][1])
        ca_file = self.cfg.data_dir / "mitmproxy-ca-cert.pem"
        self.ca_pem = sandbox_bundle(ca_file.read_text())

    async def _start_api(self) -> None:
        from gateway.api.routes import create_app

        host, port = self.cfg.api_listen
        self._runner = web.AppRunner(create_app(self), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        self.api_addr = (sock[0], sock[1])

    def _write_runtime_files(self) -> None:
        ddir = self.cfg.data_dir
        token_file = self.cfg.raw["api"]["harness_token_file"]
        if not token_file:
            token = self.signer.mint("harness", "harness", HARNESS_TOKEN_TTL_S)
            write_private(ddir / "harness.token", token.encode() + b"\n")
        listen = {"proxy": f"{self.proxy_addr[0]}:{self.proxy_addr[1]}",
                  "api": f"{self.api_addr[0]}:{self.api_addr[1]}"}
        (ddir / "listen.json").write_text(json.dumps(listen))

    async def _housekeeping(self) -> None:
        tick = 0
        store_ok = True
        while True:
            await asyncio.sleep(1.0)
            tick += 1
            try:
                if tick % 5 == 0:
                    await self.refresh_sessions()
                self.metrics.sessions_live.set(self.sessions.count_live())
                if self.approvals is not None:
                    await self.approvals.tick()
                store_ok = True
            except StoreError:
                if store_ok:
                    log.warning("the store is unreachable; housekeeping retries every second")
                store_ok = False
            except Exception:  # noqa: BLE001 - keep housekeeping alive
                log.exception("housekeeping failed")

    async def _poll_revocations(self, interval_s: float = REVOCATION_POLL_S) -> None:
        """Token revocations made on any replica reach this one within a second."""
        failing = False
        while True:
            await asyncio.sleep(interval_s)
            try:
                # Re-read a few ids below the last one seen: a concurrent insert may commit out of id order.
                self.revocations.merge(await self.store.list_revocations(max(0, self.revocations.last_id - 50)))
                failing = False
            except Exception:  # noqa: BLE001 - keep polling; the store may come back
                if not failing:
                    log.warning("cannot read token revocations from the store; retrying")
                failing = True

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._runner is not None:
            await self._runner.cleanup()
        if self._master is not None:
            self._master.shutdown()
            if self._master_task is not None:
                try:
                    await asyncio.wait_for(self._master_task, 5)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                    self._master_task.cancel()
        await self.audit.close()
        await self.engine.close()
        if self.broker is not None and hasattr(self.broker, "close"):
            await self.broker.close()
        self.store.close()

    async def live_session(self, sid: str | None) -> dict | None:
        """The session if it is live. A session this process has not seen (created by another replica) is
        read from the store once; `refresh_sessions` brings changes made elsewhere within seconds."""
        if not sid:
            return None
        row = self.sessions.get(sid)
        if row is None:
            row = await self.store.get_session(sid)
            if row is None:
                return None
            self.sessions.put(row)
            if self.broker_hooks is not None:
                self.broker_hooks.session_added(row)
        return self.sessions.live(sid)

    async def refresh_sessions(self) -> None:
        """Merge the store's view into the cache (deletions, freezes, new sessions of other replicas)."""
        for row in await self.store.list_sessions():
            known = self.sessions.get(row["id"])
            if known is not None and (known == row or known.get("updated_at", 0) >= row.get("updated_at", 0)):
                continue
            self.sessions.put(row)
            if self.broker_hooks is not None:
                (self.broker_hooks.session_removed if row.get("deleted_at") else self.broker_hooks.session_added)(row)

    def keep(self, task: asyncio.Task) -> None:
        """Keep a reference to a background task until it finishes."""
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    # -- session helpers used by API and proxy ---------------------------------------------------
    @property
    def proxy_advertise(self) -> str:
        adv = self.cfg.raw["proxy"]["advertise_url"].strip()
        if adv:
            return adv.split("://", 1)[-1].rstrip("/")
        host, port = self.proxy_addr
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def run_gateway(cfg: Config) -> int:
    gw = Gateway(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gw.start()
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero, no traceback for users
        log.error("sandgate failed to start: %s", exc)
        log.debug("start failure", exc_info=True)
        await gw.stop()
        return 1
    print(f"sandgate: proxy {gw.proxy_addr[0]}:{gw.proxy_addr[1]}  api {gw.api_addr[0]}:{gw.api_addr[1]}"
          f"  data {cfg.data_dir}", flush=True)
    await stop.wait()
    log.info("sandgate stopping")
    await gw.stop()
    return 0

