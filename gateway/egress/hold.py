"""Holding an "ask" egress request until a person decides (or `egress.hold_timeout_s` runs out).

The `request` hook (body read, up to `inspect_max_bytes`) asks through the approval queue's one
`request_approval`: an approved, unused item for the same action lets it through once; otherwise it waits on the
filed item and is forwarded or answered 403. Held items are tracked per client connection (a WeakKeyDictionary,
like mitmproxy's own per-connection state): a client that disconnects while held cancels its items.
A restart is not a disconnect: items stay pending. While sandgate drains (gateway/runtime/drain.py) a new ask is
answered 503 `sandgate.stopping` at once, and held requests still undecided when it stops get the same answer.
"""
from __future__ import annotations

import asyncio
import weakref

from mitmproxy import connection, http

from broker.registry import PlaceholderRegistry
from gateway.approvals.queue import ApprovalQueue, ApprovalRequest, TooManyPending
from gateway.config import EgressSettings
from gateway.egress.binding import aws_binding, binding_headers, egress_action, egress_binding
from gateway.egress.flows import FlowState, flow_state
from gateway.egress.guard import fail_closed
from gateway.egress.limits import HeldLimits
from gateway.egress.recorder import FlowRecorder
from gateway.runtime.drain import Drain
from gateway.sessions.registry import SessionRegistry

STOPPING_NEW = "sandgate is stopping: approval required, but nothing new is held now; retry shortly"
STOPPING_HELD = ("sandgate stopped before this request was decided; its approval stays pending: once approved, "
                 "the same request sent again is let through once")


