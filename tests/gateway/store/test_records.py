"""The store's records (gateway/store/records.py): frozen values, their fields in their table's column order, the
JSON object at the edges, a read-only mapping view; and the store hands them out."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping

import pytest

from gateway.store.models import ApprovalRow, RevocationRow, SessionRow
from gateway.store.records import Approval, AuditEvent, Revocation, Session, ToolCallRecord, Vote
from gateway.store.store import Store


def session(**kw) -> Session:
    return Session(**{"id": "s_1", "workload": "ephemeral", "created_at": 1.0, "expires_at": 2.0, **kw})


@pytest.mark.parametrize("record, table", [(Session, SessionRow), (Approval, ApprovalRow),
                                           (Revocation, RevocationRow)])
def test_fields_are_the_columns_in_order(record, table):
    assert record.FIELDS == tuple(table.model_fields)


def test_the_event_records_are_what_the_store_reads():
    assert AuditEvent.FIELDS == Store._EVENT_READ_COLS
    assert ToolCallRecord.FIELDS == Store._RECENT_COLS


def test_a_record_is_frozen_and_replace_makes_a_new_one():
    s = session()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.frozen = True                                     # type: ignore[misc]
    with pytest.raises(TypeError):
        s["frozen"] = True                                  # type: ignore[index]
    t = s.replace(frozen=True)
    assert (s.frozen, t.frozen, t.id) == (False, True, "s_1")


def test_to_json_is_the_row_as_json_and_from_row_reads_it_back():
    s = session(labels={"team": "pay"}, allow=["pypi.org"])
    doc = s.to_json()
    assert list(doc) == list(Session.FIELDS) and doc["labels"] == {"team": "pay"}
    assert json.loads(json.dumps(doc)) == doc
    assert Session.from_row({**doc, "not_a_column": 1}) == s


def test_the_mapping_view_reads_the_fields():
    s = session()
    assert isinstance(s, Mapping)
    assert (s["id"], s.get("workload"), s.get("nope", 7), "labels" in s, "nope" in s) == (
        "s_1", "ephemeral", 7, True, False)
    with pytest.raises(KeyError):
        s["nope"]
    assert dict(s) == {**s} == s.to_json() and len(s) == len(Session.FIELDS)
    assert s == s.to_json() and s != {**s.to_json(), "frozen": True}
    assert s != session(frozen=True)


def test_an_approval_gives_its_votes_as_records():
    a = Approval(id="a_1", session="s_1", kind="toolcall", binding="b", created_at=1.0, expires_at=2.0,
                 votes=[{"by": "approver:a", "verdict": "approve", "at": 1.5}])
    assert a.ballots == (Vote(by="approver:a", verdict="approve", at=1.5),)


async def test_the_store_hands_out_records(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'sandgate.db'}")
    try:
        await store.open()
        now = time.time()
        put = await store.put_session(SessionRow(id="s_1", workload="ephemeral", created_at=now,
                                                 expires_at=now + 60))
        assert isinstance(put, Session) and await store.get_session("s_1") == put
        assert await store.list_sessions() == [put]
        updated = await store.update_session("s_1", frozen=True)
        assert isinstance(updated, Session) and updated.frozen and updated.updated_at >= now
        approval = await store.put_approval(ApprovalRow(id="a_1", session="s_1", kind="toolcall", binding="b",
                                                        created_at=now, expires_at=now + 60))
        assert isinstance(approval, Approval) and approval.status == "pending"
        assert await store.get_approval("a_1") == approval and await store.list_approvals() == [approval]
        revoked = await store.revoke("jti-1", "admin:x")
        assert isinstance(revoked, Revocation) and await store.list_revocations() == [revoked]
        await store.append_events([{"ts": now, "session": "s_1", "kind": "toolcall", "action": "allow",
                                    "reasons": [], "codes": ["c"], "request_id": "t_1", "detail": {"tool": "shell"},
                                    "step": None, "method": None, "host": None, "path": None,
                                    "http_status": None, "bytes_in": None, "bytes_out": None, "policy_rev": None}])
        [event] = await store.list_events(session="s_1")
        assert isinstance(event, AuditEvent) and (event.seq, event.codes, event.detail) == (1, ["c"], {"tool": "shell"})
        [call], _ = await store.toolcall_memory("s_1", 20)
        assert isinstance(call, ToolCallRecord) and call.request_id == "t_1" and call.detail == {"tool": "shell"}
    finally:
        store.close()
