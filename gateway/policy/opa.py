"""The `opa` engine: decisions from an OPA server over its REST API (opa-python-client, aiohttp underneath).

On start and on every change of the policy directory the modules are pushed with `PUT /v1/policies/<id>`
(opapush.py: one per file, or one per package for files that only compile together) and
the data files with `PUT /v1/data/<path>` (OPA's bundle layout), and modules this process pushed earlier that
are gone are deleted; with `policy.opa_push = false` the server loads its own bundles and nothing is pushed
(and nothing is cached: the server may change its policy at any time). A decision is `POST
/v1/data/sandgate/<kind>/decision` on one pooled session, bounded by `policy.timeout_s`. A connection error,
a non-200, a timeout or a response without `result` is a deny (CachingEngine.decide).
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.policy.base import CachingEngine, DecisionSink, EvaluationTimeout
from gateway.policy.loader import PolicySource, load_policy_dir
from gateway.policy.opapush import merge_by_package, policy_id
from gateway.policy.rego import PolicyError, compile_source

log = logging.getLogger("sandgate.policy")

class OpaError(Exception):
    """The OPA server refused or failed a request."""


def parse_opa_url(url: str) -> tuple[str, int, bool]:
    """'http://127.0.0.1:8181' -> ('127.0.0.1', 8181, False). ValueError when it is not an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"policy.opa_url must be an http(s) URL, not {url!r}")
    if parts.path not in ("", "/"):
        raise ValueError("policy.opa_url must not have a path (the API is under /v1)")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), parts.scheme == "https"


