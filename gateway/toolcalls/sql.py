"""SQL text -> the statement kinds it runs (`describe_sql`), for the tool-call policy. Pure; parsed with sqlglot."""
from __future__ import annotations

import logging
import re
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel

MAX_SQL_LENGTH = 100_000
logging.getLogger("sqlglot").setLevel(logging.ERROR)   # "falling back to parsing as a Command" per statement

_SQL_KINDS = {
    "Select": "SELECT", "Union": "SELECT", "Intersect": "SELECT", "Except": "SELECT", "Values": "SELECT",
    "Subquery": "SELECT", "Insert": "INSERT", "Update": "UPDATE", "Delete": "DELETE", "Drop": "DROP",
    "TruncateTable": "TRUNCATE", "Alter": "ALTER", "AlterTable": "ALTER", "Create": "CREATE", "Grant": "GRANT",
    "Revoke": "REVOKE", "Merge": "MERGE", "Copy": "COPY", "Set": "SET", "Use": "USE", "Describe": "DESCRIBE",
    "Transaction": "BEGIN", "Commit": "COMMIT", "Rollback": "ROLLBACK", "Pragma": "PRAGMA", "LoadData": "LOAD",
    "Analyze": "ANALYZE", "Comment": "COMMENT", "Show": "SHOW",
}
_SQL_WRITE_NODES = ("Insert", "Update", "Delete", "Drop", "TruncateTable", "Alter", "Create", "Grant", "Revoke",
                    "Merge", "Copy", "Command")
_SQL_DIALECTS = (None, "postgres", "mysql", "sqlite")


_PROGRAM = re.compile(r"\bPROGRAM\s+(?:E?'((?:[^']|'')*)'|\$\$(.*?)\$\$)", re.I | re.S)
_FILE_WRITES = re.compile(r"\bINTO\s+(?:OUTFILE|DUMPFILE)\s+'([^']*)'|\bCOPY\b[^;]*?\bTO\s+'([^']*)'|"
                          r"\bATTACH\s+(?:DATABASE\s+)?'([^']*)'|\bVACUUM\b[^;]*?\bINTO\s+'([^']*)'|"
                          r"\blo_export\s*\([^,]*,\s*'([^']*)'", re.I | re.S)


def describe_sql(query: str, dialect: str | None = None) -> dict:
    """{"parsed": bool, "kinds": [...], "unbounded": [...]}: statement kinds (SELECT, INSERT, DROP, ...) plus
    write kinds nested anywhere (a DELETE in a CTE, a DROP COLUMN in an ALTER); `unbounded` lists DELETE and
    UPDATE statements without a WHERE clause. Unparseable or empty SQL -> parsed false."""
    if not isinstance(query, str) or len(query) > MAX_SQL_LENGTH:
        return {"parsed": False, "kinds": [], "unbounded": []}
    for read in ((dialect,) if dialect else ()) + _SQL_DIALECTS:
        try:
            # IMMEDIATE, never RAISE: with RAISE sqlglot parses on after an error and loops forever on a malformed
            # COPY ("COPY #"), gathering error texts until the process is out of memory.
            statements = [s for s in sqlglot.parse(query, read=read, error_level=ErrorLevel.IMMEDIATE)
                          if s is not None]
            kinds = _sql_kinds(statements)
        except Exception:  # noqa: BLE001 - sqlglot raises several error types (and ValueError for dialects)
            continue
        if statements and kinds is not None:
            return {"parsed": True, "kinds": kinds, "unbounded": _unbounded(statements)}
    return {"parsed": False, "kinds": [], "unbounded": []}


def sql_side_effects(query: str) -> tuple[list[str], list[str]]:
    """(programs run by `COPY ... PROGRAM '...'`, files written by `INTO OUTFILE`, `COPY ... TO '...'`,
    `ATTACH`, `VACUUM INTO`, `lo_export`), found in the SQL text whether or not it parses."""
    if not isinstance(query, str):
        return [], []
    programs = [(m.group(1) if m.group(1) is not None else m.group(2)).replace("''", "'")
                for m in _PROGRAM.finditer(query[:MAX_SQL_LENGTH])]
    files = [next(g for g in m.groups() if g is not None) for m in _FILE_WRITES.finditer(query[:MAX_SQL_LENGTH])]
    return programs, files


def _unbounded(statements: list) -> list[str]:
    out: list[str] = []
    for stmt in statements:
        for node in stmt.walk():
            where = node.args.get("where") if isinstance(node, (exp.Delete, exp.Update)) else None
            # no WHERE, or one that names no column (WHERE 1=1, WHERE true): every row
            if isinstance(node, (exp.Delete, exp.Update)) and (where is None or where.find(exp.Column) is None):
                out.append("DELETE" if isinstance(node, exp.Delete) else "UPDATE")
    return list(dict.fromkeys(out))


def _sql_kinds(statements: list) -> list[str] | None:
    kinds: list[str] = []
    for stmt in statements:
        root = _sql_kind(stmt)
        if root is None:
            return None
        kinds.append(root)
        if root == "EXPLAIN":
            inner = re.sub(r"^\s*((ANALY[SZ]E|VERBOSE|QUERY\s+PLAN(\s+FOR)?|\([^)]*\))\s+)*", "",
                           _command_rest(stmt), flags=re.I)
            nested = describe_sql(inner) if inner.strip() else {"parsed": True, "kinds": []}
            if not nested["parsed"]:
                return None
            kinds += nested["kinds"]
        for node in stmt.walk():
            if node is not stmt and type(node).__name__ in _SQL_WRITE_NODES:
                kinds.append(_sql_kind(node) or "UNKNOWN")
    return list(dict.fromkeys(kinds))


def _sql_kind(node: Any) -> str | None:
    name = type(node).__name__
    if name == "Command":
        return str(node.this).upper().split()[0] if str(node.this).strip() else None
    return _SQL_KINDS.get(name)


def _command_rest(node: exp.Expression) -> str:
    rest = node.args.get("expression")
    return rest.name if isinstance(rest, exp.Literal) else (str(rest) if rest is not None else "")
