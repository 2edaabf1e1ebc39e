"""What every policy engine shares: the protocol, the decision cache and a fail-closed `decide()`.

Engines (embedded.py: regorus on threads; isolated.py: regorus in worker processes; opa.py: an OPA server)
subclass CachingEngine and implement `_evaluate`, `start`, `reload` and `close`. Nothing here knows an engine.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from gateway.runtime.ids import random_hex
from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.loader import PolicySource, policy_files
from gateway.policy.readset import LEN, WILD, Shared, Stamped, build_trie, compile_projection, scan_reads
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


# Builtins whose result changes between two evaluations of the same input (the clock, randomness, the network;
# io.jwt.decode_verify and x509 verification check expiry against the clock): a policy using any of them is
# never served from the decision cache. Rego allows spaces around the dots of a reference.
IMPURE = re.compile(r"\b(time\s*\.\s*now_ns|rand\s*\.|uuid\s*\.|http\s*\.\s*send|opa\s*\.\s*runtime"
                     r"|net\s*\.\s*lookup_ip_addr|io\s*\.\s*jwt\s*\.\s*decode_verify"
                     r"|crypto\s*\.\s*x509\s*\.\s*parse_and_verify)")


_key_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode     # json.dumps(..., sort_keys, compact)


class DecisionCache:
    """Decisions are a pure function of (policy revision, what the policy reads of the input): two inputs that
    agree on every path the policy can read (readset.py, derived from the source of each revision) share a
    decision. Fields no module mentions (`step`, `session.age_s`, `session.stats`, the ids and ages of
    `history` entries when only `input.history[i].decision` and the like are read) stay out of the key; a
    policy that reads `input` in a way the scan does not follow is keyed on the whole input. A policy that
    calls an impure builtin is never cached. Cleared on every reload.
    """

    def __init__(self, size: int = 4096):
        self.size = size
        self.enabled = False
        self.reads: frozenset | None = None          # None: the whole input
        self._trie: dict = {None: True}
        self._project = compile_projection(self._trie)
        self.hits = self.misses = 0
        self._items: "OrderedDict[str, Decision]" = OrderedDict()
        self._top: dict | None = None                # top-level key -> its projection (None: no shortcut)

    def configure(self, source: PolicySource) -> None:
        texts = [t for _, t in source.modules]
        self.enabled = IMPURE.search("\n".join(texts)) is None
        self.set_reads(scan_reads(texts, ENTRYPOINTS.values()))

    def set_reads(self, reads: frozenset | None) -> None:
        """Key on these paths of the input (None: the whole input); forget every cached decision."""
        self.reads = reads
        self._trie = build_trie(self.reads) if self.reads is not None else {None: True}
        self._project = compile_projection(self._trie)
        trie = self._trie
        self._top = (None if trie.get(None) or WILD in trie else
                     {k: compile_projection(v) for k, v in trie.items() if isinstance(k, str) and k != LEN})
        # Per top-level key read as a list of like elements (`input.k[_]...` only): the keys read of an element
        # and the element's projection.
        self._elements = {k: (keys, compile_projection(v[WILD])) for k, v in trie.items()
                          if isinstance(k, str) and k != LEN and isinstance(v, dict)
                          and (keys := _element_keys(v)) is not None}
        self._items.clear()

    def key(self, kind: str, doc: dict) -> str | None:
        if not self.enabled:
            return None
        try:
            shared = ([k for k, v in doc.items() if v.__class__ is Shared or self._stamped_list(k, v)]
                      if self._top is not None and isinstance(doc, dict) else None)
            if not shared:
                return kind + _key_json(self._project(doc))
            # Top-level values marked Shared: each one's projection is serialised once per object (it never
            # changes), the rest of the input as usual; the key names which keys were shared (for `#len`).
            rest = {k: v for k, v in doc.items() if k not in shared}
            parts = [kind, _key_json(self._project(rest))]
            for k in shared:
                parts.append(k)
                proj = self._top.get(k)
                if proj is not None:
                    parts.append(self._fragment(k, doc[k], proj))
            return "\x00".join(parts)
        except (TypeError, ValueError):
            return None

    def _stamped_list(self, key: str, value: Any) -> bool:
        """A list of Stamped entries (history) whose stamped field no rule reads of its elements: it projects as
        the list of their shared bases."""
        if value.__class__ is not list or not value or value[0].__class__ is not Stamped:
            return False
        elements = self._elements.get(key)
        if elements is None:
            return False
        read = elements[0]
        return all(e.__class__ is Stamped and e.field not in read for e in value)

    def _fragment(self, key: str, value: Any, proj: Any) -> str:
        if value.__class__ is list:      # Stamped entries (_stamped_list): each projected as its base, once
            element = self._elements[key][1]
            texts = []
            for entry in value:
                texts.append(_key_text(entry.base, element))
            return "[" + ",".join(texts) + "]"         # a JSON array of the elements' projections, in order
        return _key_text(value, proj)

    def get(self, key: str | None) -> "Decision | None":
        if key is None:
            return None
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
        return hit

    def put(self, key: str | None, decision: "Decision") -> None:
        if key is None:
            return
        self._items[key] = decision
        if len(self._items) > self.size:
            self._items.popitem(last=False)


def _key_text(value: Any, proj: Any) -> str:
    """The JSON of `proj(value)`, kept on a Shared value (it never changes; a new revision's projection
    replaces it)."""
    if value.__class__ is Shared:
        hit = getattr(value, "key_memo", None)
        if hit is not None and hit[0] is proj:
            return hit[1]
        text = _key_json(proj(value))
        value.key_memo = (proj, text)
        return text
    return _key_json(proj(value))


def _element_keys(node: dict) -> frozenset | None:
    """The keys read of a list's elements under this trie node when every element is read alike (`k[_].a`,
    `count(k)`); None when some element is read whole, by index, or in every key."""
    if node.get(None) or WILD not in node:
        return None
    if any(k != WILD and k != LEN for k in node):
        return None
    sub = node[WILD]
    if not isinstance(sub, dict) or sub.get(None) or WILD in sub:
        return None
    return frozenset(x for x in sub if isinstance(x, str))


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

    def _configure(self, source: PolicySource) -> None:
        """A new revision is active: key the cache on what its modules read, and keep its data."""
        self.cache.configure(source)
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
