"""What every policy engine shares: the protocol, the decision cache and a fail-closed `decide()`.

Engines (embedded.py: regorus on threads; isolated.py: regorus in worker processes; opa.py: an OPA server)
subclass CachingEngine and implement `_evaluate`, `start`, `reload` and `close`. Nothing here knows an engine.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.loader import PolicySource, policy_files
from gateway.policy.rego import ENTRYPOINTS, PolicyError

__all__ = ["CachingEngine", "DecisionCache", "EvaluationTimeout", "PolicyEngine", "PolicyError"]

log = logging.getLogger("sandgate.policy")


class PolicyEngine(Protocol):
    rev: str

    async def start(self) -> None: ...

    async def decide(self, kind: str, input_doc: dict) -> Decision: ...

    async def reload(self) -> bool: ...

    async def close(self) -> None: ...


# Builtins whose result changes between two evaluations of the same input: a policy using any of them is
# never served from the decision cache.
_IMPURE = re.compile(r"\b(time\.now_ns|rand\.|uuid\.|http\.send|opa\.runtime)")


class DecisionCache:
    """Decisions are a pure function of (policy revision, input): identical inputs reuse the decision.

    `age_s` and `stats` (they change with every request) are dropped from the key unless the policy mentions
    them; a policy that calls an impure builtin is never cached. Cleared on every reload.
    """

    def __init__(self, size: int = 4096):
        self.size = size
        self.enabled = False
        self.drop: frozenset = frozenset()
        self._items: "OrderedDict[str, Decision]" = OrderedDict()

    def configure(self, source: PolicySource) -> None:
        text = "\n".join(t for _, t in source.modules)
        self.enabled = _IMPURE.search(text) is None
        self.drop = frozenset(k for k in ("age_s", "stats") if k not in text)
        self._items.clear()

    def key(self, kind: str, doc: dict) -> str | None:
        if not self.enabled:
            return None
        session = doc.get("session")
        if self.drop and isinstance(session, dict):
            doc = {**doc, "session": {k: v for k, v in session.items() if k not in self.drop}}
        try:
            return kind + json.dumps(doc, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None

    def get(self, key: str | None) -> "Decision | None":
        if key is None:
            return None
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
        return hit

    def put(self, key: str | None, decision: "Decision") -> None:
        if key is None:
            return
        self._items[key] = decision
        if len(self._items) > self.size:
            self._items.popitem(last=False)


class EvaluationTimeout(Exception):
    """An evaluation did not finish within the engine's timeout."""


class CachingEngine:
    """What both embedded engines share: revision, decision cache, directory watching, fail-closed decide().

    Subclasses implement `_evaluate(kind, entrypoint, input_doc)` (raise EvaluationTimeout or anything else
    on failure), `start()`, `reload()` and `close()`.
    """

    def __init__(self, policy_dir: str | Path, timeout_s: float):
        self.policy_dir = Path(policy_dir)
        self.timeout_s = timeout_s
        self.rev = ""
        self.last_error: str | None = None
        self.cache = DecisionCache()
        self._stamp: tuple = ()
        self._watch_task: asyncio.Task | None = None

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

    async def decide(self, kind: str, input_doc: dict) -> Decision:
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
