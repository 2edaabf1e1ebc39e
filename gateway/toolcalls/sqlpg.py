"""PostgreSQL SQL read with PostgreSQL's own grammar (pglast, libpg_query): what each statement does.

`classify_pg(text)` -> the SQL facts (see gateway/toolcalls/sql.py `describe_sql`) or None when pglast does not
parse the text. Each statement gets a class:

- `read`: SELECT / VALUES / TABLE / SHOW / COPY ... TO STDOUT / EXPLAIN of a read / DECLARE CURSOR of a read / FETCH / MOVE / CLOSE,
  with no INTO, no locking clause and no writing CTE anywhere;
- `session`: transaction and session control (BEGIN / START, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO,
  SET / RESET, DISCARD, DEALLOCATE, LISTEN, UNLISTEN); the settings a SET names are listed in `settings` for the
  policy to check against `sql_safe_settings`;
- `write`: INSERT, COPY ... FROM STDIN, UPDATE, MERGE without DELETE; an UPDATE (or MERGE's update) whose WHERE (ON) is trivially
  true is also listed in `unbounded` (a join of the table with itself counts as its own columns: each row meets
  itself), and so is an upsert (`ON CONFLICT DO UPDATE`) whose rows come from its own table;
- `delete`: DELETE, TRUNCATE, DROP, MERGE with DELETE;
- `other`: everything else (and what made it so is listed in `unsafe`), an UPDATE of `pg_settings` included (its
  rule calls set_config: a setting changed with no SET for `sql_safe_settings` to read).

`kind` is the least safe class of all statements (read < session < write < delete < other); every function a
statement calls, wherever it stands, is listed in `functions` (but `set_config('name', ...)` in `settings`) (pg_catalog's unqualified, others as
`schema.name`) for the policy to check against `sql_safe_functions`. Pure; never raises for any input text.
"""
from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

from pglast import ast, parser
from pglast.enums import A_Expr_Kind, BoolExprType, BoolTestType, NullTestType, TransactionStmtKind
from pglast.enums import VariableSetKind
from pglast.visitors import Ancestor, Visitor

from gateway.toolcalls.sqlconst import CLASSES, SEQUENCE_WRITES

_RANK = {c: i for i, c in enumerate(CLASSES)}

_SESSION_TX = {TransactionStmtKind.TRANS_STMT_BEGIN, TransactionStmtKind.TRANS_STMT_START,
               TransactionStmtKind.TRANS_STMT_COMMIT, TransactionStmtKind.TRANS_STMT_ROLLBACK,
               TransactionStmtKind.TRANS_STMT_SAVEPOINT, TransactionStmtKind.TRANS_STMT_RELEASE,
               TransactionStmtKind.TRANS_STMT_ROLLBACK_TO}
_TX_WORDS = {TransactionStmtKind.TRANS_STMT_BEGIN: "BEGIN", TransactionStmtKind.TRANS_STMT_START: "BEGIN",
             TransactionStmtKind.TRANS_STMT_COMMIT: "COMMIT", TransactionStmtKind.TRANS_STMT_ROLLBACK: "ROLLBACK",
             TransactionStmtKind.TRANS_STMT_SAVEPOINT: "SAVEPOINT", TransactionStmtKind.TRANS_STMT_RELEASE: "RELEASE",
             TransactionStmtKind.TRANS_STMT_ROLLBACK_TO: "ROLLBACK"}
# statement node -> (kind word, shown name) where the name is not the node's words
_NAMES = {"CreateStmt": ("CREATE", "CREATE TABLE"), "IndexStmt": ("CREATE", "CREATE INDEX"),
          "ViewStmt": ("CREATE", "CREATE VIEW"), "CreateTableAsStmt": ("CREATE", "CREATE TABLE AS"),
          "RenameStmt": ("ALTER", "ALTER ... RENAME"), "DropOwnedStmt": ("DROP", "DROP OWNED"),
          "ReassignOwnedStmt": ("ALTER", "REASSIGN OWNED"), "DoStmt": ("DO", "DO"), "CallStmt": ("CALL", "CALL"),
          "ExecuteStmt": ("EXECUTE", "EXECUTE"), "PrepareStmt": ("PREPARE", "PREPARE"), "CopyStmt": ("COPY", "COPY with a server file or program"),
          "LockStmt": ("LOCK", "LOCK"), "NotifyStmt": ("NOTIFY", "NOTIFY"), "LoadStmt": ("LOAD", "LOAD"),
          "CheckPointStmt": ("CHECKPOINT", "CHECKPOINT"), "DropdbStmt": ("DROP", "DROP DATABASE"),
          "CreatedbStmt": ("CREATE", "CREATE DATABASE"), "AlterSystemStmt": ("ALTER", "ALTER SYSTEM"),
          "RefreshMatViewStmt": ("REFRESH", "REFRESH MATERIALIZED VIEW"), "ClusterStmt": ("CLUSTER", "CLUSTER"),
          "ReindexStmt": ("REINDEX", "REINDEX"), "CommentStmt": ("COMMENT", "COMMENT"),
          "SecLabelStmt": ("SECURITY", "SECURITY LABEL"), "TruncateStmt": ("TRUNCATE", "TRUNCATE"),
          "DropStmt": ("DROP", "DROP"), "DeleteStmt": ("DELETE", "DELETE"), "ImportForeignSchemaStmt":
          ("IMPORT", "IMPORT FOREIGN SCHEMA"), "AlterDefaultPrivilegesStmt": ("ALTER", "ALTER DEFAULT PRIVILEGES"),
          "CreateTrigStmt": ("CREATE", "CREATE TRIGGER"), "RuleStmt": ("CREATE", "CREATE RULE")}
