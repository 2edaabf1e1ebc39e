"""Audit trail: decisions and events queued in memory and written in batches (at most ~100 ms late).

`record()` never blocks and never raises; `close()` flushes what is pending (SIGTERM path). With the store
unreachable, rows wait in memory and are retried; once `max_pending` rows wait, `accepting` turns false and
the gateway refuses new requests (503 `audit.unavailable`): a gateway that cannot record does not decide.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from gateway.audit.rows import storable
from gateway.runtime.batches import BatchWriter
from gateway.store import Store
from gateway.store.offload import WriterGone, WriterProcess
from gateway.store.records import AuditEvent

log = logging.getLogger("sandgate.audit")

EVENT_FIELDS = ("session", "step", "kind", "action", "reasons", "codes", "request_id", "method", "host",
                "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
RETRY_S = 0.5


def audit_status(pending: int, max_pending: int, writing: bool) -> str:
    """"ok"; "degraded" while writes fail (rows wait in memory); "refusing" once max_pending rows wait."""
    if pending >= max_pending:
        return "refusing"
    return "ok" if writing else "degraded"


class AuditLog(BatchWriter[list[dict]]):
    def __init__(self, store: Store, flush_interval_s: float = 0.1, max_batch: int = 100,
                 max_pending: int = 100_000, offload: WriterProcess | None = None):
        super().__init__("sandgate-audit", flush_interval_s, max_batch, retry_s=RETRY_S)
        self._store = store
        # The writer process (gateway/store/offload.py) chains and inserts the rows when given; else the store's
        # writer thread does.
        self._offload = offload
        self.max_pending = max_pending
        self._pending: list[dict] = []
        self._inflight: list[dict] = []       # the batch being written (readers see it until it is stored)

    @property
    def pending(self) -> int:
        """Rows not yet stored: waiting, and the batch being written (it counts until it is stored: while a
        write to an unreachable store hangs, its rows are still in memory only)."""
        return len(self._pending) + len(self._inflight)

    @property
    def accepting(self) -> bool:
        """Whether new decisions may be taken (they could be recorded)."""
        return self.pending < self.max_pending

    @property
    def status(self) -> str:
        return audit_status(self.pending, self.max_pending, self.writing)

    def record(self, kind: str, **fields: Any) -> dict:
        row = {k: fields.get(k) for k in EVENT_FIELDS}
        row["kind"] = kind
        row["ts"] = fields.get("ts") or time.time()
        row["action"] = row["action"] or ""
        row["reasons"] = list(row["reasons"] or [])
        row["codes"] = list(row["codes"] or [])
        row["detail"] = dict(row["detail"] or {})
        self._pending.append(row)
        if len(self._pending) >= self._max_batch:
            self._wake()
        return row

    def queued(self, kind: str | tuple[str, ...], session: str) -> list[dict]:
        """Rows of this kind (or these kinds) and session recorded but not yet written, oldest first (the batch
        being written included: a reader never misses a row between the queue and the store)."""
        kinds = (kind,) if isinstance(kind, str) else kind
        return [dict(r) for r in self._inflight + self._pending if r["kind"] in kinds and r["session"] == session]

    # -- the batched writer (gateway/runtime/batches.py) ----------------------------------------------------
    def _has_pending(self) -> bool:
        return bool(self._pending)

    def _take(self) -> list[dict]:
        batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch:]
        self._inflight = batch
        return batch

    def _put_back(self, batch: list[dict]) -> None:
        self._pending[:0] = batch

    def _full(self) -> bool:
        return len(self._pending) >= self._max_batch

    def _written(self, batch: list[dict]) -> None:
        self._inflight = []

    def _failed(self, batch: list[dict], exc: Exception) -> None:
        if self.writing:
            log.error("audit write failed; %d rows kept for retry", len(self._pending), exc_info=exc)

    def _resumed(self) -> None:
        log.warning("audit writes resumed")

    async def _write(self, batch: list[dict]) -> None:
        """Write one batch. When the store refuses it, write it again with every row made storable
        (audit_rows.storable): one row carrying a value no column can hold (a huge step, a 3 GiB byte count on
        PostgreSQL's INTEGER, a lone surrogate or NUL) must not keep every later row out. A store that is down
        fails the second write too, and the rows wait as before."""
        append = self._offload.append_events if self._offload is not None else self._store.append_events
        try:
            await append(batch)
        except WriterGone:                   # not the rows: the writer process (offload.py); retried as they are
            raise
        except Exception:  # noqa: BLE001
            clean = [storable(r) for r in batch]
            await append(clean)
            log.warning("audit: a batch of %d rows held values the store cannot hold; written escaped", len(batch))

    async def recent(self, kind: str, session: str, limit: int) -> list[dict]:
        """The last `limit` rows of this kind and session written, then those still queued (oldest first)."""
        queued = self.queued(kind, session)      # first: a flush during the read below moves rows to the store
        stored = await self._store.list_events(session=session, kind=kind, limit=limit, newest=True)
        return [e.to_json() for e in stored] + queued

    async def events(self, *, session: str | None = None, kind: str | None = None, limit: int = 10000,
                     newest: bool = False, after_seq: int | None = None) -> list[AuditEvent]:
        """The events of a session (or all), in order, with what is pending written first (the reader sees
        every decision taken so far). `newest` keeps the last `limit`; `after_seq` those past a sequence."""
        await self.flush()
        return await self._store.list_events(session=session, kind=kind, limit=limit, newest=newest,
                                             after_seq=after_seq)

    async def read(self, *, session: str | None = None, kind: str | None = None, limit: int = 10000,
                   newest: bool = False, after_seq: int | None = None) -> list[dict]:
        """`events`, each as a JSON object."""
        return [e.to_json() for e in await self.events(session=session, kind=kind, limit=limit, newest=newest,
                                                        after_seq=after_seq)]

    async def close(self) -> bool:
        if not await super().close():
            log.error("sandgate stopped with %d audit rows unwritten (the store is unreachable)", self.pending)
            return False
        return True
