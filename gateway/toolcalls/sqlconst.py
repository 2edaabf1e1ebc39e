"""The SQL facts' constants, apart from the grammars (sql.py, sqlpg.py) so that sqlentry.py can offer them
without loading pglast and sqlglot. Pure."""
from __future__ import annotations

MAX_SQL_LENGTH = 100_000
CLASSES = ("read", "session", "write", "delete", "other")       # a statement's class, least safe last
# Functions that change the database however they are called: a statement calling one is at least a write, never
# a read (`SELECT nextval('s')` advances the sequence), whether or not the policy's safe functions list it.
SEQUENCE_WRITES = frozenset(("nextval", "setval"))
