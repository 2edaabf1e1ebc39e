"""The store. `Store` and `StoreError` are loaded on first use (PEP 562), with every table registered on
SQLModel.metadata (`tables`): importing the package, or one of its pure modules (records, chain), costs no
SQLAlchemy, SQLModel or alembic, so that the commands that need none (`audit pubkey`, `policy ...`) start
without them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.store.store import Store, StoreError

__all__ = ["Store", "StoreError"]


def tables() -> None:
    """Register every table on SQLModel.metadata (the migrations' target)."""
    from gateway.store import decisions, oauth2, outbox, packages  # noqa: F401 - each registers its tables


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from gateway.store import store

    tables()
    globals().update(Store=store.Store, StoreError=store.StoreError)
    return globals()[name]
