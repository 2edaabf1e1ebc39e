"""The StatementJudge over the tool-call gate: a wire statement is decided by the same path as a `sql` tool call
(gateway/gates/toolcall.py: session history and counts, the SQL facts of the one classifier, the policy, the
approval flow), in this process, with `via = "postgres"`. The gate writes no `toolcall` row for it: what that
row would say (the call's id, tool, summary, decision, codes) rides on the verdict (`extra`) into the statement's
one `sql` row (DESIGN v3), and the session's history takes its entry at the decision. The policy sees `input.via`,
and an approval of a wire statement is bound to the via: an approved `sql` tool call never lets a wire
statement through, or the reverse.
"""
from __future__ import annotations

import logging

from gateway.approvals.queue import ApprovalQueue
from gateway.gates.toolcall import ToolCallGate, ToolCallRefused, ToolCallRequest
from gateway.postgres.judge import StatementRequest, Verdict

log = logging.getLogger("sandgate.postgres")
BY = "sandgate-postgres"
VIA = "postgres"


def refused_verdict(exc: ToolCallRefused) -> Verdict:
    """What a statement the gate cannot decide gets: a denial naming why (fail closed; nothing was recorded)."""
    return Verdict("", "deny", (f"sandgate could not decide this statement: {exc.detail}",),
                   (f"toolcall.{exc.code}", "postgres.undecided"))


class GateJudge:
    def __init__(self, gate: ToolCallGate, approvals: ApprovalQueue) -> None:
        self._gate = gate
        self._approvals = approvals

    async def decide(self, request: StatementRequest) -> Verdict:
        try:
            out = await self._gate.decide(ToolCallRequest(session=request.session, tool=request.tool,
                                                          args=request.args, via=VIA, audited=False))
        except ToolCallRefused as exc:
            log.info("a statement of session %s was not decided: %s", request.session, exc.code)
            return refused_verdict(exc)
        except Exception:  # noqa: BLE001 - an engine or store failure is a denial, never an exception
            log.warning("the decision of a statement of session %s failed: denied", request.session)
            return Verdict("", "deny", ("sandgate could not decide this statement",), ("postgres.undecided",))
        detail = dict(out.row["detail"]) if out.row is not None else {}
        detail.pop("via", None)
        detail.pop("approval_id", None)
        detail["decision"] = out.action
        return Verdict(out.id, out.action, out.reasons, out.codes, out.approval_id, out.rev, detail)

    def stamp(self, session: str) -> object:
        return self._gate.stamp(session)

    async def wait(self, approval_id: str, timeout_s: float) -> str:
        row = await self._approvals.wait(approval_id, timeout_s)
        if row is None:
            return "missing"
        if row["status"] == "approved" and not row.get("used_at"):
            return "approved" if await self._approvals.consume(row, BY) else "used"
        return "used" if row["status"] == "approved" else row["status"]

    async def withdraw(self, approval_id: str, reason: str) -> None:
        try:
            await self._approvals.cancel(approval_id, BY, reason)
        except Exception:  # noqa: BLE001 - already decided, or the store is down: nothing runs either way
            log.info("could not withdraw approval %s", approval_id)
