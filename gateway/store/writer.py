"""The store's one writer thread (SQLite: one writer at a time), with two lanes.

Interactive writes (a session, an approval, the paths a tool call left) wait for the request that made them;
bulk writes (batches of audit and decision-log rows) wait for nobody. On one FIFO thread an interactive write
queued behind several bulk batches waited for all of them (tool calls that wrote paths took 40-50 ms at p50
under load). Here the thread takes the oldest interactive job first, then the oldest bulk job: an interactive
write waits at most for the one job already running. Bulk jobs run in order; with a steady stream of
interactive writes they wait (the audit writer's back-pressure then shows on /readyz).
"""
from __future__ import annotations

import functools
import itertools
import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable

INTERACTIVE, BULK, STOP = 0, 1, 2


class PriorityWriter:
    def __init__(self, name: str = "sandgate-store"):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.interactive = _Lane(self, INTERACTIVE)
        self.bulk = _Lane(self, BULK)

    def submit(self, lane: int, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the store's writer is shut down")
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put((lane, next(self._order), future, fn))
        return future

    def _work(self) -> None:
        while True:
            lane, _, future, fn = self._queue.get()
            if lane == STOP:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True) -> None:
        """After every job already queued (interactive and bulk) has run."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put((STOP, next(self._order), None, None))
        if wait and thread is not None:
            thread.join()


class _Lane(Executor):
    """An Executor (for loop.run_in_executor) that submits to one lane of the writer."""

    def __init__(self, writer: PriorityWriter, lane: int):
        self._writer, self._lane = writer, lane

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self._writer.submit(self._lane, functools.partial(fn, *args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._writer.shutdown(wait)
