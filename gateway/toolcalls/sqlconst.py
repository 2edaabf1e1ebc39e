"""The SQL facts' constants, apart from the grammars (sql.py, sqlpg.py) so that sqlentry.py can offer them
without loading pglast and sqlglot. Pure."""
from __future__ import annotations

MAX_SQL_LENGTH = 100_000
CLASSES = ("read", "session", "write", "delete", "other")       # a statement's class, least safe last
