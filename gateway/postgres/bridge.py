"""A StatementJudge over this process's own `POST /v1/toolcalls`, until the tool-call gate
(gateway/toolcalls/gate.py, `ToolCallGate.decide(ToolCallRequest(..., via="postgres"))`) lands.

It reaches the one decision path there is (the handler: session history, counts, SQL facts, policy, approval
filing) through its real interface, as a client, instead of copying it. What it cannot do until the gate lands:
pass `via = "postgres"` (the API has no such field), so the approval binding of a wire statement equals that
of a `sql` tool call with the same query and database. Replace it with the gate in gateway/app.py.
"""
from __future__ import annotations

import logging

import aiohttp

from gateway.approvals.queue import ApprovalQueue
from gateway.postgres.judge import StatementRequest, Verdict

log = logging.getLogger("sandgate.postgres")
BY = "sandgate-postgres"


class ApiJudge:
    def __init__(self, api_url: str, token: str, approvals: ApprovalQueue, timeout_s: float = 10.0) -> None:
        self._url = api_url.rstrip("/") + "/v1/toolcalls"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._approvals = approvals
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    async def decide(self, request: StatementRequest) -> Verdict:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout,
                                               connector=aiohttp.TCPConnector(limit=64, force_close=False))
        body = {"session": request.session, "tool": "sql", "args": request.args}
        try:
            async with self._http.post(self._url, json=body, headers=self._headers) as resp:
                doc = await resp.json() if resp.status == 200 else None
                status = resp.status
        except Exception:  # noqa: BLE001 - unreachable, timed out, malformed: deny
            doc, status = None, 0
        if not isinstance(doc, dict) or doc.get("decision") not in ("allow", "deny", "ask"):
            log.warning("the tool-call decision for a statement failed (status %s): denied", status)
            return Verdict("", "deny", ("sandgate could not decide this statement",), ("postgres.undecided",))
        return Verdict(str(doc.get("id", "")), doc["decision"], tuple(doc.get("reasons") or ()),
                       tuple(doc.get("codes") or ()), doc.get("approval_id"))

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

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
