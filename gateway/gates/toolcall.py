"""The tool-call gate: the one decision path of a tool call, whoever asks (the HTTP API, the PostgreSQL gateway).

`ToolCallGate.decide(ToolCallRequest) -> ToolCallOutcome` does all of a call's work: the session (its owner,
live), its counters and step, its history and the paths its earlier calls left, the parsed facts (memoised; on
the loop when short, else on a thread with a time cap), the policy, the paths the call leaves, the approval flow
on "ask" (an approved, unused item for the same binding lets it through once, else one is filed or the pending
one returned) and the audit row. What it cannot do is refused with a `ToolCallRefused` carrying a stable code
(adapters map it to their answer: the API to a status, the PostgreSQL gateway to a denial); a refusal decides
nothing and records nothing.

An approval is bound to (session, "toolcall", tool or MCP target, canonical args) and, for any `via` but the API's,
to the via as well: an approved `sql` tool call never lets a PostgreSQL wire statement through, or the reverse.
The policy sees `input.via` for those vias too.
"""
from __future__ import annotations

import asyncio
import logging
import posixpath
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gateway.approvals.queue import ApprovalQueue, ApprovalRequest, TooManyPending
from gateway.approvals.rules import binding_hash, canonical_json
from gateway.audit.log import AuditLog
from gateway.auth.tokens import Principal
from gateway.mcp.context import McpContext
from gateway.policy.base import PolicyEngine
from gateway.policy.decision import deny
from gateway.policy.cache import Patched, Shared, patch
from gateway.policy.inputs import SESSION_CHANGES, build_session_input, session_changes
from gateway.runtime.ids import random_hex
from gateway.runtime.metrics import Metrics
from gateway.sessions.registry import SessionRegistry
from gateway.sessions.spec import owns
from gateway.store import StoreError
from gateway.store.records import Session
from gateway.toolcalls.describe import Effects
from gateway.toolcalls.enrich import SHELL_TOOLS, build_toolcall_input, toolcall_base, toolcall_facts
from gateway.toolcalls.history import (MAX_SESSION_PATHS, audit_facts, effect_lines, history_entries, path_rows,
                                       paths_from_rows)
from gateway.toolcalls.memo import FactsMemo
from gateway.toolcalls.tables import tables_of_policy

log = logging.getLogger("sandgate.toolcalls")

VIAS = ("api", "mcp", "postgres")          # how a call reached sandgate; "api" is the default
PATHS_EXCEEDED = "toolcall.paths_exceeded"
ENRICH_TIMEOUT_S = 5.0
MAX_ARGS_BYTES = 256 * 1024

