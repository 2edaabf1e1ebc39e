"""alembic environment for sandgate's store. Run through gateway/store/migrate.py (`sandgate db upgrade`, and
at every `serve` start), which hands over an open connection holding the migration lock."""
from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from gateway.store import tables

tables()                # every table on SQLModel.metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only migrate.py runs migrations
    raise RuntimeError("run sandgate's migrations with `sandgate db upgrade`")
context.configure(connection=connection, target_metadata=SQLModel.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