_DELETE_NODES = ("DeleteStmt", "TruncateStmt", "DropStmt", "DropOwnedStmt", "DropdbStmt", "DropRoleStmt",
                 "DropTableSpaceStmt", "DropUserMappingStmt", "DropSubscriptionStmt")
_DROP_SUBCOMMANDS = re.compile(r"AT_Drop")
_ORDER_OPS = {"<": {"lt"}, "<=": {"lt", "eq"}, "=": {"eq"}, ">=": {"gt", "eq"}, ">": {"gt"}, "<>": {"lt", "gt"},
              "!=": {"lt", "gt"}}
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "<>": "<>", "!=": "!="}
_COMPLEMENT = {"~~": "!~~", "~~*": "!~~*", "~": "!~", "~*": "!~*"}
_COMPLEMENT.update({v: k for k, v in list(_COMPLEMENT.items())})
_REFLEXIVE = {"=", "<=", ">="}
_IRREFLEXIVE = {"<>", "!=", "<", ">"}


def parse_pg(text: str) -> tuple | None:
    """pglast's statements of `text`, or None when it does not parse."""
    try:
        return parser.parse_sql(text)
    except Exception:  # noqa: BLE001 - pglast raises ParseError and others
        return None


def classify_pg(text: str) -> dict | None:
    """The SQL facts of `text` read as PostgreSQL, or None when pglast does not parse it."""
    stmts = parse_pg(text)
    if stmts is None:
        return None
    facts = _Facts()
    for raw in stmts:
        facts.statement(raw.stmt)
    return facts.result() if facts.classes else None


