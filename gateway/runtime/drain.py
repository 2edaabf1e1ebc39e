"""Stopping in two steps (SIGTERM, Ctrl-C): drain, then stop.

Draining: the proxy's listeners accept no new connection, `/readyz` answers 503 and a new ask is refused, while
requests already held for approval may still be decided (approvers reach the API as before) for up to
`egress.drain_s`. Stopping: those still held are answered 503 `sandgate.stopping`; their approvals stay pending,
so the client's retry (on another replica, or here after the restart) is let through once approved.

An ask counts as held from before its approval is filed (an approver, or another worker's API, may list it before
the hold waits on it) until it is answered: one its approval released is forwarded and counts until its response
(or error) hook, so the drain does not stop the process under a request it has just let through.
"""
from __future__ import annotations

import asyncio
import time
import weakref
from contextlib import contextmanager
from typing import Iterator


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.stopping = asyncio.Event()
        self.waiting = 0                 # asks being filed or waiting for a decision right now
        self.released: weakref.WeakSet = weakref.WeakSet()  # asks let through, their answer not yet given

    @property
    def held(self) -> int:
        """Asks not yet answered: what the drain waits for."""
        return self.waiting + len(self.released)

    def begin(self) -> None:
        self.draining = True

    def stop(self) -> None:
        self.draining = True
        self.stopping.set()

    @contextmanager
    def holding(self) -> Iterator[None]:
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1

    async def race(self, waiter: asyncio.Future) -> bool:
        """Await `waiter` unless stopping comes first: then cancel it and return True (the caller answers 503)."""
        stopper = asyncio.ensure_future(self.stopping.wait())
        try:
            done, _ = await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, stopper):
                if not task.done():
                    task.cancel()
        return waiter not in done

    async def settle(self, limit_s: float, interrupted: asyncio.Event, poll_s: float = 0.05) -> int:
        """Wait until nothing is held, `limit_s` passes or `interrupted` is set; return how many are still held."""
        deadline = time.monotonic() + limit_s
        while self.held and not interrupted.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(poll_s)
        return self.held
