"""What every policy engine shares: the protocol, the decision cache and a fail-closed `decide()`.

Engines (embedded.py: regorus on threads; isolated.py: regorus in worker processes; opa.py: an OPA server)
subclass CachingEngine and implement `_evaluate`, `start`, `reload` and `close`. Nothing here knows an engine.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Protocol

from gateway.runtime.ids import random_hex
from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.loader import PolicySource, policy_files
from gateway.policy.cache import DecisionCache, read_set
from gateway.policy.rego import ENTRYPOINTS, PolicyError

__all__ = ["CachingEngine", "DecisionCache", "DecisionSink", "EvaluationTimeout", "PolicyEngine", "PolicyError"]


def new_decision_id() -> str:
    return random_hex(16)                   # 32 hex digits, as uuid4().hex (gateway/runtime/ids.py: no syscall per id)


class DecisionSink(Protocol):
    """Where decisions are logged (decisionlog.DecisionLog): `record` never blocks and never raises."""

    def record(self, kind: str, input_doc: Any, result: dict, rev: str, engine: str, latency_us: int,
               decision_id: str, ts: float | None = None, request_id: str | None = None) -> None: ...

    def record_divergence(self, decision_id: str, kind: str, input_doc: Any, live: dict, shadow: dict,
                          live_rev: str, shadow_rev: str) -> None: ...

log = logging.getLogger("sandgate.policy")


class PolicyEngine(Protocol):
    rev: str
    last_error: str | None
    data: dict | None               # the active revision's data (None: not loaded here, an OPA server's own)

    def health(self) -> dict: ...

    def watch(self, interval_s: float = 1.0) -> None: ...

    async def start(self) -> None: ...

    async def decide(self, kind: str, input_doc: dict, request_id: str | None = None) -> Decision: ...

    async def reload(self) -> bool: ...

    async def close(self) -> None: ...


class EvaluationTimeout(Exception):
    """An evaluation did not finish within the engine's timeout."""


class CachingEngine:
    """What both embedded engines share: revision, decision cache, directory watching, fail-closed decide().

    Subclasses implement `_evaluate(kind, entrypoint, input_doc)` (raise EvaluationTimeout or anything else
    on failure), `start()`, `reload()` and `close()`.
    """

    engine_name = "embedded"

    def __init__(self, policy_dir: str | Path, timeout_s: float, decision_log: DecisionSink | None = None):
        self.policy_dir = Path(policy_dir)
        self.timeout_s = timeout_s
        self.decision_log = decision_log
        self.rev = ""
        self.last_error: str | None = None
        self.data: dict | None = None            # the active revision's data (the fact builders read tables there)
        self.cache = DecisionCache()
        self._stamp: tuple = ()
        self._watch_task: asyncio.Task | None = None

    @staticmethod
    def _read_set(source: PolicySource) -> None:
        """What the revision reads of the input (a parse: milliseconds), made off the event loop by the thread
        that loads it; `_configure` then finds it made (cache.read_set keeps the last few)."""
        read_set(source.modules, tuple(ENTRYPOINTS.values()))

    def _configure(self, source: PolicySource) -> None:
        """A new revision is active: key the cache on what its modules read, and keep its data."""
        self.cache.configure(source.modules, tuple(ENTRYPOINTS.values()))
        self.data = source.data

    def _stamp_now(self) -> tuple:
        try:
            return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in policy_files(self.policy_dir))
        except OSError:
            return ()

    async def reload(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def watch(self, interval_s: float = 1.0) -> None:
        async def _loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                stamp = await asyncio.to_thread(self._stamp_now)      # a directory walk: off the loop
                if stamp != self._stamp:
                    await self.reload()
        self._watch_task = asyncio.create_task(_loop(), name="sandgate-policy-watch")

    def _ready(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    async def _evaluate(self, kind: str, entrypoint: str, input_doc: dict) -> Any:  # pragma: no cover
        raise NotImplementedError

    def health(self) -> dict:
        state = {"engine": self.engine_name, "state": "ok" if self._ready() else "starting", "rev": self.rev,
                 "reload_failed": self.last_error is not None}      # the error text is logged, not served
        isolation = getattr(self, "isolation", None)
        return {**state, "isolation": isolation} if isolation else state

    async def decide(self, kind: str, input_doc: dict, request_id: str | None = None) -> Decision:
        """The decision for one input (never raises: every failure is a deny), logged when a log is set.
        `request_id`: what the user holds for this decision (the proxy's request id, in every 403 body; the tool
        call's id), kept in the decision-log row."""
        started = time.perf_counter()
        decision = await self.decide_quietly(kind, input_doc)
        if self.decision_log is not None:
            decision = decision.with_id(new_decision_id())
            self.decision_log.record(kind, input_doc, decision.to_json(), decision.rev, self.engine_name,
                                     int((time.perf_counter() - started) * 1e6), decision.decision_id,
                                     request_id=request_id)
        return decision

    async def decide_quietly(self, kind: str, input_doc: dict) -> Decision:
        """decide() without the decision log (the shadow policy uses it)."""
        rev = self.rev
        entrypoint = ENTRYPOINTS.get(kind)
        if entrypoint is None or not self._ready():
            return deny("policy.unavailable", "no policy is loaded for this kind", rev)
        key = self.cache.key(kind, input_doc)
        cached = self.cache.get(key)
        if cached is not None and cached.rev == rev:
            return cached
        try:
            raw = await self._evaluate(kind, entrypoint, input_doc)
        except EvaluationTimeout:
            log.error("policy evaluation timed out (kind=%s)", kind)
            return deny("policy.timeout", "the policy engine timed out", rev)
        except Exception as exc:  # noqa: BLE001 - an engine error is a deny
            log.error("policy evaluation failed (kind=%s): %s", kind, exc)
            return deny("policy.error", "the policy engine failed", rev)
        decision = parse_decision(raw, rev)
        if rev == self.rev:
            self.cache.put(key, decision)
        return decision

    def _stop_watching(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
