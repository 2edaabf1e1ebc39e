"""Audit trail: decisions and events queued in memory and written in batches (at most ~100 ms late).

`record()` never blocks and never raises; `close()` flushes what is pending (SIGTERM path).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway.store import Store

log = logging.getLogger("sandgate.audit")

EVENT_FIELDS = ("session", "step", "kind", "action", "reasons", "codes", "request_id", "method", "host",
                "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")


class AuditLog:
    def __init__(self, store: Store, flush_interval_s: float = 0.1, max_batch: int = 500):
        self._store = store
        self._interval = flush_interval_s
        self._max_batch = max_batch
        self._pending: list[dict] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sandgate-audit")

    def record(self, kind: str, **fields: Any) -> None:
        row = {k: fields.get(k) for k in EVENT_FIELDS}
        row["kind"] = kind
        row["ts"] = fields.get("ts") or time.time()
        row["action"] = row["action"] or ""
        row["reasons"] = list(row["reasons"] or [])
        row["codes"] = list(row["codes"] or [])
        row["detail"] = dict(row["detail"] or {})
        self._pending.append(row)
        if len(self._pending) >= self._max_batch:
            self._wake.set()

    async def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch:]
            try:
                await self._store.append_events(batch)
            except Exception:  # noqa: BLE001 - keep the rows and retry; never lose audit silently
                log.exception("audit write failed; %d rows kept for retry", len(batch))
                self._pending[:0] = batch
                if self._closing:
                    return
                await asyncio.sleep(0.5)

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            await self.flush()

    async def close(self) -> None:
        self._closing = True
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()
