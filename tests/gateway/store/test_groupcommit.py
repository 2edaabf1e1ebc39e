"""gateway/store/groupcommit.py: concurrent callers' rows share write jobs; nobody returns before their rows
are written; one caller's bad rows fail only that caller."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings, strategies as st

from gateway.store.groupcommit import GroupCommit
from tests.support.waiting import until


class Table:
    """A write that takes a while (a real await) and refuses rows marked bad."""

    def __init__(self):
        self.rows: list = []
        self.jobs: list[list] = []
        self.running = 0

    async def write(self, rows):
        self.running += 1
        assert self.running == 1, "one job at a time"
        try:
            await asyncio.sleep(0.001)
            self.jobs.append(list(rows))
            if any(r == "bad" for r in rows):
                raise ValueError("refused")
            self.rows.extend(rows)
        finally:
            self.running -= 1


async def test_callers_share_jobs_and_return_after_their_rows_are_written():
    table = Table()
    gc = GroupCommit(table.write)

    async def one(i):
        rows = [f"{i}.{j}" for j in range(i % 3 + 1)]
        await gc.add(rows)
        assert all(r in table.rows for r in rows)
    await asyncio.gather(*(one(i) for i in range(30)))
    assert sorted(table.rows) == sorted(f"{i}.{j}" for i in range(30) for j in range(i % 3 + 1))
    assert len(table.jobs) < 30


async def test_bad_rows_fail_only_their_caller():
    table = Table()
    gc = GroupCommit(table.write)
    results = await asyncio.gather(gc.add(["a"]), gc.add(["b", "bad"]), gc.add(["c"]), gc.add(["d"]),
                                   return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["NoneType", "ValueError", "NoneType", "NoneType"]
    assert sorted(table.rows) == ["a", "c", "d"]


async def test_a_caller_that_goes_away_still_has_its_rows_written():
    table = Table()
    gc = GroupCommit(table.write)
    first = asyncio.ensure_future(gc.add(["x"]))
    second = asyncio.ensure_future(gc.add(["y"]))
    await asyncio.sleep(0)
    second.cancel()
    await first
    await until(lambda: "y" in table.rows, interval_s=0.001)
    assert sorted(table.rows) == ["x", "y"]


async def test_jobs_are_bounded_by_max_rows():
    table = Table()
    gc = GroupCommit(table.write, max_rows=5)
    await asyncio.gather(*(gc.add([i, i]) for i in range(20)))
    assert all(len(job) <= 5 for job in table.jobs)
    assert sorted(table.rows) == sorted(list(range(20)) * 2)


async def test_empty_add_writes_nothing():
    table = Table()
    await GroupCommit(table.write).add([])
    assert table.jobs == []


@settings(max_examples=30)
@given(st.lists(st.lists(st.sampled_from(["ok", "ok2", "bad"]), max_size=4), max_size=12))
def test_every_good_caller_lands_and_every_bad_one_fails(batches):
    async def run():
        table = Table()
        gc = GroupCommit(table.write, max_rows=6)
        results = await asyncio.gather(*(gc.add(rows) for rows in batches), return_exceptions=True)
        return table, results
    table, results = asyncio.run(run())
    expected_rows = []
    for rows, result in zip(batches, results):
        if "bad" in rows:
            assert isinstance(result, ValueError)
        else:
            assert result is None
            expected_rows += rows
    assert sorted(table.rows) == sorted(expected_rows)


async def test_callers_waiting_when_the_job_is_cancelled_get_the_stopped_error():
    """At shutdown the job is cancelled: everyone still waiting gets the store's error (a 503), not a hang."""
    class Stopped(Exception):
        pass
    started = asyncio.Event()

    async def slow(rows):
        started.set()
        await asyncio.sleep(10)
    gc = GroupCommit(slow, stopped=lambda: Stopped("down"))
    first = asyncio.ensure_future(gc.add(["a"]))
    await started.wait()
    second = asyncio.ensure_future(gc.add(["b"]))
    await asyncio.sleep(0)
    gc._task.cancel()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(r) for r in results] == [Stopped, Stopped]      # the batch being written and the next one
