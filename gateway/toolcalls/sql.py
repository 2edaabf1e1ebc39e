"""SQL text -> what it does (`describe_sql`), for the tool-call policy. Pure.

PostgreSQL's SQL is read with PostgreSQL's own grammar (pglast, gateway/toolcalls/sqlpg.py) when the dialect is
PostgreSQL's, or is not given and pglast parses the text; every other dialect with sqlglot. Both give one facts
object: `parsed`, `kinds` (statement kinds: SELECT, INSERT, DROP, ...), `unbounded` (UPDATE / DELETE whose WHERE
does not bound the rows), `kind` (read | session | write | delete | other: the least safe statement's class),
`functions` (every function called), `settings` (what SET changes), `unsafe` (what made a statement `other`),
`dialect`. The policy checks `functions` against `sql_safe_functions` and `settings` against `sql_safe_settings`.
"""
from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from typing import Any

from pglast import parser as pg_parser

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel
from sqlglot.optimizer.simplify import simplify

from gateway.toolcalls.sqlconst import MAX_SQL_LENGTH, SEQUENCE_WRITES
from gateway.toolcalls.sqlpg import CLASSES, classify_pg

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
POSTGRES_DIALECTS = frozenset(("postgres", "postgresql", "pg", "psql"))
_RANK = {c: i for i, c in enumerate(CLASSES)}
_UNPARSED = {"parsed": False, "kinds": [], "unbounded": [], "kind": "other", "functions": [], "settings": [],
             "unsafe": []}
# sqlglot function nodes that are syntax in PostgreSQL, not function calls
_SYNTAX = frozenset(("Cast", "TryCast", "Case", "If", "Coalesce", "Nullif", "Greatest", "Least", "CurrentDate",
                     "CurrentTime", "CurrentTimestamp", "CurrentUser", "Extract", "Array", "Struct", "Bracket",
                     "Collate", "Exists", "Convert", "Interval", "Count", "Min", "Max", "Sum", "Avg", "Any", "All"))


_PROGRAM = re.compile(r"\bPROGRAM\s+(?:E?'((?:[^']|'')*)'|\$\$(.*?)\$\$)", re.I | re.S)
_FILE_WRITES = re.compile(r"\bINTO\s+(?:OUTFILE|DUMPFILE)\s+'([^']*)'|\bCOPY\b[^;]*?\bTO\s+'([^']*)'|"
                          r"\bATTACH\s+(?:DATABASE\s+)?'([^']*)'|\bVACUUM\b[^;]*?\bINTO\s+'([^']*)'|"
                          r"\blo_export\s*\([^,]*,\s*'([^']*)'", re.I | re.S)


def describe_sql(query: str, dialect: str | None = None) -> dict:
    """The SQL facts of `query` (see the module doc). Unparseable or empty SQL -> parsed false, kind other."""
    if not isinstance(query, str) or len(query) > MAX_SQL_LENGTH:
        return dict(_UNPARSED)
    name = dialect.strip().lower() if isinstance(dialect, str) and dialect.strip() else None
    if name is None or name in POSTGRES_DIALECTS:
        shape = SHAPES.key(query)
        hit = SHAPES.get(shape)
        if hit is not None:
            return hit
        facts = classify_pg(query)
        SHAPES.put(shape, facts)
        if facts is not None and name is None and _OTHER_LEXING.search(query):
            # Not said to be PostgreSQL: text another server lexes otherwise (a backslash escaping a quote, MySQL's
            # executable comments) is also read as MySQL would, and the less safe reading counts.
            facts = _merge(facts, _glot(query, ("mysql",)), executable="/*!" in query or "/*M!" in query)
        if facts is not None or name is not None:
            return facts or dict(_UNPARSED, dialect="postgres")
    known = name is not None and _known_dialect(name)
    # a dialect sqlglot knows: that grammar only (what it does not parse asks); else the usual ones in turn
    return _glot(query, (name,) if known else ((name,) if name else ()) + _SQL_DIALECTS)


_OTHER_LEXING = re.compile(r"\\|/\*M?!")


