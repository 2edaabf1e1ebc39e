"""Two replicas on one PostgreSQL, both delivering from the shared outbox: every event reaches the receiver once,
whichever replica filed or decided it, also when the receiver was down for a while and both retried."""
from __future__ import annotations

import time

from tests.conftest import need
from tests.gateway.test_replicas_pg_e2e import pg_config, start_pair
from tests.notify.receiver import Receiver
from tests.notify.test_notify_e2e import SECRET, file_toolcall, once_each
from tests.support.pg import pg_available


def test_two_replicas_deliver_each_event_once(tmp_path, monkeypatch):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    monkeypatch.setenv("SANDGATE_TEST_NOTIFY_KEY", SECRET)
    receiver = Receiver(SECRET).start()
    a, b = start_pair(tmp_path, pg_config(notify={"webhook_url": receiver.url,
                                                  "secret": "env:SANDGATE_TEST_NOTIFY_KEY"}))
    try:
        sid = a.session(allow=[])["id"]
        expected: set[tuple[str, str]] = set()
        filed = []
        for i in range(8):
            sg, other = (a, b) if i % 2 else (b, a)
            aid = file_toolcall(sg, sid, f"t-{i}")
            filed.append(aid)
            expected.add((aid, "approval.filed"))
            if i % 4 == 0:
                assert other.call("POST", f"/v1/approvals/{aid}/approve", other.approver, json={}).ok
                expected.add((aid, "approval.approved"))
        assert receiver.wait_for(lambda ds: len(ds) >= len(expected))
        receiver.stop()
        for i in range(6):               # both replicas retry these while the receiver is down
            sg = (a, b)[i % 2]
            aid = file_toolcall(sg, sid, f"d-{i}")
            expected.add((aid, "approval.filed"))
            assert (b, a)[i % 2].call("POST", f"/v1/approvals/{aid}/deny", sg.approver, json={"reason": "n"}).ok
            expected.add((aid, "approval.denied"))
        time.sleep(3)
        receiver.start()
        assert receiver.wait_for(lambda ds: len(ds) >= len(expected), timeout=60), len(receiver.snapshot())
        time.sleep(2)                    # nothing arrives twice
        once_each(receiver, expected)
    finally:
        b.stop()
        a.stop()
        receiver.stop()
