"""Webhook notifications through a real sandgate and a real aiohttp receiver on loopback: signed deliveries for
tool-call, egress and access approvals filed and decided; a receiver down for 5 s gets every event once after it
returns, and filing does not wait for it; a restart in the middle of the retries delivers after the restart, once
(the module's sandgate restarted). (The Slack format: test_notify_slack_e2e.py.)"""
from __future__ import annotations

import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.notify.receiver import Receiver
from tests.support.gateway import START_TIMEOUT_S, Sandgate
from tests.support.threads import background

SECRET = "notify-test-key-5f1c"          # the HMAC key, given to sandgate as env:SANDGATE_TEST_NOTIFY_KEY


def notify_config(receiver: Receiver, **extra) -> dict:
    return {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "hold_timeout_s": 30},
            "notify": {"webhook_url": receiver.url, "secret": "env:SANDGATE_TEST_NOTIFY_KEY", **extra}}


class Started(Sandgate):
    approver = ""

    def start(self, timeout: float = START_TIMEOUT_S) -> "Started":
        super().start(timeout)
        if not self.approver:                 # minted once: the signing key outlives a restart
            self.approver = self.token("approver", "alice")
        return self

    def __enter__(self) -> "Started":
        return self if self.proc is not None and self.proc.poll() is None else self.start()


def start(tmp, receiver: Receiver, **extra) -> Started:
    return Started(tmp, notify_config(receiver, **extra), env={"SANDGATE_TEST_NOTIFY_KEY": SECRET}).start()


def pending_egress(sg: Sandgate, sid: str, timeout: float = 10.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        items = sg.call("GET", f"/v1/approvals?status=pending&session={sid}", sg.approver).json()
        for item in items:
            if item["kind"] == "egress":
                return item["id"]
        time.sleep(0.05)
    raise AssertionError("no pending egress approval appeared")


def file_toolcall(sg: Sandgate, sid: str, target: str) -> str:
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "deploy", "args": {"target": target}})
    assert resp.status_code == 200 and resp.json()["decision"] == "ask", resp.text
    return resp.json()["approval_id"]


def file_access(sg: Sandgate, sid: str, host: str) -> str:
    resp = sg.call("POST", f"/v1/sessions/{sid}/access-requests", json={"host": host, "reason": "<!channel> pls"})
    assert resp.status_code == 202, resp.text
    return resp.json()["id"]


def failures(sg: Sandgate) -> list[dict]:
    """The audited failed deliveries (rows of no session: an approver lists them)."""
    resp = sg.call("GET", "/v1/events?kind=notify.failed", sg.approver)
    assert resp.status_code == 200, resp.text
    return resp.json()


