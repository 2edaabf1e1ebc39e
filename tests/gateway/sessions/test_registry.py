"""SessionRegistry in process, against a real SQLite store (no sockets): one write sequence (row, cache,
placeholder registry) for local changes and for changes another replica made."""
from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from gateway.approvals.rules import binding_hash
from gateway.approvals.queue import ApprovalRequest
from tests.support.services import open_services

SECRETS = {"github": {"source": "env:GH", "hosts": ["api.github.test"]}}


@pytest.fixture
async def pair(tmp_path):
    """Two replicas' services on one store."""
    async with AsyncExitStack() as stack:
        one = await open_services(stack, tmp_path / "one", secrets=SECRETS, environ={"GH": "ghp_" + "R" * 36})
        two = await open_services(stack, tmp_path / "two", secrets=SECRETS, environ={"GH": "ghp_" + "R" * 36},
                                  store=one.store)
        yield one, two


async def test_create_registers_the_session_and_its_placeholders(pair):
    one, _ = pair
    row, _ = await one.session(secrets=["github"], allow=["api.github.test"])
    placeholder = row["placeholders"]["github"]
    assert (await one.sessions.live(row["id"]))["id"] == row["id"] == one.sessions.live_now(row["id"])["id"]
    assert one.placeholders.find(f"token {placeholder}") == {(row["id"], "github")}
    assert await one.store.get_session(row["id"]) == row
    created = await one.events(row["id"], kind="session.created")
    assert created[0]["detail"]["secrets"] == ["github"] and created[0]["detail"]["by"] == "harness:test"


async def test_patch_changes_the_row_and_the_cached_view(pair):
    one, _ = pair
    row, _ = await one.session()
    updated = await one.sessions.patch(row["id"], {"frozen": True}, "harness:test")
    assert updated["frozen"] and one.sessions.live_now(row["id"])["frozen"]
    assert (await one.store.get_session(row["id"]))["frozen"]
    assert [e["detail"]["frozen"] for e in await one.events(row["id"], kind="session.updated")] == [True]


async def test_delete_ends_token_placeholders_and_pending_approvals_at_once(pair):
    one, _ = pair
    row, _ = await one.session(secrets=["github"])
    placeholder = row["placeholders"]["github"]
    item = (await one.approvals.request_approval(ApprovalRequest(
        session=row, session_id=row["id"], kind="toolcall", binding=binding_hash(row["id"], "toolcall", "x", "{}"),
        summary="x", action={}, reasons=[], requested_by="harness:test", used_by="harness:test"))).row
    await one.sessions.delete(row, "harness:test")
    assert await one.sessions.live(row["id"]) is None and one.sessions.live_now(row["id"]) is None
    assert not one.placeholders.find(placeholder)
    assert (await one.approvals.get(item["id"]))["status"] == "cancelled"
    kinds = [e["kind"] for e in await one.events(row["id"])]
    assert kinds.index("approval.cancelled") < kinds.index("session.deleted")
    await one.sessions.delete(await one.store.get_session(row["id"]), "harness:test")     # idempotent
    assert [e["kind"] for e in await one.events(row["id"])].count("session.deleted") == 1


async def test_a_session_created_on_another_replica_is_read_once(pair):
    one, two = pair
    row, _ = await one.session(secrets=["github"])
    assert two.sessions.live_now(row["id"]) is None                     # not seen yet
    assert (await two.sessions.live(row["id"]))["id"] == row["id"]       # read from the store, then cached
    assert two.placeholders.find(row["placeholders"]["github"]) == {(row["id"], "github")}


async def test_refresh_brings_another_replicas_changes(pair):
    one, two = pair
    row, _ = await one.session(secrets=["github"])
    await two.sessions.live(row["id"])
    await one.sessions.patch(row["id"], {"frozen": True}, "harness:test")
    await two.sessions.refresh()
    assert two.sessions.live_now(row["id"])["frozen"]
    await one.sessions.delete(await one.store.get_session(row["id"]), "harness:test")
    await two.sessions.refresh()
    assert two.sessions.live_now(row["id"]) is None
    assert not two.placeholders.find(row["placeholders"]["github"])


async def test_apply_keeps_the_newer_row(pair):
    one, _ = pair
    row, _ = await one.session()
    newer = await one.sessions.patch(row["id"], {"labels": {"v": "2"}}, "harness:test")
    one.sessions.apply(row.replace(labels={"v": "old"}, updated_at=row["updated_at"] - 1))   # a stale notice
    assert one.sessions.live_now(row["id"])["labels"] == {"v": "2"}
    one.sessions.apply(newer.replace(labels={"v": "3"}, updated_at=newer["updated_at"] + 1))
    assert one.sessions.live_now(row["id"])["labels"] == {"v": "3"}


async def test_counters_and_steps_reach_the_policy_view(pair):
    one, _ = pair
    row, _ = await one.session()
    one.sessions.count(row["id"], requests=2, denied=1)
    one.sessions.set_step(row["id"], 7)
    assert one.sessions.with_stats(row)["stats"]["requests"] == 2 and one.sessions.step(row["id"]) == 7
    assert one.sessions.count_live() == 1