class ShapeMemo:
    """The facts of read-only statements by their shape: the token stream with every constant's value left out
    (`WHERE aid = 1` and `WHERE aid = 2` are one shape). Sound only where no fact depends on a constant's value:
    the classifier reads constants only for a trivially true WHERE (of a write) and for set_config's name. So a
    shape is kept only when its facts say every statement is a plain SELECT that calls no function, changes no
    setting and is not unsafe or unbounded, and its text never names set_config (nor spells a name with `U&`,
    which could hide it). A text with a backslash or a `/*` comment is never kept (another server lexes those
    otherwise: describe_sql reads them twice). Bounded (least recently used out); thread-safe (describe_sql also runs on worker threads)."""

    MAX_TEXT = 4096

    def __init__(self, size: int = 2048):
        self.size = size
        self.hits = self.misses = 0
        self._items: "OrderedDict[str, dict]" = OrderedDict()
        self._lock = threading.Lock()

    def key(self, query: str) -> str | None:
        if len(query) > self.MAX_TEXT or "\\" in query or "/*" in query:
            return None
        lowered = query.lower()
        if "set_config" in lowered or "u&" in lowered:      # the one function whose constant is read (its facts
            return None                                     # may not show it: an empty name is dropped)
        if _PLAIN_TEXT.fullmatch(query):
            # No quote, comment, dollar, backslash or operator that starts one: the lexer reads words, symbols and
            # numbers only. A run of at most 9 digits touching no word character, dot or digit is an integer
            # constant (ICONST) in every spelling; blanked, the rest of the text is the shape (a scan costs
            # ~50 us, this ~3 us). Its own key space: it never equals a scanned shape's key.
            return "\x01" + _PLAIN_INT.sub("\x02", query)
        try:
            tokens = pg_parser.scan(query)
        except Exception:  # noqa: BLE001 - does not scan: no shape (classify_pg says what it is)
            return None
        return "\x00".join(t.name if t.name in _CONSTANTS else query[t.start:t.end + 1] for t in tokens)

    def get(self, key: str | None) -> dict | None:
        if key is None:
            return None
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
        return {k: list(v) if isinstance(v, list) else v for k, v in hit.items()}

    def put(self, key: str | None, facts: dict | None) -> None:
        if key is None or facts is None or not _constant_free(facts):
            return
        kept = {k: list(v) if isinstance(v, list) else v for k, v in facts.items()}
        with self._lock:
            self._items[key] = kept
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


# Text made of words, integers, blanks and a few one-character symbols only (no quote, comment, `$`, `:`, `-`, `/`,
# backslash, `&` or `?`), and its integer constants (ShapeMemo.key)
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_ \t\r\n=<>,.;()*+]*")
_PLAIN_INT = re.compile(r"(?<![A-Za-z0-9_$.])[0-9]{1,9}(?![A-Za-z0-9_$.])")
_CONSTANTS = frozenset(("SCONST", "ICONST", "FCONST", "BCONST", "XCONST", "USCONST"))


def _constant_free(facts: dict) -> bool:
    """Facts no constant's value can change (see ShapeMemo)."""
    return (facts.get("parsed") is True and facts.get("kind") == "read" and bool(facts.get("kinds"))
            and all(k == "SELECT" for k in facts["kinds"]) and not facts.get("functions")
            and not facts.get("settings") and not facts.get("unsafe") and not facts.get("unbounded"))


SHAPES = ShapeMemo()


def _known_dialect(name: str) -> bool:
    try:
        sqlglot.Dialect.get_or_raise(name)
    except Exception:  # noqa: BLE001 - an unknown dialect name
        return False
    return True


def _merge(facts: dict, other: dict, executable: bool) -> dict:
    if not other.get("parsed"):
        other = {"kind": "read"}
    out = dict(facts)
    for key in ("kinds", "unbounded", "functions", "settings", "unsafe"):
        out[key] = list(dict.fromkeys(facts.get(key, []) + other.get(key, [])))
    if _RANK[other.get("kind", "other")] > _RANK[out["kind"]]:
        out["kind"] = other["kind"]
    if executable:
        out["kind"] = "other"
        out["unsafe"] = out["unsafe"] + ["MySQL executable comment"]
    return out


