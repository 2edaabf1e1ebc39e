"""A session's budgets, as pure functions of plain values (no I/O, `now` passed in).

`[budgets.WORKLOAD]` sets every session's budgets by workload; a session's own (POST or PATCH
`/v1/sessions/{id}` `{"budgets": {...}}`) replace those keys for it. 0 = none. The counted budgets
(`requests`, `bytes_out`, `bytes_in`, `toolcalls`) compare with the session's counters (`input.session.stats`,
every replica's): a budget is spent once its counter has reached it before the action being decided, and the
default policies then ask for every action (`budget.exceeded`). `denials_per_10m` is not a counter's total:
more denials than that within ten minutes freeze the session (`DenialWindow`).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Mapping

from gateway.config import BUDGET_KEYS, parse_budgets

COUNTED = ("requests", "bytes_out", "bytes_in", "toolcalls")
WINDOW_S = 600.0


def effective(defaults: Mapping[str, int] | None, own: Mapping[str, Any] | None) -> dict[str, int]:
    """Every budget key: the session's own value where it has one, else its workload's default, else 0."""
    out = dict.fromkeys(BUDGET_KEYS, 0)
    out.update({k: int(v) for k, v in (defaults or {}).items() if k in out})
    out.update({k: int(v) for k, v in (own or {}).items() if k in out and isinstance(v, int)})
    return out


def spent(budgets: Mapping[str, int], stats: Mapping[str, int], counted: str | None = None) -> list[str]:
    """The counted budgets the session has spent, sorted: a budget > 0 whose counter reached it. `counted` names
    a counter that already includes the action being decided (a tool call is counted before its decision)."""
    out = []
    for key in COUNTED:
        limit = int(budgets.get(key, 0) or 0)
        used = int(stats.get(key, 0) or 0) - (1 if key == counted else 0)
        if limit > 0 and used >= limit:
            out.append(key)
    return out


def parse_own(raw: Any) -> dict[str, int]:
    """A request's `"budgets"` object -> its keys (ValueError naming what is wrong)."""
    return parse_budgets(raw, "budgets")


class DenialWindow:
    """Denials within the last ten minutes, per session, from samples of its `denied` counter total (every
    replica's, as synced about once a second). A sample is kept at most every `every_s`, so a session costs at
    most WINDOW_S / every_s + 3 samples. The count is the total now minus the total at the newest sample at
    least WINDOW_S old (or the first sample, for a session watched for less than that)."""

    def __init__(self, every_s: float = 5.0, window_s: float = WINDOW_S):
        self.every_s, self.window_s = every_s, window_s
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def observe(self, sid: str, now: float, total: int, created_at: float | None = None) -> int:
        """Record the session's total now; return its denials within the window. A session first seen less than
        a window after its `created_at` had 0 then (every denial it has counts); one seen later starts here."""
        samples = self._samples.get(sid)
        if samples is None:
            samples = self._samples[sid] = deque()
            if created_at is not None and now - created_at < self.window_s:
                samples.append((created_at, 0))
        if not samples or now - samples[-1][0] >= self.every_s:
            samples.append((now, total))
        while len(samples) > 1 and samples[1][0] <= now - self.window_s:
            samples.popleft()              # samples[0] stays: the newest one at least a window old
        return max(0, total - samples[0][1])

    def restart(self, sid: str, now: float, total: int) -> None:
        """Count from here (the session was just frozen for its burst: lifting the freeze starts a new window)."""
        self._samples[sid] = deque([(now, total)])

    def forget(self, sid: str) -> None:
        self._samples.pop(sid, None)

    def retain(self, sids: set[str]) -> None:
        for sid in [s for s in self._samples if s not in sids]:
            del self._samples[sid]


def burst(limit: int, in_window: int) -> bool:
    """Whether `in_window` denials exceed a `denials_per_10m` budget (0 = none)."""
    return limit > 0 and in_window > limit
