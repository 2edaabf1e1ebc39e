"""The test suite's free ports (tests/support/upstream.py): outside the kernel's ephemeral range, so no outgoing
connection can take one between the choice and the server's bind; never handed out twice; bindable."""
from __future__ import annotations

import socket

from tests.support.upstream import _ephemeral_range, free_port


def test_free_ports_are_outside_the_ephemeral_range_distinct_and_bindable():
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert not any(low <= p <= high for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_each_xdist_worker_hands_out_ports_no_other_worker_can(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    taken = {}
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        taken[index] = {free_port() for _ in range(50)}
        assert all(p % 3 == index for p in taken[index])
    assert not (taken[0] & taken[1]) and not (taken[1] & taken[2]) and not (taken[0] & taken[2])