def _glot(query: str, dialects: tuple) -> dict:
    for read in dialects:
        try:
            # IMMEDIATE, never RAISE: with RAISE sqlglot parses on after an error and loops forever on a malformed
            # COPY ("COPY #"), gathering error texts until the process is out of memory.
            statements = [s for s in sqlglot.parse(query, read=read, error_level=ErrorLevel.IMMEDIATE)
                          if s is not None and not isinstance(s, exp.Semicolon)]
            kinds = _sql_kinds(statements)
        except Exception:  # noqa: BLE001 - sqlglot raises several error types (and ValueError for dialects)
            continue
        if statements and kinds is not None:
            return {"parsed": True, "dialect": read or "sql", "kinds": kinds, "unbounded": _unbounded(statements),
                    **_classes(statements)}
    return dict(_UNPARSED)


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
            if isinstance(node, (exp.Delete, exp.Update)) and trivially_true(node.args.get("where")):
                out.append("DELETE" if isinstance(node, exp.Delete) else "UPDATE")
    return list(dict.fromkeys(out))


def trivially_true(where: exp.Expression | None) -> bool:
    """sqlglot's reading of a WHERE that does not bound the rows (gateway/toolcalls/sqlpg.py for PostgreSQL's)."""
    if isinstance(where, exp.Where):
        where = where.this
    if where is None or where.find(exp.Column) is None:
        return True
    return _glot_true(where)


