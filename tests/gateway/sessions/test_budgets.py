"""Budgets as pure functions: a session's own over its workload's, which are spent, the denial window, and the
configuration keys of caps and budgets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from gateway.config import BUDGET_KEYS, load_config
from gateway.sessions.budgets import COUNTED, DenialWindow, burst, effective, parse_own, spent
from gateway.sessions.spec import BadRequest, parse_session_spec


def test_own_budgets_replace_the_workloads_key_by_key():
    got = effective({"requests": 100, "bytes_in": 10}, {"bytes_in": 1000})
    assert got == {"requests": 100, "bytes_out": 0, "bytes_in": 1000, "toolcalls": 0, "denials_per_10m": 0}
    assert effective(None, None) == dict.fromkeys(BUDGET_KEYS, 0)
    assert effective({"requests": 5}, {"requests": 0})["requests"] == 0      # 0 = none, also as one's own


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({k: st.integers(0, 20) for k in COUNTED}),
       st.fixed_dictionaries({k: st.integers(0, 25) for k in COUNTED}),
       st.sampled_from([None, *COUNTED]))
def test_spent_is_a_reached_nonzero_budget(budgets, stats, counted):
    got = spent(budgets, stats, counted)
    assert got == sorted(got, key=COUNTED.index)
    for key in COUNTED:
        used = stats[key] - (key == counted)
        assert (key in got) == (budgets[key] > 0 and used >= budgets[key])


def test_a_counted_action_is_not_its_own_overshoot():
    # three tool calls allowed: the third is decided with toolcalls = 3 (it is counted before its decision)
    assert spent({"toolcalls": 3}, {"toolcalls": 3}, "toolcalls") == []
    assert spent({"toolcalls": 3}, {"toolcalls": 4}, "toolcalls") == ["toolcalls"]
    # three requests allowed: the fourth is decided with requests = 3 (counted once it is done)
    assert spent({"requests": 3}, {"requests": 3}) == ["requests"]


@pytest.mark.parametrize("raw, message", [
    ({"request": 1}, "unknown budget 'request'"),
    ({"requests": -1}, "integer >= 0"),
    ({"requests": True}, "integer >= 0"),
    ({"bytes_in": 1.5}, "integer >= 0"),
    ([1], "table of budgets"),
])
def test_bad_budgets_are_refused(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_own(raw)
    with pytest.raises(BadRequest, match=message):
        parse_session_spec({"budgets": raw}, {})


def test_a_session_may_bring_its_own_budgets():
    assert parse_session_spec({"budgets": {"bytes_in": 5}}, {}).budgets == {"bytes_in": 5}
    assert parse_session_spec({}, {}).budgets == {}


def test_denial_window_counts_the_last_ten_minutes():
    w = DenialWindow(every_s=5, window_s=600)
    assert w.observe("s", 0, 0) == 0
    assert w.observe("s", 1, 30) == 30               # a burst right away
    for t in range(5, 600, 5):
        w.observe("s", t, 30)
    assert w.observe("s", 700, 31) == 1              # the burst is older than the window now
    w2 = DenialWindow()
    assert w2.observe("old", 1000, 500, created_at=0) == 0    # first seen long after its start: counts from here
    assert w2.observe("new", 1000, 7, created_at=999) == 7    # a new session: every denial since its start counts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 60), st.integers(0, 5)), max_size=80))
def test_denial_window_never_misses_a_denial_in_the_window_and_stays_small(steps):
    w = DenialWindow(every_s=5, window_s=120)
    now, total, history = 0.0, 0, [(0.0, 0)]
    w.observe("s", now, total)
    for dt, n in steps:
        now += dt
        total += n
        history.append((now, total))
        got = w.observe("s", now, total)
        exact = total - max((tot for t, tot in history if t <= now - 120), default=0)
        assert total >= got >= exact          # a few seconds before the window may count too (one sample's gap)
        if all(dt <= 1 for dt, _ in steps):   # observed every second (the housekeeping): at most 125 s counted
            assert got <= total - max((tot for t, tot in history if t <= now - 126), default=0)
        assert len(w._samples["s"]) <= 120 / 5 + 3


def test_burst_only_past_a_nonzero_limit():
    assert not burst(0, 1000) and not burst(10, 10) and burst(10, 11)


def test_caps_and_budgets_in_the_configuration():
    cfg = load_config(environ={"SANDGATE_SESSIONS__MAX_HELD": "3", "SANDGATE_BUDGETS__PERSISTENT__BYTES_IN": "9",
                               "SANDGATE_EGRESS__MAX_HELD_BYTES": "1024"})
    assert cfg.sessions.max_held == 3 and cfg.sessions.max_pending_approvals == 32
    assert cfg.sessions.max_connections == 64 and cfg.sessions.max_lifetime_s == 0
    assert cfg.egress.max_held_bytes == 1024
    assert cfg.budgets["persistent"]["bytes_in"] == 9 and cfg.budgets["ephemeral"]["bytes_in"] == 0
    for overrides, message in (({"sessions": {"max_held": 0}}, "sessions.max_held"),
                               ({"sessions": {"max_hold": 1}}, "unknown key 'sessions.max_hold'"),
                               ({"egress": {"max_held_bytes": -1}}, "egress.max_held_bytes"),
                               ({"budgets": {"batch": {}}}, r"unknown section \[budgets\.batch\]"),
                               ({"budgets": {"persistent": {"requests": "x"}}}, "budgets.persistent.requests")):
        with pytest.raises(ValueError, match=message):
            load_config(environ={}, overrides=overrides)


def test_the_sdk_reads_budgets_and_counters():
    from sandgate.types import SessionInfo

    info = SessionInfo.from_json({"id": "s_1", "budgets": {"bytes_in": 5}, "budgets_spent": ["bytes_in"],
                                  "stats": {"bytes_in": 9}})
    assert info.budgets == {"bytes_in": 5} and info.budgets_spent == ("bytes_in",) and info.stats["bytes_in"] == 9


def test_a_restarted_window_counts_only_new_denials():
    w = DenialWindow()
    assert w.observe("s", 10, 40, created_at=0) == 40
    w.restart("s", 10, 40)
    assert w.observe("s", 11, 40) == 0 and w.observe("s", 20, 43) == 3
