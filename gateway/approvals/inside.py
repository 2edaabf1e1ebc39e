"""What `sandgate.internal` answers a session from inside its sandbox (the proxy serves it; never forwarded,
never resolved): file an access request, read one of its own (optionally waiting for the decision).

Plain values in and out (method, path, query, body bytes -> status, JSON document): the proxy adapter
(egress/addon.py) authenticates the session and carries the answer.
"""
from __future__ import annotations

import math
from typing import Mapping

from gateway.approvals.access import BadAccess, grant_in_force
from gateway.approvals.queue import ApprovalQueue, TooManyPending
from gateway.net.jsonbody import parse_body
from gateway.store.records import Approval

MAX_BODY = 16384
MAX_WAIT_S = 300.0
PREFIX = "/v1/access-requests"


def _view(row: Approval) -> dict:
    requested = row.action["grant"]
    return {"id": row.id, "status": row.status, "host": requested["host"], "requested": requested,
            "grant": grant_in_force(row), "decision_reason": row.reason}


def _error(http_status: int, code: str, detail: str, **extra: object) -> tuple[int, dict]:
    return http_status, {"error": code, "detail": detail, **extra}


async def answer(queue: ApprovalQueue, session_id: str, method: str, path: str, query: Mapping[str, str],
                 body: bytes) -> tuple[int, dict]:
    path = path.split("?", 1)[0].rstrip("/") or "/"
    if path == PREFIX:
        if method != "POST":
            return _error(405, "method_not_allowed", f"{PREFIX} takes POST")
        if len(body) > MAX_BODY:
            return _error(413, "too_large", f"the body is larger than {MAX_BODY} bytes")
        try:
            doc = parse_body(body or b"{}")      # strict, as the API reads bodies: the request is stored and shown
        except ValueError as exc:
            return _error(400, "bad_json", f"the body is not valid JSON ({exc})")
        try:
            req = queue.access.parse(doc)
        except BadAccess as exc:
            return _error(400, exc.code, str(exc))
        try:
            row, filed = await queue.file_access(session_id, req, f"session:{session_id}")
        except TooManyPending as exc:
            return _error(429, TooManyPending.code, str(exc))
        if not filed:
            return _error(409, "already_pending", f"an access request for {req.host} is already pending",
                          id=row.id, status=row.status)
        return 202, {"id": row.id, "status": row.status}
    if path.startswith(PREFIX + "/") and path.count("/") == 3:
        if method not in ("GET", "HEAD"):
            return _error(405, "method_not_allowed", "an access request is read with GET")
        aid = path.rsplit("/", 1)[1]
        row = await queue.get(aid)
        if row is None or row.session != session_id or row.kind != "access":
            return _error(404, "not_found", "no such access request")     # another session's: not found either
        if "wait" in query:
            try:
                seconds = float(query["wait"])
            except ValueError:
                seconds = math.nan
            if math.isnan(seconds):
                return _error(400, "bad_request", "wait must be a number of seconds")
            row = await queue.wait(aid, min(max(seconds, 0.0), MAX_WAIT_S)) or row
        return 200, _view(row)
    return _error(404, "not_found", f"sandgate.internal serves {PREFIX} only")
