"""Redaction of what the store keeps: credential-like keys' values and credentials inside strings replaced by
"[redacted]". Pure (re, json): the decision log uses it in the gateway's process and the store's writer process
(offload.py) in its own, so it imports nothing of the gateway."""
from __future__ import annotations

import functools
import json
import re
from typing import Any

REDACTED = "[redacted]"
_SENSITIVE_KEY = re.compile(r"pass(word|wd|phrase)?$|secret|token|api[-_]?key|authori[sz]ation|cookie|credential"
                            r"|private[-_]?key|access[-_]?key|session[-_]?key", re.I)
_SENSITIVE_TEXT = [
    (re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)\b(authorization|x-api-key|private-token|cookie)(\s*[:=]\s*)[^\s'\"]+(\s+[^\s'\"]+)?"),
     r"\1\2" + REDACTED),
    (re.compile(r"(?i)\b(password|passwd|secret|token|api[-_]?key|access[-_]?key)(=)[^\s&;'\"]+"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)\b(--?(?:password|token|secret|api-key))([ =])[^\s'\"]+"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@"), r"\1" + REDACTED + "@"),
]
# Keys whose value is a name or a list of names, not a secret value (`input.session.secrets` lists the
# secret names a session holds; `input.request.secrets` those named by placeholders in the request).
_NAME_KEYS = frozenset({"secrets"})


# Every pattern above needs one of these: most strings are let through after this one search.
_MAYBE_SENSITIVE = re.compile(r"(?i)bearer|basic|token|authori|api|cookie|pass|secret|access|private|://")


def redact_text(text: str) -> str:
    if len(text) <= _MEMO_MAX_CHARS:
        return _redact_short(text)          # the same strings recur call after call (history, commands)
    return _redact_text(text)


_MEMO_MAX_CHARS = 512


def _redact_text(text: str) -> str:
    if not _MAYBE_SENSITIVE.search(text):
        return text
    for pattern, repl in _SENSITIVE_TEXT:
        text = pattern.sub(repl, text)
    return text


_redact_short = functools.lru_cache(maxsize=16384)(_redact_text)


def _redact_all(value: Any) -> Any:
    """Every non-empty string inside `value` replaced; the shape (lists, objects, numbers) kept for replay."""
    if isinstance(value, dict):
        return {k: _redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v) for v in value]
    return REDACTED if isinstance(value, str) and value else value


@functools.lru_cache(maxsize=4096)
def _sensitive_key(key: str) -> bool:
    return key not in _NAME_KEYS and _SENSITIVE_KEY.search(key) is not None


def redact_input(value: Any) -> Any:
    """A copy of `value` with the values of credential-like keys, and credentials inside strings (bearer
    tokens, `password=`, URL user-info, `Authorization:` headers in commands), replaced by "[redacted]"."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: (_redact_all(v) if isinstance(k, str) and _sensitive_key(k) else
                    v if v is None or v.__class__ in _SCALARS else redact_input(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [v if v is None or v.__class__ in _SCALARS else redact_input(v) for v in value]
    return value


_SCALARS = frozenset({int, float, bool})

# Whether redact_input could change anything, read off the JSON text of the whole input (most inputs: nothing to
# redact). json.dumps escapes every non-ASCII and control character, so with no backslash in the text every
# key and string appears in it verbatim, in ASCII, between quotes. Each text pattern and each sensitive key
# needs one of these words (case-insensitively: the text lowered), or "://" with an "@" after it; "secrets",
# the one key that names secrets rather than holding one, is taken out first. A word found by chance (in
# another string, across quotes) only means the slow path.
_WORDS = ("bearer", "basic", "token", "authori", "cookie", "pass", "secret", "api-key", "api_key", "apikey",
          "access-key", "access_key", "accesskey", "private", "credential", "session-key", "session_key",
          "sessionkey")


def _maybe_sensitive(text: str) -> bool:
    if "\\" in text:
        return True
    low = text.replace('"secrets":', "").lower()
    for word in _WORDS:
        if word in low:
            return True
    scheme = low.find("://")
    return scheme >= 0 and "@" in low[scheme:]


def redacted_text(text: str) -> str:
    """The JSON text `text` (json.dumps of a value) with its value redacted: `text` itself when nothing in it
    can need redacting (most inputs), else json.dumps(redact_input(json.loads(text))). The same text as
    json.dumps(redact_input(value)) for the value `text` was made from (json's text round-trips every value it
    writes: strings, numbers, key order)."""
    if not _maybe_sensitive(text):
        return text
    return json.dumps(redact_input(json.loads(text)))
