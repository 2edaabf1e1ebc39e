"""gateway/toolcalls/sqlpg.py walks pglast's trees with its own `_Visitor`: pglast's `Visitor` with the walk
inlined (no generator). It must visit exactly what pglast's does, in the same order, with the same ancestors
chains, for every statement the SQL corpora hold."""
from __future__ import annotations

import pytest
from pglast import ast, parser
from pglast.visitors import Visitor

from gateway.toolcalls.sqlpg import _Visitor
from tests.gateway.toolcalls.test_corpus_benign import SQL_BENIGN
from tests.gateway.toolcalls.test_corpus_sql import SQL_DESTRUCTIVE
from tests.gateway.toolcalls.test_sql_shapes import TEMPLATES

EXTRA = ["VALUES (1, 2), (3, (SELECT 4))", "INSERT INTO t VALUES (1), (2) ON CONFLICT DO NOTHING",
         "SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))", "SELECT array[[1, 2], [3, 4]]",
         "WITH a AS (UPDATE t SET v = 1 RETURNING *), b AS (DELETE FROM u RETURNING *) SELECT * FROM a, b",
         "SELECT x FROM t GROUP BY GROUPING SETS ((a, b), (c), ())", "CREATE TABLE t (a int, b text)"]


def _recorder(base: type) -> type:
    class Recorder(base):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple] = []

        def _record(self, how: str, ancestors, node) -> None:  # noqa: ANN001
            chain = []
            a = ancestors
            while a is not None:
                chain.append((a.member, id(a.node)))
                a = a.parent
            self.seen.append((how, id(node), type(node).__name__, tuple(chain)))

        def visit(self, ancestors, node) -> None:  # noqa: ANN001
            self._record("visit", ancestors, node)

        def visit_ColumnRef(self, ancestors, node) -> None:  # noqa: ANN001
            self._record("column", ancestors, node)

        def visit_SelectStmt(self, ancestors, node) -> None:  # noqa: ANN001
            self._record("select", ancestors, node)
    return Recorder


PGLAST, OURS = _recorder(Visitor), _recorder(_Visitor)
TEXTS = sorted(set(SQL_DESTRUCTIVE + SQL_BENIGN + EXTRA + [t.replace("?", "1") for t in TEMPLATES]))


def _tree(text: str):  # noqa: ANN202
    try:
        return parser.parse_sql(text)
    except Exception:  # noqa: BLE001
        return None


def test_the_inlined_walk_visits_what_pglasts_visits():
    walked = 0
    for text in TEXTS:
        tree = _tree(text)
        if tree is None:
            continue
        for root in (tree, *[raw.stmt for raw in tree]):
            theirs, ours = PGLAST(), OURS()
            assert ours(root) is theirs(root) is root
            assert ours.seen == theirs.seen, text
            walked += len(ours.seen)
    assert walked > 2_000


def test_a_visit_method_that_returns_a_value_is_refused():
    class Skipping(_Visitor):
        def visit_ColumnRef(self, ancestors, node):  # noqa: ANN001, ANN202
            return 1
    with pytest.raises(TypeError):
        Skipping()(parser.parse_sql("SELECT a FROM t")[0].stmt)
    with pytest.raises(ValueError):
        Skipping()("SELECT 1")
    assert isinstance(parser.parse_sql("SELECT 1")[0].stmt, ast.Node)
