"""Policy engines behind one protocol: embedded regopy (default) and, later, an OPA server.

The embedded engine compiles the policy once (`Interpreter.build`) into a bundle and evaluates that bundle
with `query_bundle_entrypoint` on a small thread pool (regopy releases the GIL). Each worker thread keeps its
own Interpreter: one is never shared by two evaluations at once. An evaluation cannot be cancelled, so it is
timed out and the timeout is a deny. A reload builds the new bundle off-loop and swaps it in only when
`bundle.ok()` — a semantically broken bundle would crash the process when queried.
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
from regopy import rego_shared as _rs
from regopy.node import NodeKind

from gateway.policy.decision import Decision, deny, parse_decision
from gateway.policy.loader import PolicySource, load_policy_dir, policy_files

log = logging.getLogger("sandgate.policy")

ENTRYPOINTS = {"egress": "sandgate/egress/decision", "toolcall": "sandgate/toolcall/decision"}


class PolicyError(Exception):
    """The policy could not be loaded or compiled."""


class PolicyEngine(Protocol):
    rev: str

    async def start(self) -> None: ...

    async def decide(self, kind: str, input_doc: dict) -> Decision: ...

    async def reload(self) -> bool: ...

    async def close(self) -> None: ...


def build_bundle(source: PolicySource, entrypoints: list[str] | None = None) -> Any:
    """Compile modules + data into a regopy bundle. Raises PolicyError on parse or semantic errors."""
    interp = regopy.Interpreter()
    try:
        for name, text in source.modules:
            interp.add_module(name, text)
        interp.add_data(source.data)
        bundle = interp.build(None, entrypoints or list(ENTRYPOINTS.values()))
    except regopy.RegoError as exc:
        raise PolicyError(f"policy does not compile: {str(exc)[:2000]}") from None
    if not bundle.ok():
        raise PolicyError("policy does not compile (semantic error; see log)")
    return bundle


def node_to_python(impl: Any) -> Any:
    """Walk a regopy result node into Python values.

    regopy's JSON rendering does not escape strings (a `"` in input yields invalid JSON), so results are
    read node by node instead.
    """
    kind = _rs.rego_node_type(impl)
    if kind in (NodeKind.Term, NodeKind.Scalar):
        return node_to_python(_rs.rego_node_get(impl, 0))
    size = _rs.rego_node_size(impl)
    if kind == NodeKind.Object:
        out = {}
        for i in range(size):
            item = _rs.rego_node_get(impl, i)
            out[node_to_python(_rs.rego_node_get(item, 0))] = node_to_python(_rs.rego_node_get(item, 1))
        return out
    if kind in (NodeKind.Array, NodeKind.Set, NodeKind.Terms):
        return [node_to_python(_rs.rego_node_get(impl, i)) for i in range(size)]
    value = _rs.rego_node_value(impl)
    if kind == NodeKind.String:
        # Strings made by builtins come back JSON-quoted; strings from input come back raw.
        if len(value) >= 2 and value[0] == value[-1] == '"':
            try:
                decoded = json.loads(value)
            except ValueError:
                return value
            return decoded if isinstance(decoded, str) else value
        return value
    if kind == NodeKind.Int:
        return int(value)
    if kind == NodeKind.Float:
        return float(value)
    if kind in (NodeKind.Boolean, NodeKind.True_, NodeKind.False_):
        return value == "true"
    if kind == NodeKind.Null:
        return None
    raise PolicyError(f"unexpected result node kind {kind}")


def evaluate_bundle(interp: Any, bundle: Any, entrypoint: str, input_doc: dict) -> Any:
    """One evaluation. Returns the value, or None when undefined. Raises PolicyError on engine errors.

    Uses regopy's low-level calls: its `Output` wrapper raises on error texts and `expressions()` aborts
    the process on an undefined result.
    """
    interp.set_input(regopy.Input(input_doc))
    try:
        impl = _rs.rego_bundle_query_entrypoint(interp._impl, bundle._impl, entrypoint)
    except Exception as exc:  # noqa: BLE001 - regopy raises RegoError or others for missing plans
        raise PolicyError(f"evaluation error: {str(exc)[:300]}") from None
    try:
        text = _rs.rego_output_string(impl)
        if not _rs.rego_output_ok(impl) or text.lstrip().startswith("(error"):
            raise PolicyError(f"evaluation error: {_error_message(text)}")
        if text.strip() == "undefined":
            return None
        values = node_to_python(_rs.rego_output_expressions_at_index(impl, 0))
    finally:
        _rs.rego_free_output(impl)
    return values[0] if values else None


def _error_message(text: str) -> str:
    import re

    found = re.findall(r"\(errormsg \d+:([^)]*)\)", text)
    return "; ".join(found)[:500] or text[:200]


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


class EmbeddedEngine:
    def __init__(self, policy_dir: str | Path, timeout_s: float = 2.0, workers: int = 2):
        self.policy_dir = Path(policy_dir)
        self.timeout_s = timeout_s
        self.rev = ""
        self._bundle: Any = None
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandgate-rego")
        self._build_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandgate-rego-build")
        self._local = threading.local()
        self._stamp: tuple = ()
        self._watch_task: asyncio.Task | None = None
        self.last_error: str | None = None
        self.cache = DecisionCache()

    # -- loading ---------------------------------------------------------------------------------
    def _stamp_now(self) -> tuple:
        try:
            return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in policy_files(self.policy_dir))
        except OSError:
            return ()

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

    def watch(self, interval_s: float = 1.0) -> None:
        async def _loop() -> None:
            while True:
                await asyncio.sleep(interval_s)
                stamp = await asyncio.to_thread(self._stamp_now)      # a directory walk: off the loop
                if stamp != self._stamp:
                    await self.reload()
        self._watch_task = asyncio.create_task(_loop(), name="sandgate-policy-watch")

    # -- deciding --------------------------------------------------------------------------------
    def _eval(self, bundle: Any, entrypoint: str, input_doc: dict) -> Any:
        interp = getattr(self._local, "interp", None)
        if interp is None:
            interp = self._local.interp = regopy.Interpreter()
        return evaluate_bundle(interp, bundle, entrypoint, input_doc)

    async def decide(self, kind: str, input_doc: dict) -> Decision:
        rev, bundle = self.rev, self._bundle
        entrypoint = ENTRYPOINTS.get(kind)
        if entrypoint is None or bundle is None:
            return deny("policy.unavailable", "no policy is loaded for this kind", rev)
        key = self.cache.key(kind, input_doc)
        cached = self.cache.get(key)
        if cached is not None and cached.rev == rev:
            return cached
        fut = asyncio.get_running_loop().run_in_executor(self._pool, self._eval, bundle, entrypoint, input_doc)
        try:
            raw = await asyncio.wait_for(asyncio.shield(fut), self.timeout_s)
        except asyncio.TimeoutError:
            log.error("policy evaluation timed out (kind=%s)", kind)
            return deny("policy.timeout", "the policy engine timed out", rev)
        except Exception as exc:  # noqa: BLE001 - an engine error is a deny
            log.error("policy evaluation failed (kind=%s): %s", kind, exc)
            return deny("policy.error", "the policy engine failed", rev)
        decision = parse_decision(raw, rev)
        if rev == self.rev:
            self.cache.put(key, decision)
        return decision

    async def close(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
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
