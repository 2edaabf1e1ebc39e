"""The SQL facts' entry points for the modules every tool-call decision imports (enrich.py, sqlclients.py): the
SQL grammars (pglast, sqlglot: sql.py, sqlpg.py) are loaded by the first statement read, not by every start of
a process that may never see one (a tenth of a second of CPU or more). Pure."""
from __future__ import annotations

import functools
import importlib
from types import ModuleType

from gateway.toolcalls.sqlconst import CLASSES, MAX_SQL_LENGTH

__all__ = ["CLASSES", "MAX_SQL_LENGTH", "describe_sql", "load_grammars", "sql_side_effects"]
# sqlglot's dialects describe_sql reads with (sqlglot imports each at its first use)
DIALECT_MODULES = ("sqlglot.dialects.postgres", "sqlglot.dialects.mysql", "sqlglot.dialects.sqlite")


def describe_sql(query: str, dialect: str | None = None) -> dict:
    """sql.describe_sql."""
    return _sql().describe_sql(query, dialect)


def sql_side_effects(query: str) -> tuple[list[str], list[str]]:
    """sql.sql_side_effects."""
    return _sql().sql_side_effects(query)


@functools.cache
def _sql() -> ModuleType:
    from gateway.toolcalls import sql

    return sql


def load_grammars() -> None:
    """Import the SQL grammars now, and the dialects they read with: blocking (a quarter of a second of CPU),
    so a server that will read SQL calls it on a thread at start-up rather than let its first statement import
    them on the event loop."""
    _sql()
    for name in DIALECT_MODULES:
        importlib.import_module(name)
