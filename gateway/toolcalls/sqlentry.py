"""The SQL facts' entry points for the modules every tool-call decision imports (enrich.py, sqlclients.py): the
SQL grammars (pglast, sqlglot: sql.py, sqlpg.py) are loaded by the first statement read, not by every start of
a process that may never see one (a tenth of a second of CPU or more). Pure."""
from __future__ import annotations

import functools
from types import ModuleType

from gateway.toolcalls.sqlconst import CLASSES, MAX_SQL_LENGTH

__all__ = ["CLASSES", "MAX_SQL_LENGTH", "describe_sql", "sql_side_effects"]


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
