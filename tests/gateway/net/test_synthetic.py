"""Synthetic addresses: one per name and session, read back only by the session that was given it."""
from __future__ import annotations

import ipaddress

from hypothesis import given, strategies as st

from gateway.net.synthetic import SYNTHETIC_POOL, SyntheticNames


def test_one_address_per_name_and_session():
    names = SyntheticNames()
    a = names.address_for("s1", "pypi.org")
    assert a == names.address_for("s1", "pypi.org")
    b = names.address_for("s1", "files.pythonhosted.org")
    assert a != b
    assert names.name_for("s1", a) == "pypi.org" and names.name_for("s1", b) == "files.pythonhosted.org"
    assert ipaddress.ip_address(a) in SYNTHETIC_POOL and str(SYNTHETIC_POOL.network_address) != a


def test_another_session_cannot_read_an_address_back():
    names = SyntheticNames()
    a = names.address_for("s1", "pypi.org")
    assert names.name_for("s2", a) is None
    assert names.name_for("s1", "10.200.128.250") is None


def test_a_full_table_gives_no_address_and_forget_clears_it():
    names = SyntheticNames(limit=2)
    assert names.address_for("s1", "a.test") and names.address_for("s1", "b.test")
    assert names.address_for("s1", "c.test") is None
    assert names.address_for("s1", "a.test") is not None          # known names still answer
    names.retain({"s2"})
    assert names.sessions() == 0 and names.name_for("s1", "10.200.128.1") is None


@given(st.lists(st.from_regex(r"[a-z]{1,8}\.test", fullmatch=True), max_size=50))
def test_addresses_are_distinct_in_pool_and_invert(hosts):
    names = SyntheticNames()
    given_out = {h: names.address_for("s", h) for h in hosts}
    assert len(set(given_out.values())) == len(given_out)
    for host, addr in given_out.items():
        assert names.name_for("s", addr) == host and ipaddress.ip_address(addr) in SYNTHETIC_POOL
