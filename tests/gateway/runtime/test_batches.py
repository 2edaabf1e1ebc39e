"""The one batched-writer loop (gateway/runtime/batches.py) on a list-backed writer: batches of at most
max_batch in order, a failed write put back in front and retried, a full batch waking the loop, close() writing
what is left. Its users (the audit log, the decision log) are tested on real stores in test_writers_close.py,
test_audit_cap.py, test_redteam_audit.py and policy/test_decision_log.py."""
from __future__ import annotations

import asyncio

from gateway.runtime.batches import BatchWriter
from tests.support.waiting import until


class ListWriter(BatchWriter[list[int]]):
    def __init__(self, max_batch: int = 3, flush_interval_s: float = 3600, retry_s: float = 0.0):
        super().__init__("test-writer", flush_interval_s, max_batch, retry_s)
        self.pending: list[int] = []
        self.stored: list[int] = []
        self.writes: list[list[int]] = []
        self.fail = 0                      # how many writes fail from now on
        self.failures: list[list[int]] = []
        self.resumed = 0

    def add(self, *items: int) -> None:
        self.pending += items
        if len(self.pending) >= self._max_batch:
            self._wake()

    def _has_pending(self) -> bool:
        return bool(self.pending)

    def _full(self) -> bool:
        return len(self.pending) >= self._max_batch

    def _take(self) -> list[int]:
        batch, self.pending = self.pending[: self._max_batch], self.pending[self._max_batch:]
        return batch

    async def _write(self, batch: list[int]) -> None:
        await asyncio.sleep(0)
        if self.fail:
            self.fail -= 1
            raise ConnectionError("store down")
        self.writes.append(batch)
        self.stored += batch

    def _put_back(self, batch: list[int]) -> None:
        self.pending[:0] = batch

    def _failed(self, batch: list[int], exc: Exception) -> None:
        self.failures.append(batch)

    def _resumed(self) -> None:
        self.resumed += 1


async def test_batches_of_at_most_max_batch_in_order():
    w = ListWriter(max_batch=3)
    w.add(*range(8))
    assert await w.flush() is True
    assert w.writes == [[0, 1, 2], [3, 4, 5], [6, 7]] and w.pending == []


async def test_a_failed_write_puts_the_batch_back_in_front_and_the_next_flush_resumes():
    w = ListWriter(max_batch=3)
    w.add(*range(5))
    w.fail = 1
    assert await w.flush() is False
    assert w.pending == [0, 1, 2, 3, 4] and w.failures == [[0, 1, 2]] and not w.writing
    w.add(5)
    assert await w.flush() is True
    assert w.stored == [0, 1, 2, 3, 4, 5] and w.writing and w.resumed == 1


async def test_a_full_batch_wakes_the_loop_before_the_interval():
    w = ListWriter(max_batch=3, flush_interval_s=3600)
    w.start()
    try:
        w.add(1, 2, 3)
        await until(lambda: w.stored)
        assert w.stored == [1, 2, 3]
    finally:
        await w.close()


async def test_the_loop_retries_after_a_failure():
    w = ListWriter(max_batch=10, flush_interval_s=0.01, retry_s=0.01)
    w.fail = 2
    w.add(1)
    w.start()
    try:
        await until(lambda: w.stored)
        assert w.stored == [1] and len(w.failures) == 2
    finally:
        await w.close()


async def test_close_writes_what_is_left_and_says_whether_it_could():
    w = ListWriter(max_batch=2)
    w.start()
    w.add(1)
    assert await w.close() is True and w.stored == [1]
    w2 = ListWriter()
    w2.add(1)
    w2.fail = 5
    assert await w2.close() is False and w2.pending == [1]


async def test_the_loop_writes_what_was_pending_and_leaves_rows_that_came_during_the_write_for_the_next_tick():
    """Rows recorded while a batch is being written are not chased one small batch after another (each its own
    transaction): they wait for the next tick, unless a whole batch is pending. flush() still writes all."""
    class Slow(ListWriter):
        async def _write(self, batch: list[int]) -> None:
            await super()._write(batch)
            if batch == [1]:
                self.add(2)                          # came while [1] was being written
            if batch == [10]:
                self.add(11, 12, 13, 14)             # a whole batch came: written without waiting

    w = Slow(max_batch=3, flush_interval_s=3600)
    w.add(1)
    assert await w.flush(everything=False) is True
    assert w.writes == [[1]] and w.pending == [2]
    assert await w.flush() is True and w.writes == [[1], [2]]
    w.add(10)
    assert await w.flush(everything=False) is True
    assert w.writes == [[1], [2], [10], [11, 12, 13]] and w.pending == [14]


async def test_after_a_failed_write_the_loop_writes_the_whole_backlog():
    w = ListWriter(max_batch=2)
    w.add(1, 2, 3, 4, 5)
    w.fail = 1
    assert await w.flush(everything=False) is False
    assert await w.flush(everything=False) is True
    assert w.stored == [1, 2, 3, 4, 5] and w.pending == []
