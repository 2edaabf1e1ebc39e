"""The writer process (gateway/store/offload.py): audit and decision-log rows written by a process of their own
are the rows the store's writer thread writes (the same chain, the same redacted inputs), a flush returns with
them stored, a dead writer process fails closed like an unreachable store and is started again, and a clean
stop writes everything."""
from __future__ import annotations

import asyncio
import json
import os
import signal

from gateway.audit.log import AuditLog
from gateway.audit.verify import verify_trail
from gateway.policy.cache import Shared, Stamped, patch
from gateway.policy.decisionlog import REDACTED, DecisionLog
from gateway.store import Store
from gateway.store.offload import WriterProcess, target_of
from gateway.store.trail import TrailStore

SECRET = "sk-live-" + "7" * 24


class NotMarshal(dict):
    """A dict subclass in a row's detail: marshal cannot carry it (the row goes as its stored values)."""


def _events(n: int, tag: str = "") -> list[dict]:
    rows = []
    for i in range(n):
        detail: dict = {"i": i, "t": (1, "two"), "s": "é\u2028" + tag}
        if i % 7 == 3:
            detail["odd"] = NotMarshal(a=[1, 2])
        rows.append({"session": None if i % 5 == 0 else f"s{i % 3}", "kind": "tool_call" if i % 2 else "sql",
                     "action": "allow", "reasons": [f"r{i}"], "codes": ["c"], "detail": detail, "step": i,
                     "http_status": 200, "bytes_in": i * 10, "ts": 1_700_000_000.0 + i})
    return rows


def _comparable(events: list) -> list[dict]:
    return [{k: v for k, v in e.to_json().items() if k not in ("id",)} for e in events]


async def _open(path) -> Store:
    store = Store(f"sqlite:///{path}")
    await store.open()
    return store


async def test_audit_rows_through_the_process_are_the_threads_rows_and_the_chain_verifies(tmp_path):
    by_thread, by_process = await _open(tmp_path / "t.db"), await _open(tmp_path / "p.db")
    offload = WriterProcess(target_of(by_process))
    try:
        one = AuditLog(by_thread, flush_interval_s=3600)
        two = AuditLog(by_process, flush_interval_s=3600, offload=offload)
        for log in (one, two):
            for row in _events(250):
                log.record(row.pop("kind"), **row)
            assert await log.flush()
            for row in _events(3, tag="again"):
                log.record(row.pop("kind"), **row)
            assert len(log.queued(("sql", "tool_call"), "s1")) == 1     # recorded, not yet written: readers see it
            assert await log.flush() and log.pending == 0
        assert offload.pid is not None and offload.starts == 1
        assert _comparable(await two.events()) == _comparable(await one.events())
        assert len(await two.events()) == 253
        for store in (by_thread, by_process):
            verdict = await store.run(verify_trail, TrailStore(store), [])
            assert verdict.ok and verdict.checked == 253, verdict
    finally:
        await offload.close()
        by_thread.close()
        by_process.close()
    assert offload.pid is None


def _decision_input(i: int, history: list) -> dict:
    session = patch(Shared({"id": "s1", "secrets": ["github"], "age_s": 0.0}), {"age_s": i / 2}, frozenset({"age_s"}))
    return {"session": session, "step": i,
            "tool": {"name": "shell", "args": {"command": f"curl -H 'Authorization: Bearer {SECRET}' https://x/"
                                               if i % 4 == 0 else f"ls {i}"}},
            "facts": Shared({"verb": "ls", "n": i % 3}), "history": list(history), "password": SECRET}


async def test_decision_rows_through_the_process_are_the_threads_rows_with_secrets_redacted(tmp_path):
    by_thread, by_process = await _open(tmp_path / "t.db"), await _open(tmp_path / "p.db")
    offload = WriterProcess(target_of(by_process))
    try:
        logs = [DecisionLog(by_thread, flush_interval_s=3600),
                DecisionLog(by_process, flush_interval_s=3600, offload=offload)]
        bases = [Shared({"summary": f"shell: ls {i}" + (f" token={SECRET}" if i == 5 else ""), "age_s": 0.0})
                 for i in range(30)]
        for log in logs:
            for i in range(30):
                history = [Stamped(b, "age_s", float(i - j)) for j, b in enumerate(bases[max(0, i - 20):i])]
                log.record("tool_call", _decision_input(i, history), {"action": "allow", "codes": [str(i)]},
                           "rev1", "embedded", 12 + i, f"d{i}", ts=1_700_000_000.0 + i, request_id=f"r{i}")
                if i == 12:
                    assert await log.flush()
            log.record("tool_call", [1, "x"], {"action": "deny"}, "rev1", "embedded", 1, "d-list", ts=1.0)
            # a Shared part below the top level: marshal cannot carry it, this batch goes as JSON text
            log.record("sql", {"deep": {"facts": Shared({"token": SECRET})}}, {"action": "allow"}, "rev1", "e", 2,
                       "d-deep", ts=2.0)
            log.record_divergence("d3", "tool_call", {"password": SECRET, "x": 1}, {"action": "allow"},
                                  {"action": "deny"}, "rev1", "rev2")
            assert await log.flush()
        want, got = await logs[0].store.list_decisions(), await logs[1].store.list_decisions()
        assert offload.counts == {"text_batches": 1}
        assert len(got) == 32 and [r["input"] for r in got] == [r["input"] for r in want]
        strip = ("seq",)
        assert [{k: v for k, v in r.items() if k not in strip} for r in got] == \
               [{k: v for k, v in r.items() if k not in strip} for r in want]
        assert got[0]["input"]["password"] == REDACTED and got[6]["input"]["history"][-1]["summary"].endswith(
            "token=" + REDACTED)
        assert SECRET not in json.dumps(got) and SECRET not in json.dumps(await logs[1].store.list_divergences())
    finally:
        await offload.close()
        by_thread.close()
        by_process.close()


