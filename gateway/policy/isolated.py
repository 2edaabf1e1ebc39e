"""The embedded Rego engine run in worker processes (`policy.isolation = "process"`, the default).

Same decisions as the in-process engine (each worker compiles the same source with regorus), but an
evaluation that never returns, or a crash, costs a worker, not the gateway: the caller gets a deny, the worker
is restarted. Decisions are cached per revision in this process (DecisionCache). A reload starts a new pool; only
when every new worker reports ready does it replace the old one — a policy that does not compile, or crashes
the engine when built, is rejected and the last good revision keeps serving.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from typing import Any

from gateway.policy.base import CachingEngine, DecisionSink, EvaluationTimeout
from gateway.policy.loader import load_policy_dir
from gateway.policy.pool import WorkerError, WorkerPool
from gateway.policy.rego import PolicyError

log = logging.getLogger("sandgate.policy")


class IsolatedEngine(CachingEngine):
    engine_name = "embedded"

    def __init__(self, policy_dir: str | Path, timeout_s: float = 2.0, workers: int = 2,
                 decision_log: DecisionSink | None = None):
        super().__init__(policy_dir, timeout_s, decision_log)
        self.workers = workers
        self.isolation = "process"
        self._pool: WorkerPool | None = None
        self._retiring: set[asyncio.Task] = set()

    async def _new_pool(self) -> tuple[WorkerPool, tuple, object]:
        stamp = await asyncio.to_thread(self._stamp_now)
        try:
            source = await asyncio.to_thread(load_policy_dir, self.policy_dir)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        await asyncio.to_thread(self._read_set, source)
        pool = WorkerPool(str(self.policy_dir), self.workers)
        try:
            await pool.start()
        except WorkerError as exc:
            raise PolicyError(str(exc)) from None
        return pool, stamp, source

    async def start(self) -> None:
        self._pool, self._stamp, source = await self._new_pool()
        self.rev = self._pool.rev
        self._configure(source)
        log.info("policy loaded rev=%s dir=%s (%d worker processes)", self.rev, self.policy_dir, self.workers)

    async def reload(self) -> bool:
        try:
            pool, stamp, source = await self._new_pool()
        except PolicyError as exc:
            self._stamp = await asyncio.to_thread(self._stamp_now)
            self.last_error = str(exc)
            log.error("policy reload rejected; keeping rev=%s: %s", self.rev, exc)
            return False
        old, self._pool, self._stamp, self.last_error = self._pool, pool, stamp, None
        self._configure(source)
        changed = pool.rev != self.rev
        self.rev = pool.rev
        if old is not None:
            task = asyncio.create_task(self._retire(old))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        if changed:
            log.info("policy reloaded rev=%s", self.rev)
        return changed

    async def _retire(self, pool: WorkerPool) -> None:
        await asyncio.sleep(self.timeout_s + 1)       # let evaluations in flight finish
        await pool.close()

    def _ready(self) -> bool:
        return self._pool is not None

    async def _evaluate(self, kind: str, entrypoint: str, input_doc: dict) -> Any:
        try:
            return await self._pool.evaluate(kind, input_doc, self.timeout_s)
        except WorkerError as exc:
            if str(exc) == "timeout":
                raise EvaluationTimeout() from None
            raise

    async def close(self) -> None:
        self._stop_watching()
        for task in list(self._retiring):
            task.cancel()
        if self._pool is not None:
            await self._pool.close()