class OpaEngine(CachingEngine):
    engine_name = "opa"

    def __init__(self, policy_dir: str | Path, url: str, timeout_s: float = 2.0, push: bool = True,
                 decision_log: DecisionSink | None = None):
        super().__init__(policy_dir, timeout_s, decision_log)
        self.url = url
        self.push = push
        self.host, self.port, self.tls = parse_opa_url(url)
        self.state = "starting"            # ok | error (the last push failed) | unreachable (a decision failed)
        self.decision_error: str | None = None
        self._client: Any = None
        self._pushed: set[str] = set()
        self._pushed_data: set[str] = set()
        self._lock = asyncio.Lock()

    def health(self) -> dict:
        """For /healthz, which anyone reaching the API may read: states, never error texts or addresses
        (those are logged)."""
        return {"engine": "opa", "push": self.push, "state": self.state, "rev": self.rev,
                "reload_failed": self.last_error is not None}

    async def _open(self) -> None:
        from opa_client.opa_async import AsyncOpaClient

        # No client-side retries: a decision has one timeout, and a failure is a deny.
        self._client = AsyncOpaClient(host=self.host, port=self.port, ssl=self.tls, retries=0,
                                      timeout=self.timeout_s)
        await self._client.__aenter__()

    async def start(self) -> None:
        await self._open()
        if not self.push:
            self.rev, self.state = "opa-server", "ok"
            self.cache.enabled = False
            log.info("policy decisions from OPA at %s (policies loaded by the server)", self.url)
            return
        ok = await self.reload()
        if not ok and not self.rev:
            raise PolicyError(f"cannot push the policy to OPA at {self.url}: {self.last_error}")
        log.info("policy pushed to OPA at %s rev=%s", self.url, self.rev)

    async def reload(self) -> bool:
        if not self.push:
            return False
        async with self._lock:
            stamp = await asyncio.to_thread(self._stamp_now)
            try:
                source = await asyncio.to_thread(self._load)
                await self._push(source)
            except (PolicyError, OpaError, OSError, asyncio.TimeoutError) as exc:
                self._stamp, self.last_error, self.state = stamp, str(exc) or type(exc).__name__, "error"
                log.error("policy push to OPA rejected; keeping rev=%s: %s", self.rev, self.last_error)
                return False
            except Exception as exc:  # noqa: BLE001 - aiohttp and client errors: the server is unusable
                self._stamp, self.last_error, self.state = stamp, f"{type(exc).__name__}: {exc}", "error"
                log.error("policy push to OPA failed; keeping rev=%s: %s", self.rev, self.last_error)
                return False
            changed = source.rev != self.rev
            self._stamp, self.rev, self.last_error, self.state = stamp, source.rev, None, "ok"
            self._configure(source)
            return changed

    def _load(self) -> PolicySource:
        try:
            source = load_policy_dir(self.policy_dir)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        compile_source(source)       # reject what does not compile before the server sees it
        self._read_set(source)
        return source

    async def _push(self, source: PolicySource) -> None:
        client = self._client
        paths = set()
        for path, value in sorted(source.data_docs, key=lambda d: len([p for p in d[0].split("/") if p])):
            paths.add(path)           # parents before children: a PUT replaces the whole subtree
            await asyncio.wait_for(self._put_data(path, value), self.timeout_s * 5)
        for stale in sorted(self._pushed_data - paths):
            try:
                await asyncio.wait_for(client.delete_data(stale), self.timeout_s * 5)
            except Exception as exc:  # noqa: BLE001
                log.warning("could not delete stale data %s from OPA: %s", stale, exc)
        self._pushed_data = paths
        rel_of = {policy_id(rel): rel for rel, _ in source.modules}
        ids, left, _ = await self._push_units([(policy_id(rel), text) for rel, text in source.modules])
        if left:
            # Modules that only compile together (one package, calling each other's functions): one module
            # per package. The single-file versions of those go first, or their rules would be defined twice.
            for pid, _ in left:
                if pid in self._pushed:
                    await asyncio.wait_for(client.delete_policy(pid), self.timeout_s * 5)
            more, rest, error = await self._push_units(merge_by_package([(rel_of[pid], text) for pid, text in left]))
            if rest:
                raise error or OpaError("policy push made no progress")
            ids |= more
        for stale in sorted(self._pushed - ids):
            try:
                await asyncio.wait_for(client.delete_policy(stale), self.timeout_s * 5)
            except Exception as exc:  # noqa: BLE001 - a stale module left behind is logged, not fatal
                log.warning("could not delete stale policy %s from OPA: %s", stale, exc)
        self._pushed = ids

    async def _push_units(self, units: list[tuple[str, str]]) -> tuple[set[str], list[tuple[str, str]],
                                                                     OpaError | None]:
        """PUT each (id, text), retrying the failures while that makes progress: (ids pushed, units left,
        the last error)."""
        pushed: set[str] = set()
        pending, error = list(units), None
        while pending:
            failed = []
            for pid, text in pending:
                try:
                    await asyncio.wait_for(self._put_policy(pid, text), self.timeout_s * 5)
                    pushed.add(pid)
                except OpaError as exc:
                    failed.append((pid, text))
                    error = exc
            if len(failed) == len(pending):
                return pushed, failed, error
            pending = failed
        return pushed, [], None

    async def _put_policy(self, pid: str, text: str) -> None:
        try:
            await self._client.update_policy_from_string(text, pid, rego_compat=False)
        except Exception as exc:  # noqa: BLE001 - the client raises its own error types
            raise OpaError(f"PUT /v1/policies/{pid}: {exc}") from None

    async def _put_data(self, path: str, value: Any) -> None:
        if not isinstance(value, dict):
            raise OpaError(f"data at {path or '/'} must be an object to be pushed")
        try:
            await self._client.update_or_create_data(value, path)
        except Exception as exc:  # noqa: BLE001
            raise OpaError(f"PUT /v1/data/{path}: {exc}") from None

    def _ready(self) -> bool:
        return self._client is not None and bool(self.rev)

    async def _evaluate(self, kind: str, entrypoint: str, input_doc: dict) -> Any:
        package, _, rule = entrypoint.removeprefix("data.").rpartition(".")
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await self._client.query_rule(input_doc, package, rule)
            if not isinstance(body, dict):
                raise OpaError("OPA answered something other than a JSON object")
        except TimeoutError:
            self._decision_failed("timeout")
            raise EvaluationTimeout() from None
        except Exception as exc:
            self._decision_failed(f"{type(exc).__name__}: {exc}")
            raise
        if self.state == "unreachable":
            self.state, self.decision_error = "ok", None
        return body.get("result")            # missing: undefined, a deny

    def _decision_failed(self, why: str) -> None:
        if self.state == "ok":
            self.state = "unreachable"
        self.decision_error = why[:300]

    async def close(self) -> None:
        self._stop_watching()
        if self._client is not None:
            await self._client.close_connection()
