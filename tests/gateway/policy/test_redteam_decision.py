"""Red team: an ask's ttl_s from a (site) policy is a number of seconds an approval stays open; 1e300 made an
expiry no date can show (every read of that approval was a 500). Capped at a year."""
from __future__ import annotations

import math

import pytest

from gateway.policy.decision import MAX_APPROVAL_TTL_S, parse_decision


@pytest.mark.parametrize("ttl", [1e300, 10 ** 30, math.inf])
def test_huge_ttl_is_capped(ttl):
    d = parse_decision({"action": "ask", "reasons": ["r"], "codes": ["c"], "ttl_s": ttl})
    assert d.action == "ask" and d.approval_ttl_s == MAX_APPROVAL_TTL_S


@pytest.mark.parametrize("ttl", [math.nan, -5, 0, "60", True])
def test_odd_ttl_is_ignored(ttl):
    assert parse_decision({"action": "ask", "reasons": ["r"], "codes": ["c"], "ttl_s": ttl}).approval_ttl_s is None


def test_ordinary_ttl_is_kept():
    assert parse_decision({"action": "ask", "reasons": ["r"], "codes": ["c"], "ttl_s": 90}).approval_ttl_s == 90.0
