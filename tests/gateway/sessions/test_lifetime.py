"""How long a session may live: no ceiling by default for persistent sessions, 24 h for ephemeral ones."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.sessions.spec import MAX_TTL_S, BadRequest, lifetime_ceiling, parse_session_spec, renewed_expiry
from gateway.store.records import Session

DAY = 86400


def test_ceilings():
    assert lifetime_ceiling("persistent") == MAX_TTL_S                       # 0 = none
    assert lifetime_ceiling("persistent", 3600) == 3600
    assert lifetime_ceiling("ephemeral") == DAY
    assert lifetime_ceiling("ephemeral", 3600, 600) == 600
    assert lifetime_ceiling("persistent", 10 * MAX_TTL_S) == MAX_TTL_S


def test_a_persistent_session_may_ask_for_more_than_thirty_days():
    assert parse_session_spec({"workload": "persistent", "ttl_s": 400 * DAY}, {}).ttl_s == 400 * DAY
    with pytest.raises(BadRequest, match="between 1 and 3600"):
        parse_session_spec({"workload": "persistent", "ttl_s": 3601}, {}, lifetimes=(3600, DAY))


def test_an_ephemeral_session_lives_a_day_at_most():
    assert parse_session_spec({}, {}).ttl_s == 3600
    with pytest.raises(BadRequest, match="between 1 and 86400"):
        parse_session_spec({"ttl_s": DAY + 1}, {})
    assert parse_session_spec({}, {}, lifetimes=(0, 600)).ttl_s == 600        # the default fits the ceiling


@given(st.integers(1, 10 ** 10), st.floats(0, 10 ** 9), st.integers(1, MAX_TTL_S))
def test_renewal_never_passes_the_ceiling(ttl, now, ceiling):
    row = Session(id="s_1", workload="persistent", created_at=0.0, expires_at=1.0)
    try:
        expires = renewed_expiry(row, ttl, now, ceiling)
    except BadRequest:
        assert now + ttl > ceiling
    else:
        assert expires == now + ttl <= ceiling


def test_renewal_past_thirty_days_without_a_ceiling():
    assert renewed_expiry(Session(id="s_1", workload="persistent", created_at=0.0, expires_at=1.0), 10 * DAY,
                          60 * DAY) == 70 * DAY