# Tool calls this short are parsed on the event loop: a typical command parses in 0.1-0.3 ms, less than the hop
# to a thread costs under load. The bound keeps the worst short input we found (hundreds of nested `$(`, or
# of pipes) to a few milliseconds. SQL (sqlglot is the slowest parser), MCP calls and calls that may run a
# script the session wrote (its name in the arguments, or a glob or expansion that could reach it) always go
# to a thread, with a time cap (ENRICH_TIMEOUT_S). Except a short PostgreSQL wire statement: read with pglast
# only (never sqlglot): ~0.3 ms, ~30 us for a SELECT of a known shape (sql.ShapeMemo), a few milliseconds for
# the worst short WHERE we found; the hop to a thread cost more than the parse. Either way the facts are the same: this only decides where the
# parsing runs.
INLINE_ARGS_BYTES = 256
MAX_KEPT_SESSIONS = 4096      # sessions whose input's unchanging part the gate keeps (_session_input)


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call to decide. `principal`: who asks (a harness must own the session; admin may ask for any);
    None when the adapter authenticated the session itself (the PostgreSQL gateway, by the session's own
    credentials): the session is then the requester."""

    session: str
    tool: str
    args: Mapping[str, Any]
    step: int | None = None
    via: str = "api"                      # "api" | "mcp" | "postgres"
    mcp: McpContext | None = None
    principal: Principal | None = None
    # False: the adapter writes the call's one audit row itself (the PostgreSQL gateway's `sql` row per statement,
    # DESIGN v3): the gate records no `toolcall` row, only the session's history entry, and hands the row's
    # fields over in the outcome (`row`)
    audited: bool = True

    @property
    def requester(self) -> str:
        return self.principal.ident if self.principal is not None else f"session:{self.session}"


@dataclass(frozen=True)
class ToolCallOutcome:
    """The decision: `action` allow | deny | ask. On ask, `approval_id` names the filed (or already pending)
    approval to wait for (`ApprovalQueue.wait`); an allow that used an approved item has `reused` and its id."""

    id: str                               # the tool call's id ("t_..."): the audit row's request_id
    action: str
    reasons: tuple[str, ...]
    codes: tuple[str, ...]
    approval_id: str | None = None
    rev: str = ""                         # the policy revision that decided
    reused: bool = False
    row: Mapping[str, Any] | None = None  # the `toolcall` row's fields, when the request was not `audited`


@dataclass(frozen=True)
class ProbeOutcome:
    """One MCP tool's listing probe: the policy's answer to the tool called with no arguments."""

    name: str
    action: str
    reasons: tuple[str, ...]
    codes: tuple[str, ...]

    @property
    def hidden(self) -> bool:
        return self.action == "deny"


class ToolCallRefused(Exception):
    """The gate cannot decide this call. `code` is stable: `bad_request`, `not_found` (no such session, or not
    the requester's), `session_ended`, `too_large`, `audit.unavailable`, `store_unavailable`."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code, self.detail = code, detail


def enrich_inline(tool: str, args_json: str, files: Mapping[str, str | None], mcp: object) -> bool:
    """Whether a tool call is parsed on the loop (else: on a worker thread, bounded by ENRICH_TIMEOUT_S)."""
    if len(args_json) > INLINE_ARGS_BYTES or tool == "sql" or mcp is not None:
        return False
    written = [path for path, content in files.items() if isinstance(content, str) and content]
    if not written:
        return True
    if any(ch in args_json for ch in "*?[$`"):
        return False
    return not any(posixpath.basename(path.rstrip("/")) in args_json for path in written)


def wire_shape(args: Mapping[str, Any]) -> str | None:
    """What stands for a PostgreSQL wire statement's arguments in the facts memo when its facts cannot depend on
    its constants: the database and the statement's shape (sql.ShapeMemo: the tokens with every constant's value
    left out, so the simple protocol's `WHERE aid = 1` and `WHERE aid = 2` are one entry and one shared facts
    object, which the decision cache and the decision log serialise once). None where the shape is not kept, or
    the text holds the word PROGRAM (COPY ... PROGRAM adds shell facts read from a constant). Kept only for facts
    `shape_facts` accepts. A marker no canonical JSON starts with keeps it apart from every `args_json`."""
    query, database = args.get("query"), args.get("database")
    if len(args) != 2 or query.__class__ is not str or database.__class__ is not str or "program" in query.lower():
        return None
    from gateway.toolcalls import sql         # loaded by then: the statement's Parse or Query was read with it

    shape = sql.SHAPES.key(query)
    return None if shape is None else "\x00shape\x00" + database + "\x00" + shape


def shape_facts(facts: Mapping[str, Any], effects: Effects) -> bool:
    """Whether facts built for one statement are those of every statement of its shape: only `sql` facts that no
    constant changes (sql.ShapeMemo's own rule: plain SELECTs calling no function), and nothing left behind."""
    sql = facts.get("sql")
    from gateway.toolcalls.sql import _constant_free

    return (len(facts) == 1 and sql is not None and sql.get("visible") is True and _constant_free(sql)
            and not (effects.links or effects.files or effects.secret))


def toolcall_summary(tool: str, args: Mapping[str, Any]) -> str:
    if tool in SHELL_TOOLS and isinstance(args.get("command"), str):
        return f"{tool}: {args['command']}"[:300]
    if isinstance(args.get("path"), str):
        return f"{tool} {args['path']}"[:300]
    if tool == "http_request":
        return f"http_request {args.get('method', 'GET')} {args.get('url', '')}"[:300]
    if tool == "sql":
        return f"sql: {args.get('query', '')}"[:300]
    if tool == "deploy":
        return f"deploy {args.get('target', '')}"[:300]
    return f"{tool} {canonical_json(args)}"[:300]


def call_summary(req: ToolCallRequest) -> str:
    """The one line an approval and the audit show for a call."""
    if req.mcp is not None:
        return f"mcp {req.mcp.server}/{req.tool} {canonical_json(req.args)}"[:300]
    summary = toolcall_summary(req.tool, req.args)
    return summary if req.via == "api" else f"{req.via} {summary}"[:300]


def call_binding(req: ToolCallRequest, args_json: str) -> str:
    """What an approval of this call is bound to: the via counts unless it is the API's default."""
    target = req.tool if req.mcp is None else req.mcp.target(req.tool)
    return binding_hash(req.session, "toolcall", target, args_json, via=None if req.via == "api" else req.via)


def _unparsed() -> dict:
    return {"shell": {"parsed": False, "commands": []},
            "sql": {"parsed": False, "kinds": [], "unbounded": [], "visible": False}}


class ToolCallGate:
    def __init__(self, sessions: SessionRegistry, approvals: ApprovalQueue, audit: AuditLog, metrics: Metrics,
                 engine: PolicyEngine, facts: FactsMemo):
        self._sessions = sessions
        self._approvals = approvals
        self._audit = audit
        self._metrics = metrics
        self._engine = engine
        self.facts = facts
        # per session: (its row, its budgets, the budgets it had spent, its input's Shared base): _session_input
        self._inputs: dict[str, tuple[Session, dict, list, Shared]] = {}

    async def decide(self, req: ToolCallRequest) -> ToolCallOutcome:
        """Decide one call (and record it); ToolCallRefused when it cannot be decided."""
        audit, metrics, sessions = self._audit, self._metrics, self._sessions
        if not audit.accepting:
            metrics.audit_refused.labels("toolcall").inc()
            raise ToolCallRefused("audit.unavailable", "sandgate cannot record decisions right now; try again")
        if req.via not in VIAS:
            raise ToolCallRefused("bad_request", f"via must be one of {', '.join(VIAS)}")
        args_json = canonical_json(req.args)
        if len(args_json) > MAX_ARGS_BYTES:
            raise ToolCallRefused("too_large", "args are too large")
        sid, tool, step, mcp = req.session, req.tool, req.step, req.mcp
        live = await self._live_session(req)
        if step is not None:
            sessions.set_step(sid, step)
        sessions.count(sid, toolcalls=1)
        now = time.time()
        session = self._session_input(sid, live, now)
        history, links, files, complete = await self._session_memory(sid, now)
        mcp_input = mcp.to_input() if mcp is not None else None
        base = toolcall_base(session=session, tool=tool, args=req.args, step=step, now=now, history=history,
                             mcp=mcp_input, session_input=session)
        if req.via != "api":
            base["via"] = req.via
        engine = self._engine
        tcid = "t_" + random_hex(8)
        if complete:
            facts, effects = await self._facts(sid, tool, args_json, base, links, files, mcp, mcp_input)
            doc = {**base, **facts}
            decision = await engine.decide("toolcall", doc, tcid)
        else:
            # A path missing from what is kept may still have been written or linked: deciding without it could
            # allow a script, or a path through a link, that the whole record would not. Denied, not evaluated.
            effects, doc = Effects(), {**base, **_unparsed()}
            decision = deny(PATHS_EXCEEDED, f"the session has written or linked more than {MAX_SESSION_PATHS} "
                            "paths, more than sandgate keeps track of; start a new session", engine.rev)
        metrics.decision("toolcall", decision.action)
        action, reasons, codes = decision.action, list(decision.reasons), list(decision.codes)
        summary = call_summary(req)
        detail = {"toolcall_id": tcid, "tool": tool, "summary": summary, **audit_facts(doc)}
        if mcp is not None:
            detail["mcp_server"] = mcp.server
        if req.via != "api":
            detail["via"] = req.via
        if action != "deny":
            try:                                  # links and scripts this call leaves, for the session's later calls
                await sessions.add_paths(sid, path_rows(sid, effects, now))
            except StoreError:
                log.warning("could not record the paths of tool call %s", tcid)
                raise ToolCallRefused("store_unavailable", "the store is unavailable; try again") from None
        approval_id, reused = None, False
        if action == "ask":
            requester = req.requester
            try:
                ticket = await self._approvals.request_approval(ApprovalRequest(
                    session=sessions.live_now(sid), session_id=sid, kind="toolcall",
                    binding=call_binding(req, args_json), summary=summary,
                    action={**self._approval_action(req), "codes": list(codes), "effects": effect_lines(doc)},
                    reasons=list(reasons), requested_by=requester, used_by=requester, ttl_s=decision.approval_ttl_s))
            except StoreError:
                raise ToolCallRefused("store_unavailable", "the store is unavailable; try again") from None
            except TooManyPending as exc:
                ticket = None
                action, reasons, codes = "deny", [f"approval required, but {exc}", *reasons], [exc.code, *codes]
            if ticket is not None:
                approval_id, reused = ticket.row.id, ticket.reused
            if reused:
                action = "allow"
                reasons.append(f"approved by {ticket.row.decided_by}")
                codes.append("approval.approved")
            if approval_id is not None:
                detail["approval_id"] = approval_id
        if action == "deny":
            sessions.count(sid, denied=1)        # with egress denials: what `denials_per_10m` watches
        fields = dict(session=sid, step=step, action=action, reasons=reasons, codes=codes, request_id=tcid,
                      policy_rev=decision.rev, detail=detail)
        if req.audited:
            sessions.toolcall_recorded(sid, audit.record("toolcall", **fields))
            return ToolCallOutcome(tcid, action, tuple(reasons), tuple(codes), approval_id, decision.rev, reused)
        sessions.toolcall_recorded(sid, {**fields, "kind": "toolcall", "ts": now})    # the history's entry
        return ToolCallOutcome(tcid, action, tuple(reasons), tuple(codes), approval_id, decision.rev, reused,
                               fields)

    def stamp(self, session: str) -> tuple:
        """The policy revision and the session's last change (a freeze, labels, a renewal): a decision made
        earlier for this session stands while they are the same (the PostgreSQL gateway's prepared statements)."""
        row = self._sessions.live_now(session)
        return self._engine.rev, row.updated_at if row is not None else None

    async def probe(self, session: str, tools: Sequence[tuple[str, McpContext]],
                    principal: Principal | None = None) -> list[ProbeOutcome]:
        """Which of an MCP server's tools the policy always denies (hidden from the agent): each tool decided once
        as a listing probe (`input.tool = {"name": TOOL, "args": {}}`, `input.mcp` with `"listing": true`).
        Nothing is filed or counted; the tools found hidden are audited (one `mcp.tools` row)."""
        if not isinstance(session, str) or not session:
            raise ToolCallRefused("bad_request", "session is required")
        row = await self._sessions.get(session)
        if row is None or (principal is not None and not owns(principal.role, principal.ident, row)):
            raise ToolCallRefused("not_found", "no such session")
        live = await self._sessions.live(session)
        if live is None:
            raise ToolCallRefused("session_ended", "the session has ended")
        live = self._sessions.with_stats(live)
        out = []
        for name, ctx in tools:
            doc = build_toolcall_input(session=live, tool=name, args={}, step=None, now=time.time())
            doc["mcp"] = ctx.to_input()
            decision = await self._engine.decide("toolcall", doc)
            out.append(ProbeOutcome(name, decision.action, tuple(decision.reasons), tuple(decision.codes)))
        hidden = [p.name for p in out if p.hidden]
        if hidden:
            self._audit.record("mcp.tools", session=session, action="hide", codes=["toolcall.mcp_hidden"],
                               detail={"server": tools[0][1].server, "hidden": hidden[:100]})
        return out

    @staticmethod
    def _approval_action(req: ToolCallRequest) -> dict:
        action: dict[str, Any] = {"tool": req.tool, "args": req.args}
        if req.mcp is not None:
            action["mcp_server"] = req.mcp.server
        if req.via != "api":
            action["via"] = req.via
        return action

    async def _live_session(self, req: ToolCallRequest) -> Mapping[str, Any]:
        """The session as cached, if the requester may use it (a harness: only its own; 404 otherwise) and it
        is live (session_ended otherwise). A session this process has not seen is read from the store once."""
        sid, principal = req.session, req.principal
        if not isinstance(sid, str) or not sid:
            raise ToolCallRefused("bad_request", "session is required")
        try:
            row = await self._sessions.known(sid)
        except StoreError:
            raise ToolCallRefused("store_unavailable", "the store is unavailable; try again") from None
        if row is None or (principal is not None and not owns(principal.role, principal.ident, row)):
            raise ToolCallRefused("not_found", "no such session")
        live = self._sessions.live_now(sid)
        if live is None:
            raise ToolCallRefused("session_ended", "the session has ended")
        return live

    async def _facts(self, sid: str, tool: str, args_json: str, base: dict, links: dict, files: dict,
                     mcp: McpContext | None, mcp_input: object) -> tuple[dict, Effects]:
        """What parsing the call adds to its input, and its effects: memoised, on the loop when short, else on a
        thread with a time cap. A failure is not an allow: the policy sees the call unparsed."""
        memo, engine = self.facts, self._engine
        rev, data = engine.rev, getattr(engine, "data", None)      # the active revision, its data with its tables
        read_as = f"{tool}@{base['via']}" if base.get("via") else tool     # a wire statement's facts are its own
        secrets = tuple(sorted(base["session"].get("secrets") or []))
        key = memo.key(read_as, args_json, base["session"]["workspace"], links, files, mcp_input, secrets, rev)
        shape_key = None
        try:
            hit = memo.get(key)          # the same call with the same workspace, links and files: parsed before
            if hit is None and key is not None and read_as == "sql@postgres":
                shape = wire_shape(base["tool"]["args"])
                if shape is not None:     # a statement of the same shape whose facts no constant changes
                    shape_key = memo.key(read_as, shape, base["session"]["workspace"], links, files, mcp_input,
                                         secrets, rev)
                    hit = memo.get(shape_key)
            if hit is not None:
                return hit
            tables = tables_of_policy(data)
            if enrich_inline(tool, args_json, files, mcp) or (read_as == "sql@postgres"
                                                              and len(args_json) <= INLINE_ARGS_BYTES):
                facts, effects = toolcall_facts(base, links, files, tables)
            else:
                # Parsing (tree-sitter, sqlglot, ast) can take a while on long or hostile input: off the loop,
                # bounded.
                facts, effects = await asyncio.wait_for(
                    asyncio.to_thread(toolcall_facts, base, links, files, tables), ENRICH_TIMEOUT_S)
            if key is not None:   # memoised facts are shared and never changed: the decision cache knows
                facts = {k: Shared(v) if isinstance(v, dict) else v for k, v in facts.items()}
                memo.put(key, facts, effects)
                if shape_key is not None and shape_facts(facts, effects):
                    memo.put(shape_key, facts, effects)
            return facts, effects
        except Exception:  # noqa: BLE001 - enrichment failure must not allow: the policy sees it unparsed
            log.warning("tool-call enrichment failed for session %s tool %s", sid, tool)
            return _unparsed(), Effects()

    def _session_input(self, sid: str, live: Session, now: float) -> Patched:
        """`input.session` of a call (build_session_input of the session with its counters, the call counted), from
        what the session's earlier calls built: the part that does not change while the session's row, budgets
        and spent budgets do not is built once (a Shared base, serialised once by the decision cache and the
        log); each call sets its age and counters on a copy (SESSION_CHANGES)."""
        sessions, kept = self._sessions, self._inputs.get(sid)
        if kept is not None and kept[0] is live:
            stats, _, spent = sessions.counters(live, "toolcalls", kept[1])
            if spent == kept[2]:
                return patch(kept[3], session_changes(live, now, stats), SESSION_CHANGES)
        session = sessions.with_stats(live, counted="toolcalls")
        base = Shared(build_session_input(session, now))
        inputs = self._inputs
        inputs.pop(sid, None)
        inputs[sid] = (live, session["budgets"], session["budgets_spent"], base)
        if len(inputs) > MAX_KEPT_SESSIONS:
            del inputs[next(iter(inputs))]            # the least recently rebuilt
        return patch(base, session_changes(live, now, session["stats"]), SESSION_CHANGES)

    async def _session_memory(self, sid: str, now: float) -> tuple[list[dict], dict, dict, bool]:
        """The session's recent tool calls (stored and still queued audit rows), the links and files its earlier
        calls left, and whether those are all of them (False past MAX_SESSION_PATHS). A store that cannot answer
        is a refusal (store_unavailable): deciding without them could allow what a sequence makes dangerous."""
        try:
            events, rows = await self._sessions.toolcall_memory(sid)
        except StoreError:
            raise ToolCallRefused("store_unavailable", "the store is unavailable; try again") from None
        links, files = paths_from_rows(rows)
        return history_entries(events, now), links, files, not getattr(rows, "truncated", False)
