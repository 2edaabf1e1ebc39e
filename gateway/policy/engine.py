"""Policy engines behind one protocol: embedded regopy (default) and, later, an OPA server.

Both embedded engines compile the policy once (`Interpreter.build`) into a bundle and evaluate it with
`query_bundle_entrypoint` (see bundles.py); they differ in where: worker processes (isolated.py, the default)
or a small thread pool here (`policy.isolation = "thread"`; regopy releases the GIL, and each thread keeps its
own Interpreter, never shared by two evaluations at once). An evaluation cannot be cancelled, so it is timed
out and the timeout is a deny. A reload swaps in only a bundle that built (`bundle.ok()`: a semantically
broken bundle would crash the process when queried) in a throw-away process first.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import regopy

from gateway.policy.bundles import ENTRYPOINTS, PolicyError, build_bundle, evaluate_bundle, node_to_python
from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.loader import PolicySource, load_policy_dir, policy_files

__all__ = ["ENTRYPOINTS", "CachingEngine", "DecisionCache", "EmbeddedEngine", "EvaluationTimeout", "PolicyEngine",
           "PolicyError", "build_bundle", "evaluate_bundle", "make_engine", "node_to_python"]

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


class EmbeddedEngine(CachingEngine):
    """regopy in this process, on a small thread pool (`policy.isolation = "thread"`)."""

    def __init__(self, policy_dir: str | Path, timeout_s: float = 2.0, workers: int = 2):
        super().__init__(policy_dir, timeout_s)
        self._bundle: Any = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandgate-rego")
        self._build_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandgate-rego-build")
        self._local = threading.local()

    # -- loading ---------------------------------------------------------------------------------
    def _compile(self) -> tuple[Any, str, tuple, PolicySource]:
        from gateway.policy.compilecheck import check_in_subprocess

        stamp = self._stamp_now()
        problem = check_in_subprocess(str(self.policy_dir))
        if problem is not None:
            raise PolicyError(problem)
        try:
            source = load_policy_dir(self.policy_dir)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        return build_bundle(source), source.rev, stamp, source

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._bundle, self.rev, self._stamp, source = await loop.run_in_executor(self._build_pool, self._compile)
        self.cache.configure(source)
        log.info("policy loaded rev=%s dir=%s", self.rev, self.policy_dir)

    async def reload(self) -> bool:
        """Recompile; swap in only a good bundle. Returns True when a new revision is active."""
        loop = asyncio.get_running_loop()
        try:
            bundle, rev, stamp, source = await loop.run_in_executor(self._build_pool, self._compile)
        except PolicyError as exc:
            self._stamp = self._stamp_now()
            self.last_error = str(exc)
            log.error("policy reload rejected; keeping rev=%s: %s", self.rev, exc)
            return False
        self._bundle, self._stamp, self.last_error = bundle, stamp, None
        self.cache.configure(source)
        changed = rev != self.rev
        self.rev = rev
        if changed:
            log.info("policy reloaded rev=%s", rev)
        return changed

    # -- deciding --------------------------------------------------------------------------------
    def _eval(self, bundle: Any, entrypoint: str, input_doc: dict) -> Any:
        interp = getattr(self._local, "interp", None)
        if interp is None:
            interp = self._local.interp = regopy.Interpreter()
        return evaluate_bundle(interp, bundle, entrypoint, input_doc)

    def _ready(self) -> bool:
        return self._bundle is not None

    async def _evaluate(self, kind: str, entrypoint: str, input_doc: dict) -> Any:
        fut = asyncio.get_running_loop().run_in_executor(self._pool, self._eval, self._bundle, entrypoint,
                                                         input_doc)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except asyncio.TimeoutError:
            raise EvaluationTimeout() from None

    async def close(self) -> None:
        self._stop_watching()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._build_pool.shutdown(wait=False, cancel_futures=True)


def make_engine(cfg: Any) -> Any:
    from gateway.policy.loader import default_policy_dir

    pol = cfg.raw["policy"]
    directory = Path(pol["dir"]) if pol["dir"] else default_policy_dir()
    if pol["engine"] != "embedded":
        raise ValueError("policy.engine 'opa' is not available yet in this build")
    if pol["isolation"] == "process":
        from gateway.policy.isolated import IsolatedEngine

        return IsolatedEngine(directory, timeout_s=float(pol["timeout_s"]), workers=int(pol["workers"]))
    return EmbeddedEngine(directory, timeout_s=float(pol["timeout_s"]), workers=int(pol["workers"]))