class _Facts:
    def __init__(self) -> None:
        self.classes: list[str] = []
        self.kinds: list[str] = []
        self.unbounded: list[str] = []
        self.functions: list[str] = []
        self.settings: list[str] = []
        self.unsafe: list[str] = []

    def result(self) -> dict:
        kind = max(self.classes, key=_RANK.__getitem__)
        return {"parsed": True, "dialect": "postgres", "kind": kind, "kinds": _uniq(self.kinds),
                "unbounded": _uniq(self.unbounded), "functions": _uniq(self.functions),
                "settings": _uniq(self.settings), "unsafe": _uniq(self.unsafe)}

    def other(self, what: str, kind: str | None = None) -> None:
        self.classes.append("other")
        self.unsafe.append(what)
        self.kinds.append(kind or what.split()[0])

    def statement(self, stmt: Any) -> None:
        name = type(stmt).__name__
        if name in ("SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"):
            self.classes.append(self.dml(stmt))
        elif name == "TransactionStmt":
            word = _TX_WORDS.get(stmt.kind)
            if stmt.kind in _SESSION_TX:
                self.classes.append("session")
                self.kinds.append(word)
            else:   # PREPARE TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED: two-phase commit across sessions
                self.other(stmt.kind.name.replace("TRANS_STMT_", "").replace("_", " ") + " (two-phase)",
                           "TRANSACTION")
        elif name == "VariableSetStmt":
            self.classes.append("session")
            self.kinds.append("RESET" if stmt.kind in (VariableSetKind.VAR_RESET, VariableSetKind.VAR_RESET_ALL)
                              else "SET")
            if stmt.kind not in (VariableSetKind.VAR_RESET, VariableSetKind.VAR_RESET_ALL) and stmt.name:
                self.settings.append(stmt.name.lower())
            self.scan(stmt)
        elif name == "VariableShowStmt":
            self.classes.append("read")
            self.kinds.append("SHOW")
        elif name in ("DiscardStmt", "DeallocateStmt", "ListenStmt", "UnlistenStmt"):
            self.classes.append("session")
            self.kinds.append({"DiscardStmt": "DISCARD", "DeallocateStmt": "DEALLOCATE", "ListenStmt": "LISTEN",
                               "UnlistenStmt": "UNLISTEN"}[name])
        elif name == "ExplainStmt":   # EXPLAIN ANALYZE runs its statement: decided as that statement
            self.kinds.append("EXPLAIN")
            self.statement(stmt.query)
        elif name == "DeclareCursorStmt":
            self.kinds.append("DECLARE")
            self.statement(stmt.query)
        elif name == "CopyStmt" and not stmt.filename and not stmt.is_program:
            # COPY ... TO STDOUT reads (its query decided as a SELECT); COPY ... FROM STDIN inserts rows
            self.kinds.append("COPY")
            if stmt.is_from:
                self.kinds.append("INSERT")
                self.classes.append("write")
                self.scan(stmt)
            elif stmt.query is not None:
                self.statement(stmt.query)
            else:
                self.classes.append("read")
        elif name in ("FetchStmt", "ClosePortalStmt"):
            self.classes.append("read")
            self.kinds.append("CLOSE" if name == "ClosePortalStmt" else "FETCH")
        else:
            self.ddl(stmt, name)

    def ddl(self, stmt: Any, name: str) -> None:
        kind, shown = _NAMES.get(name) or _words(name)
        if name == "GrantStmt" or name == "GrantRoleStmt":
            kind = shown = "GRANT" if stmt.is_grant else "REVOKE"
        elif name == "VacuumStmt":
            kind = shown = "VACUUM" if stmt.is_vacuumcmd else "ANALYZE"
        if getattr(stmt, "replace", False) is True:
            shown = shown.replace("CREATE", "CREATE OR REPLACE", 1)
        drops = name == "AlterTableStmt" and any(_DROP_SUBCOMMANDS.match(getattr(c.subtype, "name", ""))
                                                 for c in stmt.cmds or () if isinstance(c, ast.AlterTableCmd))
        if drops:
            shown = shown + " ... DROP"
        self.classes.append("delete" if name in _DELETE_NODES else "other")
        self.unsafe.append(shown)
        self.kinds.append(kind)
        if drops:
            self.kinds.append("DROP")
        self.scan(stmt)

    def dml(self, stmt: Any) -> str:
        """The class of a SELECT / INSERT / UPDATE / DELETE / MERGE with everything nested in it."""
        scan = self.scan(stmt)
        worst = "read"
        for node in [stmt] + scan.nested:
            cls = self.dml_node(node, node is stmt)
            worst = cls if _RANK[cls] > _RANK[worst] else worst
        if worst == "read" and not SEQUENCE_WRITES.isdisjoint(scan.functions):
            worst = "write"                  # SELECT nextval('s') advances the sequence
        return worst

    def dml_node(self, node: Any, top: bool) -> str:
        name = type(node).__name__
        if name == "SelectStmt":
            if top:
                self.kinds.append("SELECT")
            if node.intoClause is not None:
                self.unsafe.append("SELECT INTO")
                self.kinds.append("CREATE")
                return "other"
            if node.lockingClause:
                self.unsafe.append("SELECT ... FOR " + node.lockingClause[0].strength.name.replace("LCS_FOR", ""))
                self.kinds.append("LOCK")
                return "other"
            return "read"
        if name == "InsertStmt":
            self.kinds.append("INSERT")
            if _rewrites_every_row(node):
                self.kinds.append("UPDATE")
                self.unbounded.append("UPDATE")
            return "write"
        if name == "UpdateStmt":
            self.kinds.append("UPDATE")
            if _is_settings(node.relation):
                # pg_settings' update rule calls set_config: `SET name = value` spelt as an UPDATE
                self.unsafe.append("UPDATE pg_settings")
                self.kinds.append("SET")
                return "other"
            if unbounded_where(node.whereClause, _targets(node.relation, node.fromClause), _relname(node.relation)):
                self.unbounded.append("UPDATE")
            return "write"
        if name == "DeleteStmt":
            self.kinds.append("DELETE")
            if unbounded_where(node.whereClause, _targets(node.relation, node.usingClause), _relname(node.relation)):
                self.unbounded.append("DELETE")
            return "delete"
        # MergeStmt: WHEN ... THEN DELETE deletes; THEN UPDATE over a trivially true ON updates every row
        self.kinds.append("MERGE")
        actions = {getattr(w.commandType, "name", "") for w in node.mergeWhenClauses or ()}
        if unbounded_where(node.joinCondition, _targets(node.relation, (node.sourceRelation,)),
                           _relname(node.relation)):
            self.unbounded += [k for k, c in (("UPDATE", "CMD_UPDATE"), ("DELETE", "CMD_DELETE")) if c in actions]
        if "CMD_DELETE" in actions:
            self.kinds.append("DELETE")
            self.unsafe.append("MERGE ... DELETE")
            return "delete"
        return "write"

    def scan(self, stmt: Any) -> "_Scan":
        scan = _Scan()
        scan(stmt)
        self.functions += scan.functions
        self.settings += scan.settings
        return scan


class _Visitor(Visitor):
    """pglast's Visitor, walked without its generator: the `visit_XYZ` methods of each class are found once (not
    by `inspect.getmembers` per call, a third of a short statement's facts), and the walk is pglast's `iterate`
    inlined (most of what is left: a statement's nodes each went through a generator's `send`). Same traversal
    (breadth first, a node's members in their order, tuples and tuples of tuples as `iterate` reads them), the
    same ancestors chains, the same calls. The visitors here only read: every `visit_XYZ` returns None
    (Continue), so a node's members are always walked; one that returned anything else would raise."""

    _methods: dict[type, tuple[tuple[type, str], ...]] = {}
    _members: dict[type, tuple[str, ...]] = {}

    def __call__(self, node):  # noqa: ANN001, ANN204
        cls = type(self)
        names = _Visitor._methods.get(cls)
        if names is None:
            names = tuple((getattr(ast, n[6:]), n) for n in dir(cls)
                          if n.startswith("visit_") and isinstance(getattr(ast, n[6:], None), type))
            _Visitor._methods[cls] = names
        by_class = {k: getattr(self, n) for k, n in names}
        self.root = node
        default = None if cls.visit is Visitor.visit else self.visit     # pglast's own is a no-op
        if not isinstance(node, (tuple, ast.Node)):
            raise ValueError("Bad argument, expected a ast.Node instance or a tuple")
        node_type, members = ast.Node, _Visitor._members
        todo = deque(((Ancestor(), node),))
        popleft, append = todo.popleft, todo.append

        def visit(ancestors, node) -> None:  # noqa: ANN001
            method = by_class.get(node.__class__, default)
            if method is not None and method(ancestors, node) is not None:
                raise TypeError(f"{type(self).__name__}: a visit method returned a value")
            names = members.get(node.__class__)
            if names is None:
                names = members[node.__class__] = tuple(node)
            for member in names:
                value = getattr(node, member)
                if isinstance(value, (tuple, node_type)):
                    append((Ancestor(ancestors, node, member), value))

        while todo:
            ancestors, node = popleft()
            if not isinstance(node, tuple):
                visit(ancestors, node)
                continue
            for index, sub_node in enumerate(node):
                sub_ancestors = Ancestor(ancestors, node, index)
                if isinstance(sub_node, node_type):
                    visit(sub_ancestors, sub_node)
                elif isinstance(sub_node, tuple):
                    for sub_index, value in enumerate(sub_node):
                        if isinstance(value, (tuple, node_type)):
                            append((Ancestor(sub_ancestors, sub_node, sub_index), value))
        return self.root


