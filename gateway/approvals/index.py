"""The approval queue's in-memory index of the bindings that have a live item: pending, or approved and not
yet used. Pure: rows in, ids out (no store, no clock).

It lets the queue skip the store when an action has no live item (the common case: an "ask" for something
never asked before, or asked and already used). A hit is never trusted on its own: the queue reads the
candidates from the store before it uses or returns one, so a stale index can only cost a store read or, for
a change another replica made and has not yet announced, file an item that already exists there (one more
approval to give), never let an action through. The one exception: while this process is the store's only
writer (and has been since it read the index), every change to an item was made here and noted, so the queue
takes the pending items of a binding from the index (`pending`) instead of reading them again.
"""
from __future__ import annotations

from typing import Iterable

from gateway.store.records import Approval


def live(row: Approval) -> bool:
    """Pending, or approved and unused: an item an identical action may still meet."""
    return row.status == "pending" or (row.status == "approved" and row.used_at is None)


class BindingIndex:
    def __init__(self) -> None:
        self._by_binding: dict[str, dict[str, str]] = {}       # binding -> {approval id: status}
        self._binding_of: dict[str, str] = {}                  # approval id -> binding
        self._pending: dict[str, Approval] = {}                # approval id -> the pending item as last noted

    def put(self, row: Approval) -> None:
        """Take an item as it is now (filed, decided, used, expired...)."""
        self._drop(row.id)
        if live(row):
            self._by_binding.setdefault(row.binding, {})[row.id] = row.status
            self._binding_of[row.id] = row.binding
            if row.status == "pending":
                self._pending[row.id] = row

    def _drop(self, aid: str) -> None:
        self._pending.pop(aid, None)
        old = self._binding_of.pop(aid, None)
        if old is not None:
            items = self._by_binding.get(old, {})
            items.pop(aid, None)
            if not items:
                self._by_binding.pop(old, None)

    def load(self, rows: Iterable[Approval]) -> None:
        for row in rows:
            self.put(row)

    def sync_pending(self, pending: Iterable[Approval]) -> None:
        """The store's full list of pending items: drop indexed pending items it no longer has."""
        rows = list(pending)
        keep = {r.id for r in rows}
        for aid in [a for a, b in self._binding_of.items()
                    if self._by_binding.get(b, {}).get(a) == "pending" and a not in keep]:
            self._drop(aid)
        self.load(rows)

    def has(self, binding: str, status: str) -> bool:
        return status in self._by_binding.get(binding, {}).values()

    def pending(self, binding: str) -> list[Approval]:
        """The binding's pending items as last noted."""
        items = self._by_binding.get(binding)
        return [self._pending[aid] for aid, status in items.items() if status == "pending"] if items else []

    def __len__(self) -> int:
        return len(self._binding_of)
