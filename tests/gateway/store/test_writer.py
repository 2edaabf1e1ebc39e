"""The store's writer thread: interactive writes before queued bulk batches, bulk in order, one job at a time,
errors handed back, everything queued run before shutdown returns."""
from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.store.writer import PriorityWriter


def test_interactive_jumps_queued_bulk_and_bulk_keeps_its_order():
    writer = PriorityWriter()
    gate, started, ran, running = threading.Event(), threading.Event(), [], []

    def job(name):
        def run():
            running.append(name)
            assert len(running) == 1                  # one at a time
            if name == "first":
                started.set()
                gate.wait(5)
            ran.append(name)
            running.remove(name)
            return name
        return run

    futures = [writer.bulk.submit(job("first"))]
    assert started.wait(5)                            # running: the others queue behind it
    futures += [writer.bulk.submit(job(f"bulk{i}")) for i in range(3)]
    futures += [writer.interactive.submit(job("session")), writer.interactive.submit(job("approval"))]
    gate.set()
    assert [f.result(5) for f in futures] == ["first", "bulk0", "bulk1", "bulk2", "session", "approval"]
    assert ran == ["first", "session", "approval", "bulk0", "bulk1", "bulk2"]
    writer.shutdown()


async def test_errors_reach_the_coroutine_and_shutdown_drains():
    writer = PriorityWriter()
    loop = asyncio.get_running_loop()

    def boom():
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await loop.run_in_executor(writer.interactive, boom)
    done = []
    for i in range(5):
        writer.bulk.submit(lambda i=i: done.append(i))
    writer.shutdown(wait=True)
    assert done == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError):
        writer.bulk.submit(lambda: None)
