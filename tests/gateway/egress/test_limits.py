"""The proxy's per-session caps as plain bookkeeping: held requests, bytes held in memory, connections."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from gateway.egress.limits import HELD_BYTES_FULL, TOO_MANY_HELD, Claim, ConnectionLimits, HeldLimits


def test_held_slots_per_session_and_bytes_for_all():
    lim = HeldLimits(max_held=2, max_bytes=100)
    a1, a2 = lim.admit("a", 10), lim.admit("a", 10)
    assert isinstance(a1, Claim) and isinstance(a2, Claim)
    assert lim.admit("a", 0) == TOO_MANY_HELD            # a third held request of the same session
    b1 = lim.admit("b", 80)                               # another session is not affected
    assert isinstance(b1, Claim) and lim.bytes == 100
    assert lim.admit("c", 1) == HELD_BYTES_FULL           # the global bytes are spent
    assert isinstance(lim.admit(None, 0), Claim)          # nothing to hold: always admitted
    lim.release(a1)
    lim.release(a1)                                       # twice is once
    assert lim.held("a") == 1 and lim.bytes == 90
    assert isinstance(lim.admit("a", 10), Claim)


def test_inspected_body_takes_no_held_slot():
    lim = HeldLimits(max_held=1, max_bytes=10)
    assert isinstance(lim.admit(None, 5), Claim) and isinstance(lim.admit(None, 5), Claim)
    assert lim.admit(None, 1) == HELD_BYTES_FULL and lim.held("x") == 0


ops = st.lists(st.tuples(st.sampled_from(["admit", "release"]), st.sampled_from(["a", "b", None]),
                         st.integers(0, 60), st.integers(0, 50)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 4), st.integers(1, 200))
def test_caps_never_exceeded_and_all_given_back(seq, max_held, max_bytes):
    lim = HeldLimits(max_held, max_bytes)
    claims: list[Claim] = []
    for op, sid, nbytes, pick in seq:
        if op == "admit":
            out = lim.admit(sid, nbytes)
            if isinstance(out, Claim):
                claims.append(out)
            else:
                assert out in (TOO_MANY_HELD, HELD_BYTES_FULL)
        elif claims:
            lim.release(claims[pick % len(claims)])       # maybe one released before: harmless
        assert 0 <= lim.bytes <= max_bytes
        for s in ("a", "b"):
            assert 0 <= lim.held(s) <= max_held
        live = [c for c in claims if not c.released]
        assert lim.bytes == sum(c.nbytes for c in live)
    for c in claims:
        lim.release(c)
    assert lim.bytes == 0 and lim.held("a") == lim.held("b") == 0


def test_connections_per_session():
    lim = ConnectionLimits(2)
    assert lim.open("c1", "a") and lim.open("c2", "a") and lim.open("c1", "a")    # the same connection again
    assert not lim.open("c3", "a") and lim.count("a") == 2
    assert lim.open("c3", "b")
    lim.close("c1")
    lim.close("c1")
    assert lim.count("a") == 1 and lim.open("c4", "a")
    assert lim.open("c2", "b") and lim.count("a") == 1 and lim.count("b") == 2    # a connection changed session


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["c1", "c2", "c3", "c4", "c5"]),
                          st.sampled_from(["a", "b"])), max_size=100), st.integers(1, 3))
def test_connection_counts_match_open_connections(seq, cap):
    lim = ConnectionLimits(cap)
    open_: dict[str, str] = {}
    for is_open, conn, sid in seq:
        if is_open:
            if lim.open(conn, sid):
                open_[conn] = sid
        else:
            lim.close(conn)
            open_.pop(conn, None)
        for s in ("a", "b"):
            assert lim.count(s) == sum(1 for v in open_.values() if v == s) <= cap
