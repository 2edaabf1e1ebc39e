"""Audit rows as OCSF 1.5.0 events, as pure functions (`sandgate audit export --format ocsf`).

- egress decisions: HTTP Activity (4002; method -> activity, URL, response code, bytes; the security_control
  profile's action and disposition: allowed, blocked, or other for an ask);
- tool calls: API Activity (6003; the tool is the operation, create/read/update/delete by its effect), shell
  commands Process Activity (1007, a launch: the command line);
- approvals (filed, voted, approved, denied, expired, cancelled, used): Authorize Session (3003; the person who
  decided, the action approved as the privilege);
- everything else (sessions, tokens, secrets, packages, exfiltration attempts, tunnels): API Activity with the
  row's kind as the operation.
Every event carries the row's facts sandgate knows and OCSF has no field for in `unmapped.sandgate` (session,
seq, step, codes, reasons, policy revision, the chain place and hash), and `metadata.uid` = the chain place.
"""
from __future__ import annotations

import json
from typing import Any

OCSF_VERSION = "1.5.0"
PRODUCT = {"name": "sandgate", "vendor_name": "sandgate"}
HTTP_ACTIVITY = {"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8}
SHELL_TOOLS = frozenset({"shell", "bash", "sh", "exec", "run_command"})
TOOL_ACTIVITY = {"read_file": 2, "write_file": 3, "delete_file": 4, "deploy": 1, "sql": 99, "http_request": 99}
SEVERITY = {"allow": 1, "ask": 2, "deny": 3}


def _decoded(value: Any, default: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return default
    return default if value is None else value


def _base(row: dict, class_uid: int, category_uid: int, activity_id: int, severity_id: int) -> dict:
    reasons = _decoded(row.get("reasons"), [])
    codes = _decoded(row.get("codes"), [])
    session = row.get("session")
    event: dict[str, Any] = {
        "class_uid": class_uid, "category_uid": category_uid, "activity_id": activity_id,
        "type_uid": class_uid * 100 + activity_id, "severity_id": severity_id,
        "time": int(float(row.get("ts") or 0) * 1000),
        "metadata": {"version": OCSF_VERSION, "product": dict(PRODUCT), "log_name": "sandgate.audit",
                     "event_code": str(row.get("kind") or ""),
                     "uid": str(row.get("chain_n") if row.get("chain_n") is not None else row.get("id"))},
        "unmapped": {"sandgate": {
            "kind": row.get("kind"), "action": row.get("action"), "session": session, "seq": row.get("seq"),
            "step": row.get("step"), "codes": codes, "reasons": reasons, "policy_rev": row.get("policy_rev"),
            "request_id": row.get("request_id"), "method": row.get("method"), "chain_n": row.get("chain_n"),
            "hash": row.get("hash"),
            "detail": _decoded(row.get("detail"), {})}},
    }
    if session:
        event["metadata"]["correlation_uid"] = session
    if isinstance(row.get("seq"), int):
        event["metadata"]["sequence"] = row["seq"]
    if reasons:
        event["message"] = "; ".join(str(r) for r in reasons)[:2000]
    return event


def _outcome(event: dict, action: str) -> None:
    """status (success, failure, other) and the security_control profile's action and disposition."""
    event["status_id"] = {"allow": 1, "deny": 2}.get(action, 99)
    event["action_id"] = {"allow": 1, "deny": 2}.get(action, 99)
    event["disposition_id"] = {"allow": 1, "deny": 2}.get(action, 99)
    event["metadata"]["profiles"] = ["security_control"]


def http_activity(row: dict) -> dict:
    method = str(row.get("method") or "").upper()
    action = str(row.get("action") or "")
    event = _base(row, 4002, 4, HTTP_ACTIVITY.get(method, 99), SEVERITY.get(action, 1))
    host, path = row.get("host") or "", row.get("path") or ""
    url: dict[str, Any] = {"path": path.split("?", 1)[0] or "/"}
    if host:
        url["hostname"] = host
    if "?" in path:
        url["query_string"] = path.split("?", 1)[1]
    event["http_request"] = {"url": url}
    if method in HTTP_ACTIVITY:                   # OCSF names eight methods; any other is in unmapped.sandgate
        event["http_request"]["http_method"] = method
    if isinstance(row.get("http_status"), int):
        event["http_response"] = {"code": row["http_status"]}
    if host:
        event["dst_endpoint"] = {"hostname": host}
    traffic = {k: row[f"bytes_{k}"] for k in ("in", "out") if isinstance(row.get(f"bytes_{k}"), int)}
    if traffic:
        event["traffic"] = {f"bytes_{k}": v for k, v in traffic.items()}
    _outcome(event, action)
    return event


def _actor(row: dict) -> dict:
    return {"session": {"uid": row["session"]}} if row.get("session") else {"app_name": "sandgate"}


def toolcall_activity(row: dict) -> dict:
    detail = _decoded(row.get("detail"), {})
    tool = str(detail.get("tool") or "unknown")
    action = str(row.get("action") or "")
    summary = str(detail.get("summary") or "")
    if tool in SHELL_TOOLS:
        event = _base(row, 1007, 1, 1, SEVERITY.get(action, 1))
        event["actor"] = _actor(row)
        event["device"] = {"type_id": 0, "name": f"sandbox session {row.get('session') or '-'}"}
        event["process"] = {"uid": str(detail.get("toolcall_id") or row.get("request_id") or row.get("id")),
                            "cmd_line": summary[:4096], "name": tool}
    else:
        event = _base(row, 6003, 6, TOOL_ACTIVITY.get(tool, 99), SEVERITY.get(action, 1))
        event["actor"] = _actor(row)
        service = detail.get("mcp_server") or "sandgate tool calls"
        event["api"] = {"operation": tool, "service": {"name": str(service)}}
        if summary:
            event["api"]["request"] = {"uid": str(detail.get("toolcall_id") or row.get("request_id") or "")}
        event["src_endpoint"] = {"name": f"sandbox session {row.get('session') or '-'}"}
    _outcome(event, action)
    return event


def approval_activity(row: dict) -> dict:
    detail = _decoded(row.get("detail"), {})
    kind = str(row.get("kind") or "")
    status = kind.split(".", 1)[1] if "." in kind else ""
    event = _base(row, 3003, 3, 1, 1)
    by = str(detail.get("by") or detail.get("requested_by") or "sandgate")
    event["user"] = {"name": by}
    event["privileges"] = [f"approval {detail.get('approval_id') or ''}: {status}".strip()]
    if row.get("session"):
        event["session"] = {"uid": row["session"]}
    event["status_id"] = {"approved": 1, "used": 1, "denied": 2, "expired": 2, "cancelled": 2}.get(status, 99)
    return event


def other_activity(row: dict) -> dict:
    event = _base(row, 6003, 6, 99, 4 if row.get("kind") == "exfiltration" else 1)
    event["actor"] = _actor(row)
    event["api"] = {"operation": str(row.get("kind") or "unknown"), "service": {"name": "sandgate"}}
    event["src_endpoint"] = {"name": f"sandbox session {row['session']}" if row.get("session") else "sandgate"}
    action = str(row.get("action") or "")
    if action in ("allow", "deny", "ask"):
        _outcome(event, action)
    return event


def ocsf_event(row: dict) -> dict | None:
    """The OCSF event of one audit row (as the store gives it back)."""
    kind = str(row.get("kind") or "")
    if kind == "egress":
        return http_activity(row)
    if kind == "toolcall":
        return toolcall_activity(row)
    if kind.startswith("approval."):
        return approval_activity(row)
    return other_activity(row)