def once_each(receiver: Receiver, expected: set[tuple[str, str]], since: int = 0) -> None:
    """Every expected (approval, event) arrived exactly once (after the first `since` deliveries), signed, each
    with a delivery id of its own."""
    got = receiver.snapshot()[since:]
    pairs = [(d.doc["approval"]["id"], d.doc["event"]) for d in got]
    assert sorted(pairs) == sorted(expected), (sorted(pairs), sorted(expected))
    assert len({d.id for d in got}) == len(got) and all(d.id.startswith("d_") for d in got)
    assert all(d.signed_ok for d in got), [d.signature for d in got if not d.signed_ok]
    assert all(d.event == d.doc["event"] and d.doc["delivery"] == d.id for d in got)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One receiver and one sandgate delivering to it, for the module (a test that stops the receiver starts it
    again)."""
    receiver = Receiver(SECRET).start()
    try:
        with start(tmp_path_factory.mktemp("notify"), receiver) as sg:
            yield sg, receiver
    finally:
        receiver.stop()


def test_signed_deliveries_for_toolcall_egress_and_access_approvals(world, upstream):
    sg, receiver = world
    since = len(receiver.snapshot())
    sess = sg.session(allow=["allowed.test"])
    sid = sess["id"]
    tool = file_toolcall(sg, sid, "prod")
    access = file_access(sg, sid, "api.partner.test")
    held, out = background(lambda: requests.delete(f"http://allowed.test:{upstream.port}/items/1",
                                                   proxies=sess["proxies"], timeout=30))
    egress = pending_egress(sg, sid)
    assert receiver.wait_for(lambda ds: len(ds) >= since + 3), receiver.snapshot()
    assert sg.call("POST", f"/v1/approvals/{tool}/approve", sg.approver, json={"reason": "ok"}).ok
    assert sg.call("POST", f"/v1/approvals/{egress}/deny", sg.approver, json={"reason": "no deletes"}).ok
    assert sg.call("POST", f"/v1/approvals/{access}/approve", sg.approver,
                   json={"grant": {"methods": ["GET"], "path_prefix": "/v1/", "ttl_s": 60}}).ok
    held.join(10)
    assert out["value"].status_code == 403
    expected = {(tool, "approval.filed"), (egress, "approval.filed"), (access, "approval.filed"),
                (tool, "approval.approved"), (egress, "approval.denied"), (access, "approval.approved")}
    assert receiver.wait_for(lambda ds: len(ds) >= since + 6)
    time.sleep(1.0)                   # nothing more arrives (no second delivery of any event)
    once_each(receiver, expected, since)
    docs = {(d.doc["approval"]["id"], d.doc["event"]): d.doc for d in receiver.snapshot()[since:]}
    assert {docs[(a, "approval.filed")]["approval"]["kind"] for a in (tool, egress, access)} == {
        "toolcall", "egress", "access"}
    assert docs[(egress, "approval.denied")]["approval"]["reason"] == "no deletes"
    granted = docs[(access, "approval.approved")]["approval"]
    assert granted["grant"]["methods"] == ["GET"] and granted["grant"]["path_prefix"] == "/v1/"
    assert docs[(tool, "approval.filed")]["approval"]["status"] == "pending"
    assert docs[(tool, "approval.filed")]["url"] == f"{sg.api}/approvals/{tool}"     # no web.public_url: the listener
    for aid, event in ((tool, "approval.approved"), (access, "approval.approved"), (egress, "approval.denied")):
        shown = sg.call("GET", f"/v1/approvals/{aid}", sg.approver).json()        # as the API shows it
        assert docs[(aid, event)]["approval"] == {**shown, "used_at": None}, aid
    # The key never reaches the log or the audit trail.
    assert SECRET not in sg.log()
    assert all(SECRET not in str(e) for e in sg.events(sid))


def test_receiver_down_for_5s_gets_every_event_once_and_filing_does_not_wait(world):
    sg, receiver = world
    since = len(receiver.snapshot())
    sid = sg.session(allow=[])["id"]
    up = []
    for i in range(5):                # filing latency with the receiver up
        t0 = time.monotonic()
        file_toolcall(sg, sid, f"up-{i}")
        up.append(time.monotonic() - t0)
    assert receiver.wait_for(lambda ds: len(ds) >= since + 5)
    receiver.stop()
    down_at = time.monotonic()
    down, filed = [], []
    for i in range(5):                # ... and with it down
        t0 = time.monotonic()
        filed.append(file_toolcall(sg, sid, f"down-{i}"))
        down.append(time.monotonic() - t0)
    for aid in filed[:2]:
        t0 = time.monotonic()
        assert sg.call("POST", f"/v1/approvals/{aid}/deny", sg.approver, json={"reason": "down"}).ok
        down.append(time.monotonic() - t0)
    time.sleep(max(0.0, 5.0 - (time.monotonic() - down_at)))
    failed = failures(sg)
    assert failed, "a failed delivery is audited"
    assert {e["session"] for e in failed} == {None}, "never in the session's own trail"
    assert not [e for e in sg.events(sid) if e["kind"].startswith("notify.")]
    assert all(receiver.url not in str(e) and SECRET not in str(e) for e in failed)
    receiver.start()                  # back on the same port
    expected = {(a, "approval.filed") for a in filed} | {(a, "approval.denied") for a in filed[:2]}
    assert receiver.wait_for(lambda ds: len(ds) >= since + 5 + len(expected), timeout=60)
    time.sleep(1.5)
    once_each(receiver, expected, since + 5)
    print(f"filing latency, receiver up: max {max(up) * 1000:.1f} ms; down: max {max(down) * 1000:.1f} ms")
    # Generous: a decision never waits for the receiver (its timeout is 10 s, its backoff up to 30 s).
    assert max(down) < 2.0, down


def test_restart_in_the_middle_of_retries_delivers_after_the_restart(world):
    """The module's sandgate is stopped while its deliveries are being retried (the receiver down), and started
    again with the receiver back: each event arrives after the restart, once."""
    sg, receiver = world
    since = len(receiver.snapshot())
    failed_before = len(failures(sg))
    receiver.stop()                   # every attempt fails
    try:
        sid = sg.session(allow=[])["id"]
        filed = [file_toolcall(sg, sid, f"r-{i}") for i in range(3)]
        deadline = time.time() + 20
        while len(failures(sg)) <= failed_before and time.time() < deadline:
            time.sleep(0.2)
        assert len(failures(sg)) > failed_before, "retrying"
        assert sg.stop() == 0
    finally:
        receiver.start()
    sg.start()
    assert receiver.wait_for(lambda ds: len(ds) >= since + 3, timeout=60)
    time.sleep(1.5)
    once_each(receiver, {(a, "approval.filed") for a in filed}, since)
