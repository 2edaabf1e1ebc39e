"""Request bodies as strict JSON (RFC 8259), a pure function: bytes in, a value or ValueError out.

Python's `json` accepts what is not JSON and what nothing downstream can hold: `NaN`/`Infinity`, strings with
lone surrogates (`"\\ud800"` has no UTF-8 spelling: SQLite, PostgreSQL and regorus refuse or crash on it),
nesting deep enough to exhaust the interpreter's recursion, and objects that name a key twice (two readers would
read two bodies). NUL is refused too: PostgreSQL text cannot hold it, and no command, path or name sandgate
decides on can contain one (execve stops at it). A body the API accepts can be stored, audited, shown on the
page and handed to the policy.
"""
from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose names are unique: with `{"labels": {...}, "labels": {}}` Python keeps the last, another
    reader (a proxy, a WAF, the client's own log) the first; the body would mean two things."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key[:80]!r}")
            seen.add(key)
    return out


# json.loads(text, parse_constant=..., object_pairs_hook=...), built once
_DECODER = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_object)


def _text_ok(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_value(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """ValueError if `value` nests deeper than `max_depth` or holds a string with no UTF-8 spelling."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not _text_ok(item):
                raise ValueError("a string holds a NUL or a lone surrogate (not storable text)")
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"the body nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, val in item.items():
                    if not _text_ok(key):
                        raise ValueError("a key holds a NUL or a lone surrogate (not storable text)")
                    stack.append((val, depth + 1))
            else:
                stack.extend((val, depth + 1) for val in item)


def parse_body(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of a UTF-8 body; ValueError (with a reason for the client) when it is not strict JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8") from None
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ValueError(f"the body nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    # Without a backslash no string can hold a NUL or a lone surrogate (only an escape spells them: raw control
    # characters are refused by json.loads and UTF-8 has no surrogates), and with no more opening brackets than
    # max_depth nothing nests deeper: most bodies need no walk.
    if b"\\" in raw or raw.count(b"[") + raw.count(b"{") > max_depth:
        check_value(value, max_depth)
    return value