class _Scan(_Visitor):
    """Functions called anywhere; data-changing or locking statements nested anywhere (CTEs, subqueries)."""

    def __init__(self) -> None:
        super().__init__()
        self.functions: list[str] = []
        self.settings: list[str] = []
        self.nested: list[Any] = []
        self.root = None

    def __call__(self, node):  # noqa: ANN001, ANN204
        self.root = node
        return super().__call__(node)

    def visit_FuncCall(self, ancestors, node) -> None:  # noqa: ANN001 - pglast's visitor signature
        name = function_name(node.funcname)
        first = node.args[0] if node.args else None
        if name == "set_config" and isinstance(first, ast.A_Const) and isinstance(first.val, ast.String):
            self.settings.append(first.val.sval.lower())      # decided as `SET name` is
        else:
            self.functions.append(name)

    def _nested(self, node) -> None:  # noqa: ANN001
        if node is not self.root:
            self.nested.append(node)

    def visit_SelectStmt(self, ancestors, node) -> None:  # noqa: ANN001
        if node is not self.root and (node.intoClause is not None or node.lockingClause):
            self.nested.append(node)

    def visit_InsertStmt(self, ancestors, node) -> None:  # noqa: ANN001
        self._nested(node)

    def visit_UpdateStmt(self, ancestors, node) -> None:  # noqa: ANN001
        self._nested(node)

    def visit_DeleteStmt(self, ancestors, node) -> None:  # noqa: ANN001
        self._nested(node)

    def visit_MergeStmt(self, ancestors, node) -> None:  # noqa: ANN001
        self._nested(node)


def _rewrites_every_row(node: Any) -> bool:
    """`INSERT INTO t SELECT ... FROM t ON CONFLICT ... DO UPDATE` with no bound on the rows read or updated: an
    UPDATE of every row spelt as an upsert."""
    conflict, source = node.onConflictClause, node.selectStmt
    if conflict is None or getattr(conflict.action, "name", "") != "ONCONFLICT_UPDATE" or \
            not isinstance(source, ast.SelectStmt) or not unbounded_where(conflict.whereClause):
        return False
    target = node.relation.relname if node.relation is not None else None
    tables = [r for r in source.fromClause or () if isinstance(r, ast.RangeVar)]
    if any(r.relname == target for r in tables):
        return unbounded_where(source.whereClause)
    # the table read deeper (a subquery, a CTE, a UNION): its rows come back whatever bounds them there
    reads = _Reads(target)
    reads(source)
    if node.withClause is not None:
        reads(node.withClause)
    return reads.found


class _Reads(_Visitor):
    def __init__(self, name: str | None) -> None:
        super().__init__()
        self.name, self.found = name, False

    def visit_RangeVar(self, ancestors, n) -> None:  # noqa: ANN001
        if n.relname == self.name:
            self.found = True


def function_name(parts: Any) -> str:
    names = [getattr(p, "sval", "") or "" for p in parts or ()]
    if len(names) == 2 and names[0] == "pg_catalog":
        names = names[1:]
    return ".".join(names)


def _words(node_name: str) -> tuple[str, str]:
    words = [w.upper() for w in re.findall(r"[A-Z][a-z]*", node_name.removesuffix("Stmt"))]
    return (words[0] if words else "UNKNOWN"), (" ".join(words) or "UNKNOWN")


def _uniq(items: list) -> list:
    return list(dict.fromkeys(i for i in items if i))


def _targets(relation: Any, joined: Any = ()) -> tuple[str, ...]:
    """Names a column of the statement's own table may be qualified with (`t.id` in `UPDATE t`), and those of
    the same table joined to it (`UPDATE t ... FROM t AS u WHERE t.id = u.id`, `MERGE INTO t USING t AS u ON
    t.id = u.id`: each row meets itself)."""
    if relation is None:
        return ()
    names = []
    for rel in (relation, *[r for r in joined or () if isinstance(r, ast.RangeVar) and r.relname == relation.relname]):
        names.append(rel.alias.aliasname if rel.alias is not None else rel.relname)
    return tuple(n for n in names if n)


def _relname(relation: Any) -> str | None:
    return relation.relname if relation is not None else None


