"""HoldAddon in process (`taddons`/`tflow`) with the drain `serve` gives it: an ask counts as held (what the drain
waits for) from before its approval can be seen until it is answered."""
from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest
from mitmproxy import flow, http
from mitmproxy.test import taddons

from gateway.egress.flows import flow_state
from tests.gateway.egress.test_addon import LOOPBACK, NAMES, make_flow
from tests.support.services import egress_addons, open_services
from tests.support.waiting import until


@pytest.fixture
async def world(tmp_path):
    async with AsyncExitStack() as stack:
        svc = await open_services(stack, tmp_path)
        addons = await egress_addons(stack, svc, LOOPBACK, NAMES)
        yield svc, addons


@pytest.mark.parametrize("answer", ["response", "error"])
async def test_an_ask_filed_as_the_drain_begins_is_held_until_its_approval_is_answered(world, monkeypatch, answer):
    """SIGTERM right after the ask's approval is stored (an approver can see it, `serve --workers`' other worker
    lists it) but before the hold waits on it. `_drain` (gateway/app.py) waits only while `drain.held` is non-zero:
    the ask must count from then, or the process stops at once and cuts the request an approver is about to
    release (what made `test_serve_workers_drain_each_worker_on_sigterm` fail under load); and once released it
    counts until its answer passes the response hook (or the error hook), or the stop cuts it on its way."""
    svc, addons = world
    drain, queue = addons.drain, svc.built.approvals
    _, token = await svc.session(allow=["allowed.test"])
    seen: dict = {}
    filed = queue.request_approval

    async def filed_then_sigterm(req):
        ticket = await filed(req)
        drain.begin()                       # the signal: `_drain` reads `drain.held` next
        seen["held"], seen["id"] = drain.held, ticket.row.id
        return ticket

    monkeypatch.setattr(queue, "request_approval", filed_then_sigterm)
    with taddons.context(addons.egress, addons.hold):
        f = make_flow("http://allowed.test/thing", method="DELETE", token=token)
        await addons.egress.requestheaders(f)
        assert f.response is None and flow_state(f).ask
        held = asyncio.create_task(addons.hold.request(f))
        assert await until(lambda: "held" in seen)
        assert seen["held"] == 1                            # counted: the drain waits for it
        settled = asyncio.create_task(drain.settle(60, asyncio.Event()))
        assert (await queue.get(seen["id"])).status == "pending"
        assert await queue.decide(seen["id"], "user:alice", "approve", None) is not None
        await asyncio.wait_for(held, 30)
        assert f.response is None                           # released: forwarded, not answered 503
        assert flow_state(f).approved_by == "user:alice"
        await asyncio.sleep(0.2)                            # settle polls every 50 ms
        assert drain.held == 1 and not settled.done()       # on its way upstream: still waited for
        if answer == "response":
            f.response = http.Response.make(200, b"done")
            addons.hold.response(f)
        else:
            f.error = flow.Error("connection closed")
            addons.hold.error(f)
        assert await asyncio.wait_for(settled, 30) == 0     # answered: nothing held any more
        assert drain.held == 0


async def test_an_answered_ask_is_not_held(world):
    """Outside a drain too: a released ask leaves the count once answered, an ask denied at once never enters it."""
    svc, addons = world
    drain, queue = addons.drain, svc.built.approvals
    _, token = await svc.session(allow=["allowed.test"])
    with taddons.context(addons.egress, addons.hold):
        f = make_flow("http://allowed.test/thing", method="DELETE", token=token)
        await addons.egress.requestheaders(f)
        held = asyncio.create_task(addons.hold.request(f))
        assert await until(lambda: drain.held == 1 and flow_state(f).approval_id)
        assert await queue.decide(flow_state(f).approval_id, "user:alice", "deny", "no") is not None
        await asyncio.wait_for(held, 30)
        assert f.response.status_code == 403 and drain.held == 0
