"""What the gateway reads of SQL text with PostgreSQL's own grammar (pglast): where one statement of a simple
Query ends and the next begins, whether a statement has parameters, and the statement a Bind will run (its
parameters written in as literals). Pure; never raises. What a statement *does* is the SQL facts' business
(gateway/toolcalls/sql.py), not this module's.
"""
from __future__ import annotations

import struct
import uuid

from pglast import parser

MAX_STATEMENT_CHARS = 1_000_000     # longer texts are decided whole, unsplit (they stay one statement)


def split_statements(query: str) -> list[str]:
    """The statements of a simple Query, in order, as the server will run them (empty ones dropped). A text
    pglast cannot parse is one statement (its facts then say it did not parse)."""
    if len(query) > MAX_STATEMENT_CHARS:
        return [query]
    try:
        slices = parser.split(query, with_parser=True, only_slices=True)
    except Exception:  # noqa: BLE001 - pglast raises ParseError and others: undecidable as parts, decided whole
        return [query] if query.strip() else []
    return [query[s] for s in slices if query[s].strip()]


def param_positions(statement: str) -> list[tuple[int, int, int]]:
    """(start, end-exclusive, number) of each `$n` parameter in `statement` ([] when it does not scan)."""
    if "$" not in statement:
        return []
    try:
        tokens = parser.scan(statement)
    except Exception:  # noqa: BLE001
        return []
    out = []
    for tok in tokens:
        if tok.name == "PARAM":
            text = statement[tok.start:tok.end + 1]
            if text[1:].isdigit():
                out.append((tok.start, tok.end + 1, int(text[1:])))
    return out


def has_params(statement: str) -> bool:
    return bool(param_positions(statement))


# type OIDs whose binary form we can write as a literal
_INTS = {21: "!h", 23: "!i", 20: "!q", 26: "!I"}
_FLOATS = {700: "!f", 701: "!d"}
_TEXTS = {25, 1043, 1042, 19, 705, 114, 0}
BOOL, BYTEA, UUID, JSONB = 16, 17, 2950, 3802


def quote_literal(text: str) -> str:
    """An escape-string literal: right whatever `standard_conforming_strings` says."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def render_param(value: bytes | None, fmt: int, oid: int) -> str | None:
    """A parameter value as SQL text, or None when it cannot be written faithfully (an unknown binary type)."""
    if value is None:
        return "NULL"
    try:
        if fmt == 0:
            return quote_literal(value.decode())
        if oid in _INTS:
            return str(struct.unpack(_INTS[oid], value)[0])
        if oid in _FLOATS:
            return f"{struct.unpack(_FLOATS[oid], value)[0]!r}::float8"
        if oid == BOOL and len(value) == 1:
            return "true" if value[0] else "false"
        if oid in _TEXTS:
            return quote_literal(value.decode())
        if oid == JSONB and value[:1] == b"\x01":
            return quote_literal(value[1:].decode()) + "::jsonb"
        if oid == BYTEA:
            return "'\\x" + value.hex() + "'::bytea"
        if oid == UUID and len(value) == 16:
            return f"'{uuid.UUID(bytes=value)}'::uuid"
    except (UnicodeDecodeError, struct.error, ValueError):
        return None
    return None


UNREADABLE = "/* sandgate: a parameter value it cannot read */ ?unreadable?"


def bind_statement(statement: str, values: list[str | None]) -> str:
    """`statement` with `$n` replaced by `values[n-1]`; a text that will not parse (so it is decided as
    unreadable) when a value is missing or unrenderable."""
    positions = param_positions(statement)
    out, last = [], 0
    for start, end, number in positions:
        if not 1 <= number <= len(values) or values[number - 1] is None:
            return statement + " " + UNREADABLE
        out += [statement[last:start], f"({values[number - 1]})"]
        last = end
    out.append(statement[last:])
    return "".join(out)
