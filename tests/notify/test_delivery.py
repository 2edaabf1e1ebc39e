"""The deliverer in process, on a real SQLite store and audit log, against a real aiohttp receiver on loopback:
a failure is audited without the URL or the key and retried later; an unreadable key sends nothing unsigned;
the outbox past its cap drops the oldest with an audit row."""
from __future__ import annotations

import asyncio
import json
import ssl
from contextlib import AsyncExitStack

import aiohttp
import pytest

from broker.sources import NOT_FOUND, SecretUnavailable
from gateway.audit.log import AuditLog
from gateway.config import NotifySettings
from gateway.notify.delivery import Notifier, backoff
from gateway.runtime.metrics import Metrics
from gateway.store import Store
from gateway.store.outbox import Outbox
from tests.notify.receiver import Receiver
from tests.support.upstream import make_cert

KEY = "in-process-key-91b2"
ROW = {"id": "a_1", "session": "s_1", "kind": "toolcall", "status": "pending", "binding": "b", "summary": "deploy",
       "action": {"tool": "deploy"}, "reasons": [], "created_at": 1.0, "expires_at": 9e9, "decided_at": None,
       "decided_by": None, "reason": None, "votes": [], "quorum": 1, "used_at": None, "requested_by": "harness:h"}


@pytest.fixture
async def world(tmp_path):
    async with AsyncExitStack() as stack:
        store = Store(f"sqlite:///{tmp_path / 'sandgate.db'}")
        stack.callback(store.close)
        await store.open()
        audit = AuditLog(store)
        audit.start()
        stack.push_async_callback(audit.close)
        http = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)))
        yield store, audit, http


async def put(store: Store, n: int, now: float | None = None) -> None:
    def work() -> None:
        with store.engine.begin() as conn:
            for i in range(n):
                conn.execute(Outbox.entry("approval.filed", {**ROW, "id": f"a_{i}"}, now=now))
    await store.run(work)


async def key() -> str:
    return KEY


def notifier(store, audit, url, key_reader=key, metrics=None, tls=None, **settings) -> Notifier:
    return Notifier(NotifySettings(webhook_url=url, secret="env:K", **settings), Outbox(store), audit, key_reader,
                    tls=tls, metrics=metrics)


async def test_a_failure_is_audited_without_url_or_key_and_retried(world):
    store, audit, http = world
    receiver = Receiver(KEY, status=500).start()
    try:
        await put(store, 3)
        n = notifier(store, audit, receiver.url)
        assert await n.round(http) == "failed"
        assert len(receiver.snapshot()) == 1, "the round stops at the first failure"
        failed = await audit.read(kind="notify.failed")
        assert len(failed) == 1 and failed[0]["session"] is None and failed[0]["detail"]["session"] == "s_1"
        assert failed[0]["reasons"] == ["the receiver answered 500"] and failed[0]["detail"]["attempt"] == 1
        assert receiver.url not in json.dumps(failed) and KEY not in json.dumps(failed)
        # The failed row waits for its backoff; the two given back are due at once.
        assert [r.payload["id"] for r in await Outbox(store, "peek").claim(10)] == ["a_1", "a_2"]
        receiver.status = 200
    finally:
        receiver.stop()


async def test_an_unreachable_receiver_is_a_failure(world):
    store, audit, http = world
    await put(store, 1)
    dead = Receiver(KEY)                     # never started: the connection is refused
    assert await notifier(store, audit, dead.url).round(http) == "failed"
    assert "could not deliver" in (await audit.read(kind="notify.failed"))[0]["reasons"][0]


async def test_an_unreadable_key_sends_nothing(world):
    store, audit, http = world
    receiver = Receiver(KEY).start()
    try:
        await put(store, 1)

        async def missing() -> str:
            raise SecretUnavailable(NOT_FOUND, "env: variable K is not set")
        assert await notifier(store, audit, receiver.url, key_reader=missing).round(http) == "failed"
        assert receiver.snapshot() == []
        assert "signing key is unavailable" in (await audit.read(kind="notify.failed"))[0]["reasons"][0]
    finally:
        receiver.stop()