def _is_settings(relation: Any) -> bool:
    return relation is not None and relation.relname == "pg_settings" and relation.schemaname in (None, "pg_catalog")


# -- trivially true predicates --------------------------------------------------------------------------------

def unbounded_where(where: Any, targets: tuple[str, ...] = (), relation: str | None = None) -> bool:
    """Whether a WHERE clause fails to bound the rows: absent, naming no column (constant: every row or none), or
    trivially true (`true`, `... OR true`, `1 = 1`, `x = x`, `x IS NULL OR x IS NOT NULL`, `x > 0 OR x <= 0`,
    `p OR NOT p`, `name LIKE '%'`, `x IS NOT NULL`, a CASE whose every result is such, `(x = NULL) IS NOT FALSE` or `coalesce(x =
    NULL, true)` (a comparison with NULL is NULL), and, given the statement's own table `relation`, each row
    meeting itself in a subquery of that table: `id IN (SELECT id FROM t)`, `EXISTS (SELECT 1 FROM t u WHERE
    u.id = t.id)`)."""
    if where is None or not _has_column(where):
        return True
    if relation is not None and not _names_row(where, targets):
        return True             # `FROM u WHERE u.x = 1`, `EXISTS (SELECT 1 FROM u WHERE u.x = 1)`: all rows or none
    return _Trivial(targets, relation).true(where)


class _RowRefs(_Visitor):
    """Whether a WHERE may read the row it is deciding on: a column not qualified with another table's name (one
    outside any subquery, unqualified, may be the row's), a column qualified with the statement's own table's
    name that no subquery's own FROM reuses, or CURRENT OF. A column unqualified inside a subquery is taken as the
    subquery's own (an outer column there is written qualified: `o.tid = t.id`)."""

    def __init__(self, targets: tuple[str, ...]) -> None:
        super().__init__()
        self.targets = targets
        self.found = False

    def visit_CurrentOfExpr(self, ancestors, n) -> None:  # noqa: ANN001
        self.found = True

    def visit_ColumnRef(self, ancestors, n) -> None:  # noqa: ANN001
        fields = [getattr(f, "sval", None) for f in n.fields or ()]
        selects = []
        a = ancestors
        while a is not None:
            if isinstance(a.node, ast.SelectStmt):
                selects.append(a.node)
            a = a.parent
        if len(fields) < 2:
            self.found = self.found or not selects
            return
        name = fields[-2]
        if name in self.targets and not any(name in _from_names(sel) for sel in selects):
            self.found = True


def _from_names(select: Any) -> set:
    names: set = set()

    class _Names(_Visitor):
        def visit_RangeVar(self, ancestors, n) -> None:  # noqa: ANN001
            names.add(n.alias.aliasname if n.alias is not None else n.relname)

        def visit_RangeSubselect(self, ancestors, n) -> None:  # noqa: ANN001
            if n.alias is not None:
                names.add(n.alias.aliasname)

        def visit_RangeFunction(self, ancestors, n) -> None:  # noqa: ANN001
            if n.alias is not None:
                names.add(n.alias.aliasname)
    for item in select.fromClause or ():
        _Names()(item)
    return names


def _names_row(where: Any, targets: tuple[str, ...]) -> bool:
    if isinstance(where, ast.A_Expr) and any(isinstance(side, ast.ColumnRef) and len(side.fields or ()) == 1
                                             for side in (where.lexpr, where.rexpr)):
        return True             # `aid = 77`: an unqualified column outside any subquery (no walk)
    refs = _RowRefs(targets)
    refs(where)
    return refs.found