async def test_counters_are_summed_over_replicas(pair):
    """Each replica counts what it served; a sync adds that to the shared totals and reads them back, so a
    policy's `session.stats` covers the whole session wherever its requests went."""
    one, two = pair
    row, _ = await one.session()
    await two.sessions.live(row["id"])                 # two learns the session (as its proxy would)
    one.sessions.count(row["id"], requests=3, denied=1, bytes_out=10)
    two.sessions.count(row["id"], requests=2, toolcalls=1, bytes_out=5)
    assert one.sessions.with_stats(row)["stats"]["requests"] == 3
    await one.sessions.sync_stats()
    await two.sessions.sync_stats()
    await one.sessions.sync_stats()
    want = {"requests": 5, "denied": 1, "asked": 0, "bytes_out": 15, "bytes_in": 0, "toolcalls": 1}
    assert one.sessions.with_stats(row)["stats"] == want == two.sessions.with_stats(row)["stats"]
    one.sessions.count(row["id"], requests=1)          # counted after the sync: visible here at once
    assert one.sessions.with_stats(row)["stats"]["requests"] == 6
    await one.sessions.sync_stats()
    await one.sessions.sync_stats()                    # nothing new: the totals stay
    assert one.sessions.with_stats(row)["stats"]["requests"] == 6


def test_counts_in_flight_stay_visible_and_survive_a_failed_write():
    from gateway.sessions.registry import SessionCache

    cache = SessionCache()
    cache.count("s", requests=2)
    sent = cache.take_counts()
    assert sent == {"s": {"requests": 2, "denied": 0, "asked": 0, "bytes_out": 0, "bytes_in": 0, "toolcalls": 0}}
    cache.count("s", requests=1)
    assert cache.stats_of("s")["requests"] == 3        # in flight + pending
    cache.settle({}, written=False)                    # the store refused: nothing is lost
    assert cache.stats_of("s")["requests"] == 3
    cache.take_counts()
    cache.settle({"s": {"requests": 10}}, written=True)  # other replicas' counts arrive with ours
    assert cache.stats_of("s")["requests"] == 10


# -- source-address bindings (transparent capture) -------------------------------------------------------
async def test_a_source_binding_names_the_session_until_it_ends(pair):
    one, two = pair
    row, token = await one.session()
    principal = one.tokens.verify(token)
    one.sessions.bind_source(row["id"], "10.200.0.2", principal)
    bound = one.sessions.by_source("10.200.0.2")
    assert bound is not None and bound[0]["id"] == row["id"] and bound[1] == principal
    assert one.sessions.source_of(row["id"]) == "10.200.0.2"
    assert one.sessions.by_source("10.200.0.6") is None
    assert two.sessions.by_source("10.200.0.2") is None          # a binding is this process's only
    assert [e["detail"] for e in await one.events(row["id"], kind="session.updated")] == [{"source": "10.200.0.2"}]
    await one.sessions.delete(row, "harness:test")
    assert one.sessions.by_source("10.200.0.2") is None and one.sessions.source_of(row["id"]) is None


async def test_a_source_is_held_by_one_live_session(pair):
    from gateway.sessions.registry import SourceInUse
    one, _ = pair
    first, t1 = await one.session()
    second, t2 = await one.session()
    one.sessions.bind_source(first["id"], "10.200.0.2", one.tokens.verify(t1))
    with pytest.raises(SourceInUse):
        one.sessions.bind_source(second["id"], "10.200.0.2", one.tokens.verify(t2))
    with pytest.raises(SourceInUse):                             # one address per session
        one.sessions.bind_source(first["id"], "10.200.0.6", one.tokens.verify(t1))
    await one.sessions.delete(first, "harness:test")             # the address is free once its session ended
    one.sessions.bind_source(second["id"], "10.200.0.2", one.tokens.verify(t2))
    assert one.sessions.by_source("10.200.0.2")[0]["id"] == second["id"]
    with pytest.raises(KeyError):                                # an ended session cannot be bound
        one.sessions.bind_source(first["id"], "10.200.0.10", one.tokens.verify(t1))


async def test_a_binding_ends_when_another_replica_ends_the_session_or_it_expires(pair):
    one, two = pair
    row, token = await one.session()
    one.sessions.bind_source(row["id"], "10.200.0.2", one.tokens.verify(token))
    await two.sessions.delete(row, "harness:test")
    await one.sessions.refresh()
    assert one.sessions.by_source("10.200.0.2") is None
    short, token = await one.session(ttl_s=1)
    one.sessions.bind_source(short["id"], "10.200.0.6", one.tokens.verify(token))
    await one.sessions.patch(short["id"], {"expires_at": short["created_at"]}, "harness:test")
    assert one.sessions.by_source("10.200.0.6") is None and one.sessions.source_of(short["id"]) is None