async def test_delivered_once_then_idle(world):
    store, audit, http = world
    receiver = Receiver(KEY).start()
    try:
        await put(store, 4)
        metrics = Metrics()
        n = notifier(store, audit, receiver.url, metrics=metrics)
        assert await n.round(http) == "sent"
        assert b'sandgate_notify_deliveries_total{result="delivered"} 4.0' in metrics.render()
        assert await n.round(http) == "idle"
        got = receiver.snapshot()
        assert [d.doc["approval"]["id"] for d in got] == ["a_0", "a_1", "a_2", "a_3"]
        assert all(d.signed_ok for d in got) and await Outbox(store).count() == 0
    finally:
        receiver.stop()


async def test_the_outbox_past_its_cap_drops_the_oldest_with_an_audit_row(world):
    store, audit, _ = world
    await put(store, 7)
    metrics = Metrics()
    await notifier(store, audit, "http://127.0.0.1:9/hook", max_outbox=5, metrics=metrics)._trim()
    assert b"sandgate_notify_outbox 5.0" in metrics.render()
    assert b'sandgate_notify_deliveries_total{result="dropped"} 2.0' in metrics.render()
    dropped = await audit.read(kind="notify.dropped")
    assert len(dropped) == 1 and dropped[0]["detail"]["count"] == 2 and dropped[0]["detail"]["why"] == "outbox full"
    assert await Outbox(store).count() == 5


def test_backoff_grows_to_its_cap():
    assert 0.4 <= backoff(1) <= 0.6 and 0.8 <= backoff(2) <= 1.2 and backoff(30) <= 36.0


async def test_https_receiver_verified_against_the_trusted_roots(world, tmp_path):
    """run() dials with the TLS context it is given (app.py: the public roots plus egress.upstream_ca)."""
    store, audit, _ = world
    cert = make_cert(tmp_path / "certs", ["hooks.test"])
    receiver = Receiver(KEY, tls=(cert.cert, cert.key)).start()
    try:
        await put(store, 1)
        untrusted = notifier(store, audit, receiver.url, tls=ssl.create_default_context())
        task = asyncio.create_task(untrusted.run())
        try:
            while not await audit.read(kind="notify.failed"):
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert receiver.snapshot() == []
        assert "Certificate" in (await audit.read(kind="notify.failed"))[0]["reasons"][0]
        await store.run(lambda: store.driver(lambda cur: cur.execute("UPDATE notify_outbox SET next_at = 0"),
                                              commit=True))            # the failed row: due again at once
        trusted = notifier(store, audit, receiver.url, tls=ssl.create_default_context(cafile=cert.cert))
        task = asyncio.create_task(trusted.run())
        try:
            assert await asyncio.wait_for(asyncio.to_thread(receiver.wait_for, lambda ds: len(ds) == 1, 10), 15)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert receiver.snapshot()[0].signed_ok
    finally:
        receiver.stop()


async def test_an_unreadable_event_waits_and_the_others_go(world):
    store, audit, http = world
    receiver = Receiver(KEY).start()
    try:
        def broken() -> None:
            with store.engine.begin() as conn:
                conn.execute(Outbox.entry("approval.filed", {"id": "a_broken"}))      # no kind, no status...
        await store.run(broken)
        await put(store, 2)
        n = notifier(store, audit, receiver.url)
        assert await n.round(http) == "failed"
        assert "cannot be rendered" in (await audit.read(kind="notify.failed"))[0]["reasons"][0]
        assert await n.round(http) == "sent"                   # the readable ones are not held up behind it
        assert [d.doc["approval"]["id"] for d in receiver.snapshot()] == ["a_0", "a_1"]
    finally:
        receiver.stop()


async def test_an_unexpected_error_is_that_events_failure(world):
    store, audit, http = world
    receiver = Receiver(KEY).start()
    try:
        await put(store, 1)

        async def broken() -> str:
            raise RuntimeError("a bug")
        assert await notifier(store, audit, receiver.url, key_reader=broken).round(http) == "failed"
        assert (await audit.read(kind="notify.failed"))[0]["reasons"] == ["internal error"]
        assert receiver.snapshot() == [] and await Outbox(store).count() == 1
    finally:
        receiver.stop()
