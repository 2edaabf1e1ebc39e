"""sandgate's services in process, for tests without sockets, built by the composition root's own builders
(`gateway/app.py`: `open_services`, then `open_egress` for the proxy's addons), with test overrides only: a real
SQLite store under the test's directory, the embedded policy engine on one thread, the broker's `env:` secrets
read from the test's own `environ`, and no name resolved outside the test's map."""
from __future__ import annotations

import dataclasses
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gateway import app
from gateway.config import ApprovalSettings, EgressSettings, SessionSettings, load_config
from gateway.egress.resolver import StaticResolver
from gateway.sessions.spec import MAX_TTL_S, parse_session_spec
from gateway.store import Store

# The engine of `serve` runs policies in worker processes; in process, one thread evaluates them.
TEST_POLICY = {"isolation": "thread", "workers": 1}


class NoDns:
    """Names outside the test's static map do not resolve (tests never reach a real resolver)."""

    async def resolve(self, host: str, port: int) -> list[str]:
        raise OSError(f"{host} is not in this test's name map")


@dataclass
class Services:
    """`gateway.app.Services` (every attribute of it reads through: `store`, `audit`, `approvals`, `sessions`,
    `broker`, `engine`, `toolcalls`, ...) and what tests ask of them."""
    built: app.Services

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built, name)

    async def events(self, session: str | None = None, kind: str | None = None) -> list[dict]:
        return await self.built.audit.read(session=session, kind=kind)

    async def session(self, by: str = "harness:test", **body: Any) -> tuple[dict, str]:
        """A new session (row, session token), as POST /v1/sessions makes one."""
        spec = parse_session_spec(body, self.built.broker.specs)
        placeholders = await self.built.broker.new_placeholders(spec.secrets) if spec.secrets else {}
        row = await self.built.sessions.create(spec, placeholders, by)
        token = self.built.signer.mint("session", row["id"], MAX_TTL_S, session_id=row["id"], workload=spec.workload)
        return row, token


async def open_services(stack: AsyncExitStack, tmp: Path, *, secrets: dict | None = None,
                        environ: Mapping[str, str] | None = None, approvals: ApprovalSettings | None = None,
                        store: Store | None = None, config: dict | None = None) -> Services:
    """The services with their data under `tmp` (and their store there, or `store`, shared as replicas share one).
    `config`: the configuration's sections as a config file would give them (`{"policy": {"dir": ...}}`)."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = config or {}
    overrides = {**config, "secrets": secrets or {}, "policy": {**TEST_POLICY, **config.get("policy", {})}}
    cfg = load_config(None, tmp / "data", environ={}, overrides=overrides)
    if approvals is not None:
        cfg = dataclasses.replace(cfg, approvals=approvals)
    built = await app.open_services(cfg, stack, resolver=StaticResolver({}, NoDns()), store=store,
                                    environ=environ or {})
    return Services(built)


async def egress_addons(stack: AsyncExitStack, services: Services, settings: EgressSettings,
                        names: dict[str, list[str]], limits: SessionSettings = SessionSettings()) -> app.Egress:
    """The egress addons on `services` as `serve` builds them (`.chain()`: in the proxy's order), with these
    egress and session settings; `names` is the only DNS there is."""
    cfg = dataclasses.replace(services.cfg, egress=settings, sessions=limits)
    return await app.open_egress(cfg, services.built, StaticResolver(names, NoDns()))
