"""What the gateway reads of SQL text with PostgreSQL's own grammar (pglast): where one statement of a simple
Query ends and the next begins, whether a statement has parameters, and the statement a Bind will run (its
parameters written in as literals). Pure; never raises. What a statement *does* is the SQL facts' business
(gateway/toolcalls/sql.py), not this module's.
"""
from __future__ import annotations

import datetime
import decimal
import re
import struct
import uuid

from pglast import ast, parser
from pglast.enums import A_Expr_Kind, BoolExprType
from pglast.visitors import Visitor

MAX_STATEMENT_CHARS = 1_000_000     # longer texts are decided whole, unsplit (they stay one statement)
# No quote, comment, dollar or backslash, and no `;` but a last one: split without parsing (pgbench's -M simple)
_ONE_PLAIN = re.compile(r"[A-Za-z0-9_ \t\r\n=<>,.()*+]*(;[ \t\r\n]*)?")


def split_statements(query: str) -> list[str]:
    """The statements of a simple Query, in order, as the server will run them (empty ones dropped). A text
    pglast cannot parse is one statement (its facts then say it did not parse)."""
    if len(query) > MAX_STATEMENT_CHARS:
        return [query]
    if _ONE_PLAIN.fullmatch(query):
        # words, numbers, blanks and a few symbols, at most one `;` and only at the end: one statement (or none)
        # whatever the grammar says of it; pglast's slice of it is the text without the blanks and the `;`
        text = query.strip()
        text = text[:-1].rstrip() if text.endswith(";") else text
        return [text] if text else []
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


# LIKE and ILIKE (~~, ~~*) are not here: `name LIKE '%'` matches every row, so their pattern matters
_COMPARISONS = frozenset(("=", "<>", "!=", "<", ">", "<=", ">=", "!~~", "!~~*"))


def params_matter(statement: str) -> bool:
    """Whether what `statement` does can depend on its parameters' values, so a Bind must be decided again with
    them. False only when every `$n` stands where a value cannot change what the statement is: compared with a
    column (`id = $1`, `id IN ($1, $2)`, `id = ANY($1)`, `id BETWEEN $1 AND $2`) as a clause of a WHERE, ON or
    HAVING or of an AND there (not under OR, NOT, IS NOT FALSE, coalesce, CASE, ...: bound NULL, `(id = $1) IS
    NOT FALSE` holds for every row), a value
    of an INSERT's VALUES, the new value of an UPDATE's `SET col = $1`, a SELECT's output column, LIMIT or
    OFFSET. Anything else (`WHERE $1`, `id = $1 OR $2`, `id = $1 OR id <> $2` (bound 5, 5: every row),
    `name LIKE $1` (bound '%'), `1 = $1`, a function's argument, a statement that does not parse) matters."""
    if not has_params(statement):
        return False
    try:
        tree = parser.parse_sql(statement)
    except Exception:  # noqa: BLE001
        return True
    finder = _Params()
    finder(tree)
    return finder.matter


