"""The tool-call gate in process, on a real SQLite store and the embedded engine with the shipped policies (plus a
site rule where a test says so): the approval binding includes the way a call came (`via`), `input.via`, who may
ask, and the refusals adapters map to their answers."""
from __future__ import annotations

import shutil
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from gateway.approvals.rules import binding_hash, canonical_json
from gateway.auth.tokens import Principal
from gateway.gates.toolcall import ToolCallRefused, ToolCallRequest
from tests.support.services import open_services

ROOT = Path(__file__).resolve().parents[3]
HARNESS = Principal("harness", "h")
DROP = {"query": "DROP TABLE orders", "database": "prod"}
SITE_RULE = """package sandgate.toolcall

deny contains {"code": "site.no_wire_drop", "reason": "no DROP over the wire"} if {
\tinput.via == "postgres"
\tcontains(input.tool.args.query, "DROP")
\tinput.session.labels.strict == "yes"
}
"""


@pytest.fixture
async def env(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        yield svc, svc.toolcalls


def sql(sid: str, via: str = "api", principal: Principal | None = HARNESS, **args) -> ToolCallRequest:
    return ToolCallRequest(session=sid, tool="sql", args={**DROP, **args}, via=via, principal=principal)


@pytest.mark.parametrize("first, second", [("api", "postgres"), ("postgres", "api")])
async def test_an_approved_call_lets_through_only_the_same_call_by_the_same_way(env, first, second):
    svc, gate = env
    session, _ = await svc.session(by="harness:h")
    asked = await gate.decide(sql(session["id"], first))
    assert asked.action == "ask" and asked.approval_id
    await svc.approvals.decide(asked.approval_id, "approver:alice", "approve", None)
    other = await gate.decide(sql(session["id"], second))          # the same statement, the other way in
    assert other.action == "ask" and other.approval_id != asked.approval_id and not other.reused
    again = await gate.decide(sql(session["id"], first))           # the way it was approved for: once
    assert (again.action, again.reused, again.approval_id) == ("allow", True, asked.approval_id)
    assert again.codes[-1] == "approval.approved" and again.reasons[-1] == "approved by approver:alice"
    assert (await gate.decide(sql(session["id"], first))).action == "ask"     # used once


async def test_the_binding_hash_counts_via_only_when_given():
    canonical = canonical_json(DROP)
    plain = binding_hash("s_1", "toolcall", "sql", canonical)
    assert plain == binding_hash("s_1", "toolcall", "sql", canonical, via=None)
    assert binding_hash("s_1", "toolcall", "sql", canonical, via="postgres") != plain
    assert binding_hash("s_1", "toolcall", "sql", canonical, via="postgres") != binding_hash(
        "s_1", "toolcall", "sql", canonical, via="mcp")


async def test_the_policy_sees_via_and_the_approval_and_audit_name_it(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (policies / "site_via.rego").write_text(SITE_RULE)
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path / "svc", config={"policy": {"dir": str(policies)}})
        gate = svc.toolcalls
        session, _ = await svc.session(by="harness:h", labels={"strict": "yes"})
        wire = await gate.decide(sql(session["id"], "postgres", principal=None))
        assert (wire.action, wire.codes) == ("deny", ("site.no_wire_drop",))
        assert (await gate.decide(sql(session["id"]))).action == "ask"       # no input.via on the API's calls
        lenient, _ = await svc.session(by="harness:h")
        held = await gate.decide(sql(lenient["id"], "postgres", principal=None))
        item = await svc.approvals.get(held.approval_id)
        assert item["action"] == {"tool": "sql", "args": DROP, "via": "postgres",       # what sandgate computed
                                  "effects": ["runs SQL DROP"], "codes": ["toolcall.delete"]}  # rides along
        assert item["requested_by"] == f"session:{lenient['id']}"
        assert item["summary"].startswith("postgres sql: DROP TABLE orders")
        await svc.audit.flush()
        rows = [e for e in await svc.events(lenient["id"], "toolcall")]
        assert [(r["request_id"], r["action"], r["detail"]["via"]) for r in rows] == [(held.id, "ask", "postgres")]


async def test_who_may_ask_and_what_is_refused(env):
    svc, gate = env
    session, _ = await svc.session(by="harness:h")
    sid = session["id"]
    with pytest.raises(ToolCallRefused) as other:
        await gate.decide(sql(sid, principal=Principal("harness", "someone-else")))
    assert other.value.code == "not_found"
    assert (await gate.decide(sql(sid, principal=Principal("admin", "root")))).action == "ask"
    with pytest.raises(ToolCallRefused) as missing:
        await gate.decide(sql("s_0000000000000000"))
    assert missing.value.code == "not_found"
    with pytest.raises(ToolCallRefused) as empty:
        await gate.decide(sql(""))
    assert empty.value.code == "bad_request"
    with pytest.raises(ToolCallRefused) as via:
        await gate.decide(sql(sid, "telnet"))
    assert via.value.code == "bad_request"
    with pytest.raises(ToolCallRefused) as large:
        await gate.decide(sql(sid, query="x" * 300_000))
    assert large.value.code == "too_large"
    await svc.sessions.delete(session, "harness:h")
    with pytest.raises(ToolCallRefused) as ended:
        await gate.decide(sql(sid))
    assert ended.value.code == "session_ended"
    await svc.audit.flush()
    assert [e for e in await svc.events(sid, "toolcall")] and all(
        e["request_id"] != "" for e in await svc.events(sid, "toolcall"))


async def test_a_refusal_records_nothing_and_an_audit_outage_refuses(env, monkeypatch):
    svc, gate = env
    session, _ = await svc.session(by="harness:h")
    monkeypatch.setattr(type(svc.audit), "accepting", property(lambda self: False))
    with pytest.raises(ToolCallRefused) as refused:
        await gate.decide(sql(session["id"]))
    assert refused.value.code == "audit.unavailable"
    monkeypatch.undo()
    await svc.audit.flush()
    assert await svc.events(session["id"], "toolcall") == []
    assert svc.sessions.with_stats(session)["stats"]["toolcalls"] == 0


async def test_each_call_sees_its_session_as_built_whole(env, monkeypatch):
    """The gate keeps each session's input between calls and sets only its age and counters per call: every
    input is still what build_session_input makes of the session as it is at that call (its counters with the
    call counted, a freeze, new labels, a budget spent), and one session's kept input never serves another."""
    from gateway.policy.cache import Patched
    from gateway.policy.inputs import build_session_input

    svc, gate = env
    registry, engine = svc.built.sessions, svc.built.engine
    seen: list[tuple[dict, dict]] = []
    decide = engine.decide

    async def spy(kind, doc, request_id=None):
        row = registry.live_now(doc["session"]["id"])
        now = float(row.created_at) + doc["session"]["age_s"]
        seen.append((doc["session"], build_session_input(registry.with_stats(row, counted="toolcalls"), now)))
        return await decide(kind, doc, request_id)

    monkeypatch.setattr(engine, "decide", spy)
    one, _ = await svc.session(by="harness:h", budgets={"toolcalls": 3})
    two, _ = await svc.session(by="harness:h", labels={"team": "b"})
    ls = ToolCallRequest(session=one["id"], tool="shell", args={"command": "ls"}, principal=HARNESS)
    for _ in range(4):                                  # the third spends the budget: the fourth sees it spent
        await gate.decide(ls)
    await gate.decide(ToolCallRequest(session=two["id"], tool="shell", args={"command": "ls"}, principal=HARNESS))
    await registry.patch(one["id"], {"frozen": True, "labels": {"team": "c"}}, "test")
    await gate.decide(ls)
    await gate.decide(ls)
    assert len(seen) == 7
    for got, whole in seen:
        assert type(got) is Patched and list(got) == list(whole) and abs(got["age_s"] - whole["age_s"]) < 1e-6
        assert {**got, "age_s": 0} == {**whole, "age_s": 0}
    sessions = [got for got, _ in seen]
    assert [s["stats"]["toolcalls"] for s in sessions] == [1, 2, 3, 4, 1, 5, 6]
    assert [s["budgets_spent"] for s in sessions] == [[], [], [], ["toolcalls"], [], ["toolcalls"], ["toolcalls"]]
    assert [(s["frozen"], s["labels"]) for s in sessions[4:]] == [
        (False, {"team": "b"}), (True, {"team": "c"}), (True, {"team": "c"})]
    assert sessions[1].base is sessions[2].base and sessions[3].base is not sessions[2].base   # spent: rebuilt
    assert sessions[5].base is not sessions[3].base and sessions[6].base is sessions[5].base  # patched: rebuilt
