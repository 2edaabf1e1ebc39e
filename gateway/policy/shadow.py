"""The shadow policy (`policy.shadow_dir`): a second policy evaluated beside the live one as a dry run.

The live decision is returned at once; the shadow evaluates the same input in the background and, when its
action or codes differ, the divergence is written to the decision log (`sandgate policy diff` lists them).
This is how a team rolls out a stricter policy: run it as the shadow, read the diff, then make it live.
The shadow never changes a decision and never delays one; past `max_inflight` pending shadow evaluations
new ones are skipped (counted in `skipped`).
"""
from __future__ import annotations

import asyncio
import logging

from gateway.policy.base import CachingEngine, DecisionSink
from gateway.policy.decision import Decision

log = logging.getLogger("sandgate.policy")


def diverges(live: Decision, shadow: Decision) -> bool:
    return live.action != shadow.action or sorted(live.codes) != sorted(shadow.codes)


class ShadowedEngine:
    """The live engine, with a shadow engine and the decision log beside it (same PolicyEngine protocol)."""

    def __init__(self, live: CachingEngine, shadow: CachingEngine, log_sink: DecisionSink, max_inflight: int = 256):
        self.live = live
        self.shadow = shadow
        self.log = log_sink
        self.max_inflight = max_inflight
        self.skipped = 0
        self._inflight: set[asyncio.Task] = set()

    @property
    def rev(self) -> str:
        return self.live.rev

    @property
    def data(self) -> dict | None:
        return self.live.data

    @property
    def last_error(self) -> str | None:
        return self.live.last_error

    def health(self) -> dict:
        return {**self.live.health(), "shadow": self.shadow.health()}

    async def start(self) -> None:
        await self.live.start()
        await self.shadow.start()

    def watch(self, interval_s: float = 1.0) -> None:
        self.live.watch(interval_s)
        self.shadow.watch(interval_s)

    async def reload(self) -> bool:
        changed = await self.live.reload()
        await self.shadow.reload()
        return changed

    async def decide(self, kind: str, input_doc: dict, request_id: str | None = None) -> Decision:
        decision = await self.live.decide(kind, input_doc, request_id)
        if len(self._inflight) >= self.max_inflight:
            self.skipped += 1
        else:
            task = asyncio.create_task(self._compare(kind, input_doc, decision))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return decision

    async def _compare(self, kind: str, input_doc: dict, live: Decision) -> None:
        try:
            shadow = await self.shadow.decide_quietly(kind, input_doc)
        except Exception as exc:  # noqa: BLE001 - the shadow never affects the live path
            log.error("shadow policy evaluation failed: %s", exc)
            return
        if diverges(live, shadow):
            self.log.record_divergence(live.decision_id, kind, input_doc, live.to_json(), shadow.to_json(),
                                       live.rev, shadow.rev)

    async def close(self) -> None:
        for task in list(self._inflight):
            task.cancel()
        await self.live.close()
        await self.shadow.close()