def _glot_true(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if node.find(exp.Column) is None:
        return _glot_const(node) is not False
    if isinstance(node, exp.Or):
        arms = _flatten(node, exp.Or)
        return any(_glot_true(a) for a in arms) or _glot_covering(arms)
    if isinstance(node, exp.And):
        return all(_glot_true(a) for a in _flatten(node, exp.And))
    if isinstance(node, exp.Not):
        return _glot_false(node.this)
    if isinstance(node, (exp.EQ, exp.GTE, exp.LTE, exp.NullSafeEQ)):
        return node.this == node.expression
    if isinstance(node, (exp.Like, exp.ILike)):
        pattern = node.expression
        return isinstance(pattern, exp.Literal) and pattern.is_string and set(pattern.this) == {"%"}
    if isinstance(node, exp.Case):
        results = [w.args.get("true") for w in node.args.get("ifs") or []] + [node.args.get("default")]
        return all(r is not None and _glot_true(r) for r in results)
    return False


def _glot_false(node: exp.Expression) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    if node.find(exp.Column) is None:
        return _glot_const(node) is False
    if isinstance(node, exp.Not):
        return _glot_true(node.this)
    if isinstance(node, exp.And):
        return any(_glot_false(a) for a in _flatten(node, exp.And))
    if isinstance(node, exp.Or):
        return all(_glot_false(a) for a in _flatten(node, exp.Or))
    if isinstance(node, (exp.NEQ, exp.GT, exp.LT, exp.NullSafeNEQ)):
        return node.this == node.expression
    return False


def _glot_const(node: exp.Expression) -> bool | None:
    """A column-free predicate's value when sqlglot folds it to a constant (NULL is False), else None."""
    try:
        folded = simplify(node.copy())
    except Exception:  # noqa: BLE001 - the simplifier raises on shapes it does not fold
        return None
    while isinstance(folded, exp.Paren):
        folded = folded.this
    if isinstance(folded, exp.Boolean):
        return bool(folded.this)
    if isinstance(folded, exp.Null):
        return False
    return None


def _flatten(node: exp.Expression, kind: type) -> list:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return _flatten(node.this, kind) + _flatten(node.expression, kind)
    return [node]


_GLOT_ORDER = {exp.LT: {"lt"}, exp.LTE: {"lt", "eq"}, exp.EQ: {"eq"}, exp.GTE: {"gt", "eq"}, exp.GT: {"gt"},
               exp.NEQ: {"lt", "gt"}}
_GLOT_FLIP = {exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _glot_covering(arms: list) -> bool:
    """`p OR NOT p`, `x IS NULL OR x IS NOT NULL`, comparisons of one pair covering <, = and >."""
    plain = {a.sql() for a in arms if not isinstance(a, exp.Not)}
    if any(isinstance(a, exp.Not) and a.this.sql() in plain for a in arms):
        return True
    if any(isinstance(a, exp.Not) and isinstance(a.this, exp.Paren) and a.this.this.sql() in plain for a in arms):
        return True
    order: dict[tuple[str, str], set] = {}
    for arm in arms:
        if type(arm) in _GLOT_ORDER:
            left, right, op = arm.this.sql(), arm.expression.sql(), type(arm)
            if (right, left) in order and (left, right) not in order:
                left, right, op = right, left, _GLOT_FLIP[op]
            order.setdefault((left, right), set()).update(_GLOT_ORDER[op])
    return any(got >= {"lt", "eq", "gt"} for got in order.values())


def _classes(statements: list) -> dict:
    """sqlglot's reading of the statements' classes, functions and settings (sqlpg.py's for PostgreSQL)."""
    classes: list[str] = []
    functions: list[str] = []
    settings: list[str] = []
    unsafe: list[str] = []
    for stmt in statements:
        cls = _glot_class(stmt, settings, unsafe)
        called = len(functions)
        for node in stmt.walk():
            if isinstance(node, exp.Func) and type(node).__name__ not in _SYNTAX \
                    and not isinstance(node, (exp.Binary, exp.Connector, exp.Unary, exp.Predicate)):
                functions.append((node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower())
            if node is not stmt and isinstance(node, (exp.Insert, exp.Update, exp.Delete, exp.Merge)):
                inner = _glot_class(node, settings, unsafe)
                cls = inner if _RANK[inner] > _RANK[cls] else cls
        if _RANK[cls] < _RANK["write"] and not SEQUENCE_WRITES.isdisjoint(functions[called:]):
            cls = "write"                    # SELECT nextval('s') advances the sequence
        classes.append(cls)
    kind = max(classes, key=_RANK.__getitem__) if classes else "other"
    return {"kind": kind, "functions": list(dict.fromkeys(f for f in functions if f)),
            "settings": list(dict.fromkeys(settings)), "unsafe": list(dict.fromkeys(unsafe))}


def _glot_class(stmt: exp.Expression, settings: list, unsafe: list) -> str:
    if isinstance(stmt, exp.Query):
        if stmt.find(exp.Into) is not None:
            unsafe.append("SELECT INTO")
            return "other"
        if any(n.args.get("locks") for n in stmt.walk() if isinstance(n, exp.Select)):
            unsafe.append("SELECT ... FOR UPDATE")
            return "other"
        return "read"
    if isinstance(stmt, exp.Insert):
        if stmt.args.get("overwrite"):
            unsafe.append("INSERT OVERWRITE")
            return "other"
        if stmt.args.get("alternative"):
            unsafe.append(f"INSERT OR {str(stmt.args['alternative']).upper()}")
            return "other"
        return "write"
    if isinstance(stmt, exp.Update):
        return "write"
    if isinstance(stmt, exp.Merge):
        whens = stmt.args.get("whens")
        if any("DELETE" in w.sql().upper() for w in (whens.expressions if whens else [])):
            unsafe.append("MERGE ... DELETE")
            return "delete"
        return "write"
    if isinstance(stmt, (exp.Delete, exp.Drop, exp.TruncateTable)):
        return "delete"
    if isinstance(stmt, (exp.Transaction, exp.Commit, exp.Rollback)):
        return "session"
    if isinstance(stmt, exp.Set):
        for item in stmt.expressions:
            if item.args.get("kind"):
                settings.append(str(item.args["kind"]).lower())
            elif isinstance(item.this, exp.EQ):
                settings.append(item.this.this.sql().lower())
            else:
                settings.append(item.sql().lower())
        return "session"
    if isinstance(stmt, (exp.Show, exp.Describe)):
        return "read"
    if isinstance(stmt, exp.Command) and str(stmt.this).upper() in ("SAVEPOINT", "RELEASE", "START", "BEGIN"):
        return "session"
    if isinstance(stmt, exp.Command) and str(stmt.this).upper() == "EXPLAIN":
        inner = re.sub(r"^\s*((ANALY[SZ]E|VERBOSE|QUERY\s+PLAN(\s+FOR)?|\([^)]*\))\s+)*", "", _command_rest(stmt),
                       flags=re.I)
        nested = describe_sql(inner) if inner.strip() else {"kind": "read"}
        return nested.get("kind", "other")
    what = _sql_kind(stmt) or type(stmt).__name__.upper()
    if isinstance(stmt, exp.Create) and stmt.args.get("replace"):
        what = "CREATE OR REPLACE"
    unsafe.append(what)
    return "other"


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
