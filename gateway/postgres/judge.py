"""How the gateway asks for a decision: the tool-call gate's request and outcome, and the protocol of the one
collaborator that decides (`StatementJudge`). The gateway never decides anything itself: every statement
reaches the tool-call policy as `input.tool = {"name": "sql", "args": {"query", "database"}}` with
`input.via = "postgres"`, through the same decision path as the `sql` tool.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class StatementRequest:
    """One statement of one session on one database (the gate's ToolCallRequest with via="postgres")."""
    session: str
    database: str
    query: str
    principal: str = "postgres"

    @property
    def tool(self) -> str:
        return "sql"

    @property
    def args(self) -> dict[str, Any]:
        return {"query": self.query, "database": self.database}


@dataclass(frozen=True)
class Verdict:
    """The gate's ToolCallOutcome: `action` allow | deny | ask (then `approval_id` names what to wait for)."""
    id: str
    action: str
    reasons: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    approval_id: str | None = None
    rev: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) or "no rule allows this statement"

    @property
    def code(self) -> str:
        return self.codes[0] if self.codes else "policy.deny"


class StatementJudge(Protocol):
    async def decide(self, request: StatementRequest) -> Verdict:
        """The decision for one statement (an engine or store failure is a deny, never an exception)."""

    def stamp(self, session: str) -> object:
        """What a decision read that can change under a statement prepared earlier: equal stamps, the same
        policy revision and session (a freeze, new labels: a different stamp, and the statement is decided
        again at its next Bind)."""

    async def wait(self, approval_id: str, timeout_s: float) -> str:
        """Wait for an approval: its status ("approved", "denied", "expired", "pending" when the wait ran out,
        "missing")."""

    async def withdraw(self, approval_id: str, reason: str) -> None:
        """The client gave up waiting (CancelRequest): the approval is cancelled."""
