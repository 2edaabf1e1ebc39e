"""Audit rows made storable, as pure functions: whatever a request carried, a row the store can hold.

The writer calls `storable` only after a batch failed, so ordinary rows pay nothing. It keeps every fact and
changes only what no store column can hold: integers past a 32-bit column (PostgreSQL's INTEGER) move to
`detail` as text, strings lose lone surrogates and NULs (escaped as `\\udXXX` / `\\x00`), and non-finite
floats in JSON become text.
"""
from __future__ import annotations

import math
from typing import Any

INT_FIELDS = ("step", "http_status", "bytes_in", "bytes_out", "seq")
TEXT_FIELDS = ("session", "kind", "action", "request_id", "method", "host", "path", "policy_rev")
JSON_FIELDS = ("reasons", "codes", "detail")
INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1


def clean_text(text: str) -> str:
    """The text with lone surrogates and NUL escaped (what UTF-8, SQLite and PostgreSQL text can hold)."""
    if "\x00" not in text:
        try:
            text.encode("utf-8")
            return text
        except UnicodeEncodeError:
            pass
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def clean_json(value: Any, depth: int = 0) -> Any:
    """A JSON value with strings cleaned and NaN/Infinity as text; nesting past 64 levels is cut."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, int):
        return value if -(2 ** 63) <= value < 2 ** 63 else str(value)
    if depth >= 64:
        return "..."
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v, depth + 1) for v in value]
    return clean_text(str(value))


def storable(row: dict) -> dict:
    """A copy of an audit row every store column can hold (see the module doc)."""
    out = dict(row)
    detail = clean_json(dict(out.get("detail") or {}))
    for field in INT_FIELDS:
        value = out.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not INT_MIN <= value <= INT_MAX:
            detail[f"{field}_value"] = clean_text(str(value))
            out[field] = None
    for field in TEXT_FIELDS:
        value = out.get(field)
        if value is not None:
            out[field] = clean_text(value if isinstance(value, str) else str(value))
    for field in ("reasons", "codes"):
        out[field] = clean_json(list(out.get(field) or []))
    out["detail"] = detail
    ts = out.get("ts")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
        out["ts"] = 0.0
    return out