class _Params(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.matter = False

    def visit_ParamRef(self, ancestors, node) -> None:  # noqa: ANN001 - pglast's visitor signature
        if not _value_position(ancestors) or _alternative(ancestors):
            self.matter = True


def _alternative(ancestors) -> bool:  # noqa: ANN001
    """Whether the parameter stands under an OR or a NOT: values there can make arms that cover every row
    (`id = $1 OR id <> $2`), which a comparison alone cannot."""
    a = ancestors
    while a is not None:
        if isinstance(a.node, ast.BoolExpr) and a.node.boolop != BoolExprType.AND_EXPR:
            return True
        a = a.parent
    return False


def _unwrap(node):  # noqa: ANN001, ANN202
    while isinstance(node, ast.TypeCast):
        node = node.arg
    return node


def _value_position(ancestors) -> bool:  # noqa: ANN001
    a = ancestors
    while isinstance(a.node, ast.TypeCast) and a.member == "arg":
        a = a.parent
    parent, member = a.node, a.member
    if isinstance(parent, tuple) and a.parent is not None:
        holder, held_as = a.parent.node, a.parent.member
        if isinstance(holder, ast.A_Expr) and held_as == "rexpr":          # IN (...), BETWEEN ... AND ...
            return holder.kind in (A_Expr_Kind.AEXPR_IN, A_Expr_Kind.AEXPR_BETWEEN, A_Expr_Kind.AEXPR_NOT_BETWEEN) \
                and isinstance(_unwrap(holder.lexpr), ast.ColumnRef) and _clause(a.parent.parent)
        if isinstance(holder, tuple) and a.parent.parent is not None:      # VALUES ((...), (...))
            return a.parent.parent.member == "valuesLists" and isinstance(a.parent.parent.node, ast.SelectStmt)
        return False
    if isinstance(parent, ast.A_Expr) and member in ("lexpr", "rexpr"):
        other = _unwrap(parent.rexpr if member == "lexpr" else parent.lexpr)
        ops = {getattr(n, "sval", None) for n in parent.name or ()}
        return parent.kind in (A_Expr_Kind.AEXPR_OP, A_Expr_Kind.AEXPR_OP_ANY, A_Expr_Kind.AEXPR_OP_ALL,
                               A_Expr_Kind.AEXPR_LIKE, A_Expr_Kind.AEXPR_ILIKE) \
            and len(ops) == 1 and ops <= _COMPARISONS and isinstance(other, ast.ColumnRef) and _clause(a.parent)
    if isinstance(parent, ast.ResTarget) and member == "val" and a.parent is not None \
            and isinstance(a.parent.node, tuple) and a.parent.parent is not None:
        owner = a.parent.parent
        return owner.member == "targetList" and (isinstance(owner.node, ast.UpdateStmt)
                                                 or (isinstance(owner.node, ast.SelectStmt) and _top(owner)))
    if isinstance(parent, ast.SelectStmt) and member in ("limitCount", "limitOffset"):
        return _top(a)
    return False


# where a comparison's truth bounds the rows: a clause of these, or of an AND standing there
_CLAUSES = frozenset(("whereClause", "havingClause", "quals", "joinCondition", "condition"))


def _clause(held) -> bool:  # noqa: ANN001
    """Whether the comparison `held` holds (an ancestors entry: its holder and member) stands as a clause of a
    WHERE / ON / HAVING / MERGE condition, or of an AND there: nothing around it (IS NOT FALSE, coalesce, CASE,
    a function) can turn its NULL or its false into true."""
    while held is not None:
        node = held.node
        if isinstance(node, tuple) or (isinstance(node, ast.BoolExpr) and node.boolop == BoolExprType.AND_EXPR):
            held = held.parent
            continue
        return held.member in _CLAUSES
    return False


def _top(select) -> bool:  # noqa: ANN001
    """A SELECT that is the statement itself or an INSERT's rows (not a subquery, whose rows could be a WHERE's)."""
    up = select.parent
    return up is not None and (isinstance(up.node, ast.RawStmt)
                               or (isinstance(up.node, ast.InsertStmt) and up.member == "selectStmt"))


# type OIDs whose binary form we can write as a literal
_INTS = {21: "!h", 23: "!i", 20: "!q", 26: "!I"}
_FLOATS = {700: "!f", 701: "!d"}
_TEXTS = {25, 1043, 1042, 19, 114}     # a binary value of an unstated type (0) is never guessed
BOOL, BYTEA, UUID, JSONB = 16, 17, 2950, 3802
DATE, TIMESTAMP, TIMESTAMPTZ, NUMERIC = 1082, 1114, 1184, 1700
_EPOCH = datetime.datetime(2000, 1, 1)
_ARRAYS = {1000: BOOL, 1005: 21, 1007: 23, 1016: 20, 1009: 25, 1015: 1043, 1021: 700, 1022: 701, 1231: NUMERIC,
           2951: UUID, 1182: DATE, 1115: TIMESTAMP, 1185: TIMESTAMPTZ, 1001: BYTEA, 1028: 26, 1003: 19}


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
        if oid == DATE and len(value) == 4:
            days = struct.unpack("!i", value)[0]
            return f"'{(_EPOCH + datetime.timedelta(days=days)).date().isoformat()}'::date"
        if oid in (TIMESTAMP, TIMESTAMPTZ) and len(value) == 8:
            stamp = _EPOCH + datetime.timedelta(microseconds=struct.unpack("!q", value)[0])
            kind = "timestamptz" if oid == TIMESTAMPTZ else "timestamp"
            return f"'{stamp.isoformat(timespec='microseconds')}{'+00' if oid == TIMESTAMPTZ else ''}'::{kind}"
        if oid == NUMERIC:
            return _numeric(value)
        if oid in _ARRAYS:
            return _array(value, _ARRAYS[oid])
    except (UnicodeDecodeError, struct.error, ValueError, OverflowError):
        return None
    return None


def _numeric(value: bytes) -> str | None:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", value)
    if len(value) != 8 + 2 * ndigits:
        return None
    if sign == 0xC000:
        return "'NaN'::numeric"
    if sign not in (0, 0x4000):
        return None
    digits = struct.unpack_from(f"!{ndigits}h", value, 8)
    if any(not 0 <= d < 10000 for d in digits):
        return None
    with decimal.localcontext(prec=4 * (ndigits + max(weight, 0) + 1) + max(dscale, 0) + 8):
        number = decimal.Decimal(0)
        for i, d in enumerate(digits):
            number += decimal.Decimal(d).scaleb(4 * (weight - i))
        text = format(number.quantize(decimal.Decimal(1).scaleb(-dscale)) if dscale >= 0 else number, "f")
    return ("-" if sign == 0x4000 else "") + text + "::numeric"


def _array(value: bytes, element: int) -> str | None:
    ndim, _flags, elem_oid = struct.unpack_from("!iiI", value)
    if ndim == 0:
        return "'{}'"
    if ndim != 1 or elem_oid != element:
        return None                       # multi-dimensional arrays: not written (the statement is unreadable)
    length, _lower = struct.unpack_from("!ii", value, 12)
    pos, items = 20, []
    for _ in range(length):
        (size,) = struct.unpack_from("!i", value, pos)
        pos += 4
        item = None if size == -1 else value[pos:pos + size]
        pos += max(size, 0)
        rendered = render_param(item, 1, element)
        if rendered is None:
            return None
        items.append(rendered)
    if pos != len(value):
        return None
    return "ARRAY[" + ", ".join(items) + "]"


UNREADABLE = "/* sandgate: a parameter value it cannot read */ ?unreadable?"


def bind_statement(statement: str, values: list[str | None],
                   positions: list[tuple[int, int, int]] | None = None) -> str:
    """`statement` with `$n` replaced by `values[n-1]`; a text that will not parse (so it is decided as
    unreadable) when a value is missing or unrenderable. `positions`: param_positions(statement), if known."""
    if positions is None:
        positions = param_positions(statement)
    out, last = [], 0
    for start, end, number in positions:
        if not 1 <= number <= len(values) or values[number - 1] is None:
            return statement + " " + UNREADABLE
        out += [statement[last:start], f"({values[number - 1]})"]
        last = end
    out.append(statement[last:])
    return "".join(out)


def copies_in(statement: str) -> bool:
    """Whether `statement` may be a COPY ... FROM STDIN (the server then reads COPY data from the client). A text
    that does not parse but names COPY counts."""
    if "copy" not in statement.lower():
        return False
    try:
        nodes = parser.parse_sql(statement)
    except Exception:  # noqa: BLE001
        return True
    return any(isinstance(raw.stmt, ast.CopyStmt) and raw.stmt.is_from and not raw.stmt.filename
               and not raw.stmt.is_program for raw in nodes)


def deallocated(statement: str) -> list[str] | None:
    """The prepared statements an SQL statement drops: their names for `DEALLOCATE name`, [] for nothing, None for
    all of them (`DEALLOCATE ALL`, `DISCARD ALL`)."""
    head = statement.lstrip().lower()
    if not (head.startswith("deallocate") or head.startswith("discard")) and "deallocate" not in head \
            and "discard" not in head:
        return []
    try:
        nodes = parser.parse_sql(statement)
    except Exception:  # noqa: BLE001
        return []
    names: list[str] = []
    for raw in nodes:
        stmt = raw.stmt
        kind = type(stmt).__name__
        if kind == "DeallocateStmt":
            if stmt.name is None:
                return None
            names.append(stmt.name)
        elif kind == "DiscardStmt" and stmt.target.name in ("DISCARD_ALL", "DISCARD_PLANS"):
            if stmt.target.name == "DISCARD_ALL":
                return None
    return names