class HoldAddon:
    def __init__(self, queue: ApprovalQueue, sessions: SessionRegistry, placeholders: PlaceholderRegistry,
                 recorder: FlowRecorder, settings: EgressSettings, limits: HeldLimits, drain: Drain | None = None):
        self._drain = drain or Drain()
        self._queue = queue
        self._sessions = sessions
        self._placeholders = placeholders
        self._recorder = recorder
        self._settings = settings
        self._limits = limits
        self.held: "weakref.WeakKeyDictionary[connection.Client, set[str]]" = weakref.WeakKeyDictionary()
        self.held_aws: "weakref.WeakKeyDictionary[connection.Client, set[int]]" = weakref.WeakKeyDictionary()
        self.gone: set[int] = set()                 # held AWS calls whose client left (never forwarded)
        self._tasks: set[asyncio.Task] = set()

    def deny(self, flow: http.HTTPFlow, code: str, reason: str) -> None:
        self._recorder.deny(flow, code, reason)

    @fail_closed
    async def request(self, flow: http.HTTPFlow) -> None:
        st = flow_state(flow)
        if st is None or flow.response is not None or not st.ask:
            return
        try:
            await self.hold(flow, st)
        finally:
            self._limits.release(st.claim)      # its held slot (admitted at requestheaders, addon.py) is free again

    async def hold(self, flow: http.HTTPFlow, st: FlowState) -> None:
        """Leaves flow.response unset to forward the request."""
        body = flow.request.raw_content or b""
        if flow.request.stream or len(body) > self._settings.inspect_max_bytes:
            return self.deny(flow, "approval.body_too_large", "approval required, but the body is too large to hold")
        if self._drain.draining:
            return self._recorder.deny(flow, "sandgate.stopping", STOPPING_NEW, status=503)
        # Held from before its approval is filed (an approver, or another worker, may list it before this waits on
        # it) until it is answered: a drain that begins meanwhile waits for it (gateway/runtime/drain.py).
        with self._drain.holding():
            await self._file_and_wait(flow, st, body)
            if flow.response is None:               # let through: held until its response or error hook
                self._drain.released.add(flow)

    async def _file_and_wait(self, flow: http.HTTPFlow, st: FlowState, body: bytes) -> None:
        sid = st.session_id
        url = flow.request.pretty_url
        markers = list((st.session.get("placeholders") or {}).values())
        headers = list(flow.request.headers.items(multi=True))     # read three times: not a one-shot iterator
        summary = f"{flow.request.method} {url}"
        action = egress_action(flow.request.method, url, headers, body, markers)
        if st.aws is not None:
            # bound to the operation and the request without its signature, date and SDK headers: the SDK's retry
            # (a new signature, a new date) finds the same approval
            binding = aws_binding(sid, st.aws, flow.request.method, url, body, headers, self._placeholders.secrets_in)
            summary = f"AWS {st.aws['service']} {st.aws['operation'] or '(unknown operation)'} " \
                      f"{st.aws['resource']}".strip() + f" ({flow.request.method} {url.partition('?')[0]})"
            action = {**action, "aws": dict(st.aws)}
        else:
            binding = egress_binding(sid, flow.request.method, url, body,
                                     binding_headers(headers, self._placeholders.secrets_in))
        try:
            ticket = await self._queue.request_approval(ApprovalRequest(
                session=self._sessions.live_now(sid), session_id=sid, kind="egress", binding=binding,
                summary=summary[:300], action={**action, "codes": list(st.decision.codes) if st.decision else []},
                reasons=list(st.decision.reasons) if st.decision else [], requested_by=f"session:{sid}",
                used_by=f"session:{sid}", ttl_s=st.decision.approval_ttl_s if st.decision else None))
        except TooManyPending as exc:
            return self.deny(flow, exc.code, f"approval required, but {exc}")
        st.approval_id = ticket.row.id
        if ticket.reused:
            st.approved_by = ticket.row.decided_by
            return
        held = self.held.setdefault(flow.client_conn, set())
        if st.aws is None:
            held.add(st.approval_id)
        else:
            # An AWS call's approval outlives the SDK's timeout (it retries with a new signature and date, and finds
            # it): a client that leaves leaves the approval pending, for its retry to use.
            self.held_aws.setdefault(flow.client_conn, set()).add(id(st))
        waiter = asyncio.ensure_future(self._queue.wait(st.approval_id, self._settings.hold_timeout_s))
        try:
            stopped = await self._drain.race(waiter)
        finally:
            held.discard(st.approval_id)        # from here a disconnect no longer cancels the item
            self.held_aws.get(flow.client_conn, set()).discard(id(st))
        if stopped:
            return self._recorder.deny(flow, "sandgate.stopping", STOPPING_HELD, status=503)
        row = waiter.result()
        if st.aws is not None and id(st) in self.gone:
            self.gone.discard(id(st))
            return self.deny(flow, "approval.client_gone", "the client left; its retry uses the approval")
        status = row.status if row is not None else "missing"
        st.approval_status = status
        if status == "approved" and await self._queue.consume(row, f"session:{sid}"):
            st.approved_by = row.decided_by
            return
        if status == "denied":
            return self.deny(flow, "approval.denied", f"denied by {row.decided_by}: {row.reason}")
        if status == "pending":
            return self.deny(flow, "approval.timeout", "approval required: not decided in time (still pending)")
        return self.deny(flow, f"approval.{status}", f"approval required: the approval is {status}")

    def client_disconnected(self, client: connection.Client) -> None:
        for aid in self.held.pop(client, set()):
            self.client_gone(aid)
        self.gone |= self.held_aws.pop(client, set())

    def response(self, flow: http.HTTPFlow) -> None:
        if self._drain.released:
            self._drain.released.discard(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        if self._drain.released:
            self._drain.released.discard(flow)
        st = flow_state(flow)
        if st is not None and st.approval_id and st.approval_id in self.held.get(flow.client_conn, ()):
            self.client_gone(st.approval_id)

    def client_gone(self, aid: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self._queue.cancel(aid, "sandgate", "the client disconnected while the request was held"))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def done(self) -> None:
        """mitmproxy's shutdown hook. A restart is not a disconnect: cancellations not yet done are dropped."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
