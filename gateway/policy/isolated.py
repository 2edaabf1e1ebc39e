"""The embedded Rego engine run in worker processes (`policy.isolation = "process"`, the default).

Same decisions as the in-process engine (the same regopy bundle, built by each worker), but a regopy crash or
an evaluation that never returns costs a worker, not the gateway: the caller gets a deny, the worker is
restarted. Decisions are cached per revision in this process (DecisionCache). A reload starts a new pool; only
when every new worker reports ready does it replace the old one — a policy that does not compile, or crashes
the engine when built, is rejected and the last good revision keeps serving.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.engine import ENTRYPOINTS, DecisionCache, PolicyError
from gateway.policy.loader import load_policy_dir, policy_files
from gateway.policy.pool import WorkerError, WorkerPool

log = logging.getLogger("sandgate.policy")


class IsolatedEngine:
    def __init__(self, policy_dir: str | Path, timeout_s: float = 2.0, workers: int = 2):
        self.policy_dir = Path(policy_dir)
        self.timeout_s = timeout_s
        self.workers = workers
        self.rev = ""
        self.last_error: str | None = None
        self.cache = DecisionCache()
        self._pool: WorkerPool | None = None
        self._stamp: tuple = ()
        self._watch_task: asyncio.Task | None = None
        self._retiring: set[asyncio.Task] = set()

    def _stamp_now(self) -> tuple:
        try:
            return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in policy_files(self.policy_dir))
        except OSError:
            return ()

    async def _new_pool(self) -> tuple[WorkerPool, tuple, object]:
        stamp = await asyncio.to_thread(self._stamp_now)
        try:
            source = await asyncio.to_thread(load_policy_dir, self.policy_dir)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        pool = WorkerPool(str(self.policy_dir), self.workers)
        try:
            await pool.start()
        except WorkerError as exc:
            raise PolicyError(str(exc)) from None
        return pool, stamp, source

    async def start(self) -> None:
        self._pool, self._stamp, source = await self._new_pool()
        self.rev = self._pool.rev
        self.cache.configure(source)
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
        self.cache.configure(source)
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

    def watch(self, interval_s: float = 1.0) -> None:
        async def _loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                if await asyncio.to_thread(self._stamp_now) != self._stamp:
                    await self.reload()
        self._watch_task = asyncio.create_task(_loop(), name="sandgate-policy-watch")

    async def decide(self, kind: str, input_doc: dict) -> Decision:
        rev, pool = self.rev, self._pool
        if kind not in ENTRYPOINTS or pool is None:
            return deny("policy.unavailable", "no policy is loaded for this kind", rev)
        key = self.cache.key(kind, input_doc)
        cached = self.cache.get(key)
        if cached is not None and cached.rev == rev:
            return cached
        try:
            raw = await pool.evaluate(kind, input_doc, self.timeout_s)
        except WorkerError as exc:
            if str(exc) == "timeout":
                return deny("policy.timeout", "the policy engine timed out", rev)
            log.error("policy evaluation failed (kind=%s): %s", kind, exc)
            return deny("policy.error", "the policy engine failed", rev)
        except (TypeError, ValueError) as exc:       # an input that is not JSON
            log.error("policy input not serialisable (kind=%s): %s", kind, exc)
            return deny("policy.error", "the policy engine failed", rev)
        decision = parse_decision(raw, rev)
        if rev == self.rev:
            self.cache.put(key, decision)
        return decision

    async def close(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
        for task in list(self._retiring):
            task.cancel()
        if self._pool is not None:
            await self._pool.close()