class _Cols(_Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_ColumnRef(self, ancestors, n) -> None:  # noqa: ANN001
        self.found = True

    def visit_CurrentOfExpr(self, ancestors, n) -> None:  # noqa: ANN001
        self.found = True


def _has_column(node: Any) -> bool:
    cols = _Cols()
    cols(node)
    return cols.found


class _Trivial:
    def __init__(self, targets: tuple[str, ...], relation: str | None = None):
        self.targets = targets
        self.relation = relation

    def canon(self, node: Any) -> str:
        """A text equal for two expressions that are the same (locations and the own table's qualifier dropped)."""
        return json.dumps(self._strip(node(skip_none=True) if isinstance(node, ast.Node) else node), sort_keys=True,
                          default=str)

    def _strip(self, value: Any) -> Any:
        if isinstance(value, dict):
            if value.get("@") == "ColumnRef":
                fields = [f.get("sval") if isinstance(f, dict) else f for f in value.get("fields", ())]
                if 2 <= len(fields) <= 4 and fields[-2] in self.targets:    # t.id, public.t.id, app.public.t.id
                    fields = fields[-1:]
                return {"@": "ColumnRef", "fields": fields}
            if value.get("@") in ("CollateClause", "TypeCast") and value.get("arg") is not None:
                return self._strip(value["arg"])        # x = x COLLATE "C", id = id::int, id = CAST(id AS int)
            return {k: self._strip(v) for k, v in value.items() if k != "location"}
        if isinstance(value, (list, tuple)):
            return [self._strip(v) for v in value]
        return value

    def const(self, node: Any) -> bool | None:
        """The value of a column-free expression when it is plainly known (True/False; NULL is False), else None."""
        node = _unwrap(node)
        if isinstance(node, ast.A_Const):
            if node.isnull:
                return False
            val = node.val
            if isinstance(val, ast.Boolean):
                return bool(val.boolval)
            if isinstance(val, ast.String):
                text = (val.sval or "").strip().lower()
                if text in ("t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"):
                    return True
                if text in ("f", "fa", "fal", "fals", "false", "n", "no", "off", "0"):
                    return False
            return None
        if isinstance(node, ast.BoolExpr):
            values = [self.const(a) for a in node.args]
            if node.boolop == BoolExprType.NOT_EXPR:
                return None if values[0] is None else not values[0]
            if node.boolop == BoolExprType.AND_EXPR:
                return False if False in values else (None if None in values else True)
            return True if True in values else (None if None in values else False)
        if isinstance(node, ast.A_Expr) and node.kind == A_Expr_Kind.AEXPR_OP and _op(node) in _ORDER_OPS:
            left, right = _literal(node.lexpr), _literal(node.rexpr)
            if left is None or right is None:
                return None
            return _compare(left, right, _op(node))
        return None

    def true(self, node: Any) -> bool:
        """`node` holds for every row (columns non-null), or may (a column-free part not plainly false)."""
        node = _unwrap(node)
        if not _has_column(node):
            value = self.const(node)
            return value is not False
        if isinstance(node, ast.BoolExpr):
            if node.boolop == BoolExprType.OR_EXPR:
                return any(self.true(a) for a in node.args) or self.covering(node.args)
            if node.boolop == BoolExprType.AND_EXPR:
                return all(self.true(a) for a in node.args)
            return self.false(node.args[0])
        if isinstance(node, ast.A_Expr):
            op = _op(node)
            if node.kind == A_Expr_Kind.AEXPR_OP and op in ("=", "<>", "!=", "IS NOT DISTINCT FROM"):
                # `(id = id) = true`, `true = (id = id)`, `(id = id) <> false`: a test compared with a boolean
                for side, other in ((node.lexpr, node.rexpr), (node.rexpr, node.lexpr)):
                    value = self.const(side) if side is not None and not _has_column(side) else None
                    if isinstance(value, bool) and other is not None:
                        return self.true(other) if value == (op == "=") else self.false(other)
            if node.kind == A_Expr_Kind.AEXPR_OP_ANY and op == "=" and isinstance(_unwrap(node.rexpr), ast.A_ArrayExpr):
                return any(self.same(node.lexpr, e) for e in _unwrap(node.rexpr).elements or ())  # id = ANY(ARRAY[id])
            if node.kind == A_Expr_Kind.AEXPR_SIMILAR and op == "~" and isinstance(node.rexpr, ast.FuncCall) \
                    and node.rexpr.args:                # SIMILAR TO '%': similar_to_escape('%') matches anything
                pattern = _literal(node.rexpr.args[0])
                return isinstance(pattern, str) and pattern != "" and set(pattern) == {"%"}
            if node.kind == A_Expr_Kind.AEXPR_OP and op in _REFLEXIVE and self.same(node.lexpr, node.rexpr):
                return True
            if node.kind == A_Expr_Kind.AEXPR_NOT_DISTINCT and self.same(node.lexpr, node.rexpr):
                return True
            if node.kind in (A_Expr_Kind.AEXPR_LIKE, A_Expr_Kind.AEXPR_ILIKE) and op in ("~~", "~~*"):
                pattern = _literal(node.rexpr)
                return isinstance(pattern, str) and pattern != "" and set(pattern) == {"%"}
            if node.kind == A_Expr_Kind.AEXPR_OP and op in ("~", "~*"):
                pattern = _literal(node.rexpr)
                return isinstance(pattern, str) and pattern in ("", ".*", "^", "^.*", ".*$", "^.*$")
            if node.kind == A_Expr_Kind.AEXPR_IN and op == "=" and isinstance(node.rexpr, (list, tuple)):
                return any(self.same(node.lexpr, item) for item in node.rexpr)      # `id IN (1, id)`
            if node.kind in (A_Expr_Kind.AEXPR_BETWEEN, A_Expr_Kind.AEXPR_BETWEEN_SYM) \
                    and isinstance(node.rexpr, (list, tuple)) and len(node.rexpr) == 2:
                return all(self.same(node.lexpr, b) for b in node.rexpr)
            return False
        if isinstance(node, ast.BooleanTest):
            test = node.booltesttype
            if test == BoolTestType.IS_TRUE:
                return self.true(node.arg)
            if test == BoolTestType.IS_FALSE:
                return self.false(node.arg)
            if test == BoolTestType.IS_NOT_FALSE:       # true or NULL
                return self.true(node.arg) or self.null(node.arg)
            if test == BoolTestType.IS_NOT_TRUE:        # false or NULL
                return self.false(node.arg) or self.null(node.arg)
            return test == BoolTestType.IS_UNKNOWN and self.null(node.arg)
        if isinstance(node, ast.CaseExpr):
            results = [w.result for w in node.args or ()] + [node.defresult]
            return all(r is not None and self.true(r) for r in results)
        if isinstance(node, ast.NullTest):     # `id IS NOT NULL`: every row (of a key; columns taken as non-null)
            return node.nulltesttype == NullTestType.IS_NOT_NULL
        if isinstance(node, ast.CoalesceExpr):
            # the first argument that is not NULL decides: true when each before it is NULL or true, and it is true
            for arg in node.args or ():
                if self.true(arg):
                    return True
                if not self.null(arg):
                    return False
            return False
        if isinstance(node, ast.SubLink):
            return self.meets_itself(node)
        return False

    def null(self, node: Any) -> bool:
        """`node` is NULL for every row: NULL, or an operator (every comparison is strict) or NOT of something that
        is."""
        while isinstance(node, ast.TypeCast):
            node = node.arg
        if isinstance(node, ast.A_Const):
            return bool(node.isnull)
        if isinstance(node, ast.A_Expr) and node.kind in (A_Expr_Kind.AEXPR_OP, A_Expr_Kind.AEXPR_LIKE,
                                                          A_Expr_Kind.AEXPR_ILIKE, A_Expr_Kind.AEXPR_SIMILAR):
            return any(side is not None and self.null(side) for side in (node.lexpr, node.rexpr))
        if isinstance(node, ast.BoolExpr) and node.boolop == BoolExprType.NOT_EXPR:
            return self.null(node.args[0])
        return False

    def meets_itself(self, link: Any) -> bool:
        """A subquery of the statement's own table in which each row finds itself: `EXISTS (SELECT 1 FROM t u
        WHERE u.id = t.id)`, `id IN (SELECT id FROM t)`, `id = ANY (SELECT u.id FROM t u)` (its own WHERE, if any,
        trivially true with both names read as the row's own)."""
        sub = link.subselect
        kind = getattr(link.subLinkType, "name", "")
        if self.relation is None or not isinstance(sub, ast.SelectStmt) \
                or kind not in ("EXISTS_SUBLINK", "ANY_SUBLINK"):
            return False
        tables = sub.fromClause or ()
        if len(tables) != 1 or not isinstance(tables[0], ast.RangeVar) or tables[0].relname != self.relation \
                or getattr(sub.op, "name", "") != "SETOP_NONE" or sub.limitCount is not None \
                or sub.limitOffset is not None or sub.groupClause or sub.havingClause is not None:
            return False
        inner = _Trivial(self.targets + (tables[0].alias.aliasname if tables[0].alias is not None else
                                         tables[0].relname,), self.relation)
        if sub.whereClause is not None and not inner.true(sub.whereClause):
            return False
        if kind == "EXISTS_SUBLINK":
            return True
        ops = [getattr(n, "sval", "") for n in link.operName or ()]
        targets = sub.targetList or ()
        return ops in ([], ["="]) and link.testexpr is not None and len(targets) == 1 \
            and isinstance(targets[0], ast.ResTarget) and inner.same(link.testexpr, targets[0].val)

    def false(self, node: Any) -> bool:
        """`node` is false (or null) for every row."""
        node = _unwrap(node)
        if not _has_column(node):
            return self.const(node) is False
        if isinstance(node, ast.BoolExpr):
            if node.boolop == BoolExprType.OR_EXPR:
                return all(self.false(a) for a in node.args)
            if node.boolop == BoolExprType.AND_EXPR:
                # `x < 5 AND x >= 5`: the arms' negations cover every row (so `NOT (x < 5 AND x >= 5)` holds)
                negated = [_negate(_unwrap(a)) for a in node.args]
                return any(self.false(a) for a in node.args) or \
                    (None not in negated and self.covering(negated))
            return self.true(node.args[0])
        if isinstance(node, ast.A_Expr):
            if node.kind == A_Expr_Kind.AEXPR_OP and _op(node) in _IRREFLEXIVE and self.same(node.lexpr, node.rexpr):
                return True
            if node.kind == A_Expr_Kind.AEXPR_DISTINCT and self.same(node.lexpr, node.rexpr):
                return True
        if isinstance(node, ast.NullTest):
            return node.nulltesttype == NullTestType.IS_NULL
        return False

    def same(self, a: Any, b: Any) -> bool:
        return a is not None and b is not None and self.canon(_unwrap(a)) == self.canon(_unwrap(b))

    def covering(self, arms: Any) -> bool:
        """Arms of an OR that together hold for every row: `p` and `NOT p`, IS NULL and IS NOT NULL of one
        expression, comparisons of one pair covering <, = and >, complementary pattern tests, IN and NOT IN."""
        seen: dict[str, set] = {}
        order: dict[tuple[str, str], set] = {}
        bounds: dict[str, tuple[list, list]] = {}
        for arm in arms:
            arm = _unwrap(arm)
            if isinstance(arm, ast.BoolExpr) and arm.boolop == BoolExprType.NOT_EXPR:
                seen.setdefault(self.canon(_unwrap(arm.args[0])), set()).add("not")
                continue
            seen.setdefault(self.canon(arm), set()).add("is")
            if isinstance(arm, ast.NullTest):
                seen.setdefault("null:" + self.canon(_unwrap(arm.arg)), set()).add(arm.nulltesttype.name)
            elif isinstance(arm, ast.BooleanTest):
                seen.setdefault("bool:" + self.canon(_unwrap(arm.arg)), set()).add(arm.booltesttype.name)
            elif isinstance(arm, ast.A_Expr) and arm.lexpr is not None and arm.rexpr is not None:
                op, left, right = _op(arm), self.canon(_unwrap(arm.lexpr)), self.canon(_unwrap(arm.rexpr))
                if arm.kind == A_Expr_Kind.AEXPR_OP and op in _ORDER_OPS:
                    if (right, left) in order and (left, right) not in order:
                        left, right, op = right, left, _FLIP[op]
                    order.setdefault((left, right), set()).update(_ORDER_OPS[op])
                    self.half_line(arm, op, bounds)
                elif arm.kind in (A_Expr_Kind.AEXPR_OP, A_Expr_Kind.AEXPR_LIKE, A_Expr_Kind.AEXPR_ILIKE,
                                  A_Expr_Kind.AEXPR_SIMILAR, A_Expr_Kind.AEXPR_IN):
                    key = f"{arm.kind.name}:{left}:{right}"
                    seen.setdefault(key, set()).add(op)
                elif arm.kind in (A_Expr_Kind.AEXPR_DISTINCT, A_Expr_Kind.AEXPR_NOT_DISTINCT):
                    seen.setdefault(f"distinct:{left}:{right}", set()).add(arm.kind.name)
        pairs = ({"is", "not"}, {NullTestType.IS_NULL.name, NullTestType.IS_NOT_NULL.name},
                 {"IS_TRUE", "IS_NOT_TRUE"}, {"IS_FALSE", "IS_NOT_FALSE"}, {"IS_UNKNOWN", "IS_NOT_UNKNOWN"},
                 {"AEXPR_DISTINCT", "AEXPR_NOT_DISTINCT"}, {"=", "<>"})
        if any(pair <= got for got in seen.values() for pair in pairs):
            return True
        if any(op in got and _COMPLEMENT[op] in got for got in seen.values() for op in _COMPLEMENT):
            return True
        if any(got >= {"lt", "eq", "gt"} for got in order.values()):
            return True
        # half-lines of one expression that meet: `x > 0 OR x < 10`, `x >= 5 OR x <= 5`
        for lows, highs in bounds.values():
            for low, low_in in lows:
                for high, high_in in highs:
                    if _compare(high, low, ">") or (_compare(high, low, "=") and (low_in or high_in)):
                        return True
        return False

    def half_line(self, arm: Any, op: str, bounds: dict) -> None:
        """Record `expr > c` (a lower bound) or `expr < c` (an upper bound) of a number constant c."""
        left, right = _literal(arm.rexpr), _literal(arm.lexpr)
        if isinstance(left, (int, float)) and not isinstance(left, bool) and _has_column(arm.lexpr):
            expr, value = arm.lexpr, left
        elif isinstance(right, (int, float)) and not isinstance(right, bool) and _has_column(arm.rexpr):
            expr, value, op = arm.rexpr, right, _FLIP[op]
        else:
            return
        lows, highs = bounds.setdefault(self.canon(_unwrap(expr)), ([], []))
        if op in (">", ">="):
            lows.append((value, op == ">="))
        elif op in ("<", "<="):
            highs.append((value, op == "<="))


_NEGATED = {"<": ">=", "<=": ">", "=": "<>", "<>": "=", "!=": "=", ">": "<=", ">=": "<"}


def _negate(arm: Any) -> Any:
    """`NOT arm` as a plain predicate where it has one (`x < 5` -> `x >= 5`, `NOT p` -> `p`, `x IS NULL` ->
    `x IS NOT NULL`), else None."""
    if isinstance(arm, ast.BoolExpr) and arm.boolop == BoolExprType.NOT_EXPR:
        return _unwrap(arm.args[0])
    if isinstance(arm, ast.A_Expr) and arm.kind == A_Expr_Kind.AEXPR_OP and _op(arm) in _NEGATED \
            and arm.lexpr is not None:
        return ast.A_Expr(kind=A_Expr_Kind.AEXPR_OP, name=(ast.String(sval=_NEGATED[_op(arm)]),),
                          lexpr=arm.lexpr, rexpr=arm.rexpr)
    if isinstance(arm, ast.NullTest):
        other = NullTestType.IS_NOT_NULL if arm.nulltesttype == NullTestType.IS_NULL else NullTestType.IS_NULL
        return ast.NullTest(arg=arm.arg, nulltesttype=other)
    return None


def _unwrap(node: Any) -> Any:
    while isinstance(node, ast.TypeCast) and node.typeName is not None and \
            [getattr(n, "sval", "") for n in node.typeName.names or ()][-1:] in (["bool"], ["boolean"]):
        node = node.arg
    return node


def _op(node: Any) -> str:
    names = [getattr(n, "sval", "") for n in node.name or ()]
    return names[-1] if names else ""


def _literal(node: Any) -> Any:
    node = node.arg if isinstance(node, ast.TypeCast) else node
    if isinstance(node, ast.A_Const) and not node.isnull:
        val = node.val
        if isinstance(val, ast.Integer):
            return val.ival
        if isinstance(val, ast.Float):
            try:
                return float(val.fval)
            except (TypeError, ValueError):
                return None
        if isinstance(val, ast.String):
            return val.sval
        if isinstance(val, ast.Boolean):
            return bool(val.boolval)
    return None


def _compare(left: Any, right: Any, op: str) -> bool | None:
    if type(left) is not type(right) and not (isinstance(left, (int, float)) and isinstance(right, (int, float))):
        return None
    try:
        return {"<": left < right, "<=": left <= right, "=": left == right, ">=": left >= right, ">": left > right,
                "<>": left != right, "!=": left != right}[op]
    except TypeError:
        return None