async def test_a_dead_writer_process_fails_closed_and_the_next_one_writes_the_rows(tmp_path):
    """A death with no batch in flight costs nothing (the next write starts a new process); one in the middle of
    a write fails that write, like an unreachable store."""
    store = await _open(tmp_path / "s.db")
    offload = WriterProcess(target_of(store))
    log = AuditLog(store, flush_interval_s=3600, max_pending=40, offload=offload)
    try:
        for row in _events(10):
            log.record(row.pop("kind"), **row)
        assert await log.flush()
        first = offload.pid
        os.kill(first, signal.SIGSTOP)
        for row in _events(10, tag="while dead"):
            log.record(row.pop("kind"), **row)
        flushing = asyncio.create_task(log.flush(everything=False))
        await asyncio.sleep(0.3)
        assert not flushing.done() and log.pending == 10
        os.kill(first, signal.SIGKILL)          # dies with the batch in flight
        # The write fails: the rows stay queued (readers see them), "degraded"; decisions go on until max_pending.
        assert not await flushing
        assert log.pending == 10 and log.status == "degraded" and log.accepting
        assert len(log.queued(("sql", "tool_call"), "s1")) == len([r for r in _events(10) if r["session"] == "s1"])
        # The next flush starts a new process and writes them, in order, chained.
        assert await log.flush() and log.pending == 0 and log.status == "ok"
        assert offload.starts == 2 and offload.pid not in (None, first)
        events = await log.events()
        assert [e.detail["s"] for e in events] == ["é\u2028"] * 10 + ["é\u2028while dead"] * 10
        verdict = await store.run(verify_trail, TrailStore(store), [])
        assert verdict.ok and verdict.checked == 20
    finally:
        await log.close()
        await offload.close()
        store.close()


async def test_no_writer_process_no_decisions_once_the_rows_pile_up(tmp_path):
    """A writer process that cannot start (here: its store is a directory that went away) is a store that
    cannot be written: rows wait, then the audit log stops accepting, and the gateway refuses requests."""
    store = await _open(tmp_path / "s.db")
    offload = WriterProcess(("sqlite", str(tmp_path / "gone" / "s.db")))
    log = AuditLog(store, flush_interval_s=3600, max_pending=25, offload=offload)
    try:
        for row in _events(30):
            log.record(row.pop("kind"), **row)
        assert not await log.flush()
        assert log.pending == 30 and not log.accepting and log.status == "refusing"
        assert await store.list_events() == []
    finally:
        await offload.close()
        store.close()


async def test_close_writes_everything_and_stops_the_process(tmp_path):
    store = await _open(tmp_path / "s.db")
    offload = WriterProcess(target_of(store))
    audit = AuditLog(store, flush_interval_s=3600, offload=offload)
    decisions = DecisionLog(store, flush_interval_s=3600, offload=offload)
    audit.start()
    decisions.start()
    for row in _events(120):
        audit.record(row.pop("kind"), **row)
    for i in range(700):
        decisions.record("sql", {"session": {"id": "s"}, "q": f"SELECT {i}"}, {"action": "allow"}, "r", "e", 1,
                         f"d{i}", ts=float(i))
    assert await audit.close() and await decisions.close()
    pid = offload.pid
    await offload.close()
    assert offload.pid is None and pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("the writer process is still running")
    assert len(await store.list_events()) == 120
    assert len(await decisions.store.list_decisions()) == 700
    store.close()


def test_only_a_store_another_process_can_open_gets_a_writer_process(tmp_path):
    assert target_of(Store("sqlite://")) is None
    assert target_of(Store("sqlite:///:memory:")) is None
    assert target_of(Store(f"sqlite:///{tmp_path}/s.db")) == ("sqlite", str(tmp_path / "s.db"))
