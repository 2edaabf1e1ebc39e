"""regorus in this process, on a few dedicated threads (`policy.isolation = "thread"`).

Each thread builds its own engine from the current policy source the first time it evaluates a revision, and
drops it there: a regorus engine is bound to the thread that made it (used or freed on another, it panics). regorus holds the GIL while it evaluates, so a
runaway evaluation stalls the event loop until it ends (then it is a `policy.timeout` deny): this mode trades
that for a cheaper call than the worker processes of isolated.py, the default.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gateway.policy.base import CachingEngine, DecisionSink, EvaluationTimeout
from gateway.policy.loader import PolicySource, load_policy_dir
from gateway.policy.rego import PolicyError, build_engine, compile_source, evaluate

log = logging.getLogger("sandgate.policy")


class EngineThread:
    """One thread owning one regorus engine; jobs arrive on a queue and answer through asyncio futures."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.busy = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        engine, rev = None, None
        while True:
            job = self._jobs.get()
            if job is None:
                break
            loop, fut, source, entrypoint, doc = job
            try:
                if rev != source.rev:
                    engine, rev = None, None
                    engine, rev = build_engine(source), source.rev
                started = time.perf_counter()
                value = evaluate(engine, entrypoint, doc)
                result: tuple = (True, (value, time.perf_counter() - started))
            except Exception as exc:  # noqa: BLE001 - handed to the caller, who denies
                result = (False, exc)
            try:
                loop.call_soon_threadsafe(_settle, fut, result)
            except RuntimeError:           # the loop closed meanwhile (sandgate stopping): nobody waits for it
                pass
        engine = None                      # dropped on its own thread

    def submit(self, source: PolicySource, entrypoint: str, doc: dict) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.busy += 1
        fut.add_done_callback(self._done)
        self._jobs.put((loop, fut, source, entrypoint, doc))
        return fut

    def _done(self, _fut: asyncio.Future) -> None:
        self.busy -= 1

    def stop(self) -> None:
        self._jobs.put(None)


def _settle(fut: asyncio.Future, result: tuple) -> None:
    if fut.done():
        return
    ok, value = result
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class EmbeddedEngine(CachingEngine):
    engine_name = "embedded"

    def __init__(self, policy_dir: str | Path, timeout_s: float = 2.0, workers: int = 2,
                 decision_log: DecisionSink | None = None):
        super().__init__(policy_dir, timeout_s, decision_log)
        self.isolation = "thread"
        self._source: PolicySource | None = None
        self._threads = [EngineThread(f"sandgate-rego-{i}") for i in range(max(1, workers))]
        self._build_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandgate-rego-build")

    # -- loading ---------------------------------------------------------------------------------
    def _compile(self) -> tuple[PolicySource, tuple]:
        stamp = self._stamp_now()
        try:
            source = load_policy_dir(self.policy_dir)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        compile_source(source)          # parse, then evaluate each entry point once: errors surface now
        self._read_set(source)
        return source, stamp

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        source, self._stamp = await loop.run_in_executor(self._build_pool, self._compile)
        self._activate(source)
        log.info("policy loaded rev=%s dir=%s (regorus, %s)", self.rev, self.policy_dir, self.isolation)

    def _activate(self, source: PolicySource) -> None:
        self._source, self.rev = source, source.rev
        self._configure(source)

    async def reload(self) -> bool:
        """Recompile; swap in only a policy that compiles. Returns True when a new revision is active."""
        loop = asyncio.get_running_loop()
        try:
            source, stamp = await loop.run_in_executor(self._build_pool, self._compile)
        except PolicyError as exc:
            self._stamp = await asyncio.to_thread(self._stamp_now)
            self.last_error = str(exc)
            log.error("policy reload rejected; keeping rev=%s: %s", self.rev, exc)
            return False
        changed = source.rev != self.rev
        self._stamp, self.last_error = stamp, None
        self._activate(source)
        if changed:
            log.info("policy reloaded rev=%s", self.rev)
        return changed

    # -- deciding --------------------------------------------------------------------------------
    def _ready(self) -> bool:
        return self._source is not None

    async def _evaluate(self, kind: str, entrypoint: str, input_doc: dict) -> Any:
        thread = min(self._threads, key=lambda t: t.busy)
        fut = thread.submit(self._source, entrypoint, input_doc)
        try:
            value, elapsed = await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except asyncio.TimeoutError:
            raise EvaluationTimeout() from None
        if elapsed > self.timeout_s:        # it held the GIL (and the loop) past the timeout: still a deny
            raise EvaluationTimeout()
        return value

    async def close(self) -> None:
        self._stop_watching()
        for thread in self._threads:
            thread.stop()
        self._build_pool.shutdown(wait=False, cancel_futures=True)
