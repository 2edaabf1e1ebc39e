"""The harness SDK: sessions, tool-call checks (waiting on approvals), guarded tools, event streams.

    async with Client() as sg, sg.session(allow=["pypi.org"]) as session:
        decision = await session.check("shell", {"command": "pip install requests"})

`Client()` finds sandgate the way the CLI does: `api_url` / `SANDGATE_API_URL` / the data dir's `listen.json`
/ `http://127.0.0.1:8700`, and the token `token` / `SANDGATE_TOKEN` / the data dir's `harness.token` (data dir:
`data_dir` / `SANDGATE_DATA_DIR` / `./.sandgate`). Async on aiohttp; `sandgate.sync.SyncClient` wraps it.
Requests go through `sandgate.transport.Transport`, the one client core every program of the harness side uses.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping, TypeVar

from sandgate.transport import DEFAULT_API_URL, Transport, resolve_endpoint  # noqa: F401 - DEFAULT_API_URL: kept here
from sandgate.types import (Approval, Conflict, Decision, Event, NotFound, SandgateError, SessionInfo, ToolDenied,
                            Unauthorized, Unavailable)

__all__ = ["Client", "Session", "Decision", "Approval", "Event", "SessionInfo", "SandgateError", "Unauthorized",
           "NotFound", "Conflict", "Unavailable", "ToolDenied", "resolve_endpoint"]

APPROVAL_POLL_S = 60.0           # one long poll of GET /v1/approvals/{id}?wait= (the server caps it at 300)
EVENTS_POLL_S = 25.0             # one long poll of GET /v1/events?wait= (the server caps it at 60)
F = TypeVar("F", bound=Callable[..., Any])


class Client:
    """An async client of one sandgate. Use as `async with Client() as sg:` (or call `close()`)."""

    def __init__(self, api_url: str | None = None, token: str | None = None, *,
                 data_dir: str | os.PathLike | None = None, timeout_s: float = 30.0):
        self.api_url, self.token = resolve_endpoint(api_url, token, data_dir)
        self.timeout_s = timeout_s
        self.transport = Transport(self.api_url, self.token, timeout_s)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.transport.close()

    # -- transport (sandgate/transport.py) ------------------------------------------------------------
    async def request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None) -> Any:
        """One API call: the decoded JSON (None for 204). Raises a `SandgateError` subclass otherwise."""
        return await self.transport.request(method, path, body, timeout_s=timeout_s)

    async def health(self) -> dict:
        return await self.request("GET", "/healthz", timeout_s=5.0)

    # -- sessions --------------------------------------------------------------------------------
    async def create_session(self, *, workload: str = "ephemeral", allow: Iterable[str] = (),
                             secrets: Iterable[str] = (), labels: Mapping[str, str] | None = None,
                             databases: Iterable[str] = (),
                             ttl_s: int | None = None, workspace: str | None = None,
                             ca_path: str | None = None, source: str | None = None) -> "Session":
        """`source`: bind the session to the address its sandbox connects from (transparent capture)."""
        body: dict[str, Any] = {"workload": workload, "allow": list(allow), "secrets": list(secrets),
                                "labels": dict(labels or {})}
        if databases:
            body["databases"] = list(databases)
        for key, value in (("ttl_s", ttl_s), ("workspace", workspace), ("ca_path", ca_path), ("source", source)):
            if value is not None:
                body[key] = value
        return Session(self, SessionInfo.from_json(await self.request("POST", "/v1/sessions", body)))

    @asynccontextmanager
    async def session(self, **spec: Any) -> AsyncIterator["Session"]:
        """A session for the block: created on entry, ended on exit (also on error or cancellation)."""
        session = await self.create_session(**spec)
        try:
            yield session
        finally:
            await asyncio.shield(self._end_quietly(session.id))

    async def _end_quietly(self, sid: str) -> None:
        try:
            await self.end_session(sid)
        except NotFound:
            pass

    async def get_session(self, sid: str) -> SessionInfo:
        return SessionInfo.from_json(await self.request("GET", f"/v1/sessions/{sid}"))

    async def list_sessions(self, status: str | None = None) -> list[SessionInfo]:
        rows = await self.request("GET", "/v1/sessions" + (f"?status={status}" if status else ""))
        return [SessionInfo.from_json(r) for r in rows]

    async def patch_session(self, sid: str, *, frozen: bool | None = None, labels: Mapping[str, str] | None = None,
                            ttl_s: int | None = None, budgets: Mapping[str, int] | None = None) -> SessionInfo:
        """`budgets`: those keys of the session's own budgets (requests, bytes_out, bytes_in, toolcalls,
        denials_per_10m; 0 = none), the others kept."""
        body = {k: v for k, v in (("frozen", frozen), ("labels", labels), ("ttl_s", ttl_s), ("budgets", budgets))
                if v is not None}
        return SessionInfo.from_json(await self.request("PATCH", f"/v1/sessions/{sid}", body))

    async def renew_session(self, sid: str, ttl_s: int) -> SessionInfo:
        """The session now expires `ttl_s` seconds from now (its token and env stay valid)."""
        return await self.patch_session(sid, ttl_s=ttl_s)

    async def end_session(self, sid: str) -> None:
        """Token, placeholders and leases die at once; pending approvals are cancelled."""
        await self.request("DELETE", f"/v1/sessions/{sid}")

    # -- tool calls and approvals ----------------------------------------------------------------
    async def check(self, sid: str, tool: str, args: Mapping[str, Any] | None = None, *, step: int | None = None,
                    mcp: Mapping[str, Any] | None = None, wait_s: float = 600.0,
                    on_ask: Callable[[str, str], Any] | None = None) -> Decision:
        """Ask the tool-call policy whether session `sid` may call `tool` with `args`; the answer is final.

        `tool` and `args` are the call as the agent made it (`"shell"`, `{"command": "rm -rf build"}`); sandgate
        parses them itself. `step` numbers the agent's step (shown in the audit and on the approval page);
        `mcp` is the MCP context of a call made through an MCP server.

        Returns a `Decision` whose `action` is "allow" or "deny" (`allowed`, `reasons`, `codes`, `id`: the tool
        call's id, which the decision log and the audit trail carry). When the policy asks, a person decides on
        the approval page: `on_ask(approval_id, page_url)` is called first (a function or a coroutine function;
        tell the user where to look), then the call waits up to `wait_s` seconds. Approved is an allow (the
        reasons say by whom); denied, expired or still pending when `wait_s` runs out is a deny.

        Cancelling the awaiting task stops the wait (the approval stays in the queue). Raises `SandgateError`
        subclasses for API failures (`Unauthorized`, `NotFound` for an unknown session, `Unavailable`)."""
        body: dict[str, Any] = {"session": sid, "tool": tool, "args": dict(args or {})}
        if step is not None:
            body["step"] = step
        if mcp is not None:
            body["mcp"] = dict(mcp)
        out = await self.request("POST", "/v1/toolcalls", body)
        decision = Decision(action=out["decision"], reasons=tuple(out.get("reasons") or ()),
                            codes=tuple(out.get("codes") or ()), id=out.get("id", ""))
        if decision.action != "ask":
            return decision if decision.action == "allow" else _as_deny(decision)
        if on_ask is not None:
            notified = on_ask(out["approval_id"], f"{self.api_url}/approvals/{out['approval_id']}")
            if inspect.isawaitable(notified):
                await notified
        approval = await self.wait_approval(out["approval_id"], wait_s)
        return _after_approval(decision, approval)

    async def get_approval(self, aid: str) -> Approval:
        return Approval.from_json(await self.request("GET", f"/v1/approvals/{aid}"))

    async def wait_approval(self, aid: str, timeout_s: float) -> Approval:
        """The approval once decided, or as it stands when `timeout_s` runs out."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            left = deadline - time.monotonic()
            wait = max(0.0, min(left, APPROVAL_POLL_S))
            row = await self.request("GET", f"/v1/approvals/{aid}?wait={wait:.3f}", timeout_s=wait + self.timeout_s)
            approval = Approval.from_json(row)
            if approval.status != "pending" or deadline - time.monotonic() <= 0:
                return approval

    def guard(self, sid: str, tool: str | None = None, *, wait_s: float = 600.0,
              on_ask: Callable[[str, str], Any] | None = None) -> Callable[[F], F]:
        """Decorate an async tool function so that every call is checked first, as `check` does.

        The tool's name is `tool` (default: the function's name) and its args are the call's bound arguments by
        parameter name (defaults applied), so `@guard(sid, "shell") async def run(command): ...` is checked as
        `{"command": ...}`. An allow runs the function and returns its result; a deny (or an ask nobody approved
        within `wait_s`) raises `ToolDenied` carrying the `Decision`, and the function does not run. `on_ask`
        is passed to `check`."""
        def decorate(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError("Client.guard needs an async function; use sandgate.sync.SyncClient for sync ones")
            name, signature = tool or fn.__name__, inspect.signature(fn)

            @functools.wraps(fn)
            async def guarded(*args: Any, **kwargs: Any) -> Any:
                decision = await self.check(sid, name, call_args(signature, args, kwargs), wait_s=wait_s,
                                            on_ask=on_ask)
                if not decision.allowed:
                    raise ToolDenied(decision)
                return await fn(*args, **kwargs)
            return guarded  # type: ignore[return-value]
        return decorate

    # -- events ----------------------------------------------------------------------------------
    async def events(self, sid: str, *, after: int | None = None, wait_s: float = 0.0) -> list[Event]:
        """The session's events in order (past sequence number `after`); `wait_s` long-polls for new ones."""
        query = f"/v1/events?session={sid}"
        if after is not None:
            query += f"&after={after}"
        if wait_s:
            query += f"&wait={wait_s:.3f}"
        rows = await self.request("GET", query, timeout_s=wait_s + self.timeout_s)
        return [Event.from_json(r) for r in rows]

    async def stream_events(self, sid: str, *, after: int = 0) -> AsyncIterator[Event]:
        """Every event of the session as it happens, forever (break out, or cancel the task, to stop)."""
        while True:
            for event in await self.events(sid, after=after, wait_s=EVENTS_POLL_S):
                after = max(after, event.seq)
                yield event

    # -- relays ----------------------------------------------------------------------------------
    async def scrub(self, sid: str, texts: list[str]) -> list[str]:
        """Texts with the session's real secret values replaced by its placeholders (for relays into the
        sandbox that do not pass the egress proxy). Raises `Unavailable` when the secrets cannot be read."""
        if not texts:
            return []
        return list((await self.request("POST", f"/v1/sessions/{sid}/scrub", {"texts": texts}))["texts"])

    async def mcp_tools(self, sid: str, server: str, tools: list[Mapping[str, Any]]) -> list[dict]:
        """Listing decisions for an MCP server's tools (`hidden`: the policy always denies it)."""
        body = {"session": sid, "server": server, "tools": list(tools)}
        return list((await self.request("POST", "/v1/mcp/tools", body))["tools"])


class Session:
    """A created session bound to its client: the sandbox's env and CA, plus checks and events for it."""

    def __init__(self, client: Client, info: SessionInfo):
        self.client, self.info = client, info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def env(self) -> dict[str, str]:
        return dict(self.info.env)

    @property
    def ca_pem(self) -> str:
        return self.info.ca_pem or ""

    def check(self, tool: str, args: Mapping[str, Any] | None = None, **kw: Any) -> Awaitable[Decision]:
        """`Client.check` for this session (the same keywords: step, mcp, wait_s, on_ask)."""
        return self.client.check(self.id, tool, args, **kw)

    def guard(self, tool: str | None = None, *, wait_s: float = 600.0,
              on_ask: Callable[[str, str], Any] | None = None) -> Callable[[F], F]:
        """`Client.guard` for this session."""
        return self.client.guard(self.id, tool, wait_s=wait_s, on_ask=on_ask)

    def events(self, *, after: int | None = None, wait_s: float = 0.0) -> Awaitable[list[Event]]:
        return self.client.events(self.id, after=after, wait_s=wait_s)

    def stream_events(self, *, after: int = 0) -> AsyncIterator[Event]:
        return self.client.stream_events(self.id, after=after)

    def renew(self, ttl_s: int) -> Awaitable[SessionInfo]:
        return self.client.renew_session(self.id, ttl_s)

    def patch(self, **values: Any) -> Awaitable[SessionInfo]:
        return self.client.patch_session(self.id, **values)

    def end(self) -> Awaitable[None]:
        return self.client.end_session(self.id)


def call_args(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A guarded call's arguments by parameter name (defaults filled in): what the policy sees as `args`."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k not in ("self", "cls")}


def _as_deny(decision: Decision) -> Decision:
    return Decision("deny", decision.reasons, decision.codes, decision.id, decision.asked, decision.approval)


def _after_approval(asked: Decision, approval: Approval) -> Decision:
    if approval.status == "approved":
        return Decision("allow", asked.reasons + (f"approved by {approval.decided_by}",),
                        asked.codes + ("approval.approved",), asked.id, True, approval)
    if approval.status == "pending":
        return Decision("deny", asked.reasons + ("nobody decided in time",), asked.codes + ("approval.timeout",),
                        asked.id, True, approval)
    why = approval.reason or f"the approval was {approval.status}"
    return Decision("deny", asked.reasons + (why,), asked.codes + (f"approval.{approval.status}",), asked.id, True,
                    approval)
