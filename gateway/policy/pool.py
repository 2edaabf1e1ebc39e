"""Policy worker processes (see worker.py), driven from the event loop without blocking it.

Each worker answers one evaluation at a time in order; the pool sends each request to the least busy live
worker. A timeout kills the stuck worker (a regorus evaluation cannot be interrupted); a worker that dies fails its
pending evaluations (the callers deny) and is replaced in the background. A worker is forked from this process's
forker when it has one (forker.py: `serve` makes it), else started as a new process (`python -m
gateway.policy.worker`); both speak worker.py's protocol over their stdin and stdout.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sys
from typing import Any

from gateway.policy import forker as policy_forker

log = logging.getLogger("sandgate.policy")

START_TIMEOUT_S = 60.0
LINE_LIMIT = 64 * 1024 * 1024


class WorkerError(Exception):
    """The worker could not start, died, timed out or reported an evaluation error."""


class Worker:
    def __init__(self, directory: str):
        self.directory = directory
        self.rev = ""
        self.proc: asyncio.subprocess.Process | policy_forker.ForkedWorker | None = None
        self.pending: dict[int, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._reader: asyncio.Task | None = None
        self._ended = False                  # its output ended: it died, even before the loop reaps it

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not self._ended

    async def _spawn(self) -> asyncio.subprocess.Process | policy_forker.ForkedWorker:
        forker = policy_forker.current()
        if forker is not None:
            forked = await forker.start_worker(self.directory, LINE_LIMIT)
            if forked is not None:
                return forked
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.policy.worker", self.directory,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)

    async def start(self) -> str:
        self.proc = await self._spawn()
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_TIMEOUT_S)
            first = json.loads(line) if line else {"fatal": "the policy worker exited at start"}
        except (asyncio.TimeoutError, ValueError):
            first = {"fatal": "the policy worker did not start"}
        if "ready" not in first:
            self.kill()
            raise WorkerError(str(first.get("fatal", "the policy worker failed")))
        self.rev = first["ready"]
        self._reader = asyncio.create_task(self._read(), name="sandgate-policy-worker")
        return self.rev

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                fut = self.pending.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            self._ended = True               # nothing sent to it from now on would ever be answered
            self._fail_all("the policy worker exited")

    def _fail_all(self, why: str) -> None:
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(WorkerError(why))

    async def evaluate(self, kind: str, doc: dict, timeout_s: float) -> Any:
        if not self.alive:
            raise WorkerError("the policy worker is not running")
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        try:
            self.proc.stdin.write((json.dumps({"id": rid, "kind": kind, "input": doc}) + "\n").encode())
        except (ConnectionError, RuntimeError) as exc:
            self.pending.pop(rid, None)
            raise WorkerError(f"cannot reach the policy worker: {exc}") from None
        try:
            msg = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            log.error("policy evaluation timed out; restarting its worker")
            self.kill()
            raise WorkerError("timeout") from None
        if "error" in msg:
            raise WorkerError(msg["error"])
        return msg.get("value")

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        self._fail_all("the policy worker was stopped")

    async def close(self) -> None:
        if self.alive:
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 2)
            except asyncio.TimeoutError:
                self.proc.kill()
        if self._reader is not None:
            self._reader.cancel()
        self._fail_all("the policy worker was stopped")


class WorkerPool:
    """`size` workers of one policy directory (one revision)."""

    def __init__(self, directory: str, size: int):
        self.directory = directory
        self.workers = [Worker(directory) for _ in range(max(1, size))]
        self.rev = ""
        self._respawning: set[asyncio.Task] = set()

    async def start(self) -> str:
        try:
            revs = await asyncio.gather(*(w.start() for w in self.workers))
        except WorkerError:
            await self.close()
            raise
        if len(set(revs)) != 1:
            await self.close()
            raise WorkerError("the policy changed while its workers started")
        self.rev = revs[0]
        return self.rev

    def _respawn(self, index: int) -> None:
        async def run() -> None:
            worker = Worker(self.directory)
            try:
                rev = await worker.start()
            except WorkerError as exc:
                log.error("policy worker could not be restarted: %s", exc)
                return
            if rev != self.rev:
                await worker.close()
                return
            old, self.workers[index] = self.workers[index], worker
            await old.close()
            log.warning("policy worker restarted")
        task = asyncio.create_task(run())
        self._respawning.add(task)
        task.add_done_callback(self._respawning.discard)

    async def evaluate(self, kind: str, doc: dict, timeout_s: float) -> Any:
        live = [w for w in self.workers if w.alive]
        if len(live) < len(self.workers) and not self._respawning:
            for i, w in enumerate(self.workers):
                if not w.alive:
                    self._respawn(i)
        if not live:
            raise WorkerError("no policy worker is running")
        worker = min(live, key=lambda w: len(w.pending))
        return await worker.evaluate(kind, doc, timeout_s)

    async def close(self) -> None:
        for task in list(self._respawning):
            task.cancel()
        await asyncio.gather(*(w.close() for w in self.workers), return_exceptions=True)
