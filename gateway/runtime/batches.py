"""One batched-writer loop: rows queued in memory by the hot path, written in batches off it.

The audit log and the decision log both keep their rows in memory and write them in batches at most
`flush_interval_s` late. A subclass says how a batch is taken (`_take`), written (`_write`) and put back after a
failed write (`_put_back`); this class runs the loop, and keeps its subtleties in one place:

- One flush at a time (a lock): a flush that returns has seen every row recorded before it was called stored,
  even when the background flush had taken a batch first.
- The background flush is shielded: `close()` cancels the background task, and a batch taken for writing is
  stored or put back, never dropped half way; `close()`'s own flush waits for it on the lock.
- A failed write puts the batch back in front (nothing lost, nothing reordered) and ends that flush; `writing`
  is false until a flush succeeds again. After a failed flush the loop waits `retry_s` more.
- A full batch wakes the loop at once (`_wake()`, from `record()`), so a burst never waits for the interval.
- The background loop writes what was pending when it woke, and goes on only while a full batch waits (`_full`):
  rows recorded while a batch is being written wait for the next tick. Draining everything at once made the
  batches as small as the rows one write lets in (11-18 rows at 1,000 tool calls/s, each its own transaction
  and two thread hops), and the writer's fixed cost per batch was a third of its time. `flush()` and `close()`
  still write everything, and so does the first flush after a failed one (the backlog of an outage).
"""
from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

B = TypeVar("B")


class BatchWriter(Generic[B]):
    def __init__(self, name: str, flush_interval_s: float, max_batch: int, retry_s: float = 0.0):
        self._name = name
        self._interval = flush_interval_s
        self._max_batch = max_batch
        self._retry_s = retry_s
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()          # one flush at a time: one that returns has stored what it saw
        self.writing = True                  # false while the last write failed

    # -- what a writer says ---------------------------------------------------------------------------------
    def _has_pending(self) -> bool:
        raise NotImplementedError

    def _take(self) -> B:
        """Take the next batch (at most `max_batch` rows) out of the queue."""
        raise NotImplementedError

    async def _write(self, batch: B) -> None:
        raise NotImplementedError

    def _put_back(self, batch: B) -> None:
        """A batch whose write failed goes back in front of the queue."""
        raise NotImplementedError

    def _written(self, batch: B) -> None:
        """After a write, whether it succeeded or not (the batch is no longer in flight)."""

    def _failed(self, batch: B, exc: Exception) -> None:
        """A write failed (the batch is back in the queue; `writing` still tells whether the last one worked)."""

    def _full(self) -> bool:
        """Whether at least a whole batch is pending (the background loop writes it without waiting)."""
        return False

    def _resumed(self) -> None:
        """A flush succeeded after a failed one."""

    # -- the loop ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    def _wake(self) -> None:
        self._wakeup.set()

    async def flush(self, everything: bool = True) -> bool:
        """Write what is pending, batch by batch; stop at the first failure (rows kept). True when all written.
        `everything` False (the background loop): one batch, then more only while a full batch is pending (or
        while the last write failed: the backlog goes at once)."""
        async with self._lock:
            everything = everything or not self.writing
            first = True
            while self._has_pending() and (everything or first or self._full()):
                first = False
                batch = self._take()
                try:
                    await self._write(batch)
                except Exception as exc:  # noqa: BLE001 - keep the rows and retry; never lose them silently
                    self._put_back(batch)
                    self._failed(batch, exc)
                    self.writing = False
                    return False
                finally:
                    self._written(batch)
            if not self.writing:
                self._resumed()
            self.writing = True
            return True

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self._interval)
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()
            # Shielded: close() cancels this task, and a batch taken for writing must be stored or put back, not
            # dropped half way. The flush runs on; close()'s own flush waits for it on the lock.
            if not await asyncio.shield(self.flush(everything=False)) and self._retry_s:
                await asyncio.sleep(self._retry_s)

    async def close(self) -> bool:
        """Stop the background task and flush what is left. True when everything was written."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        return await self.flush()
