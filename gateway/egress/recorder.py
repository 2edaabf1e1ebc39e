"""Answering and recording egress flows: the one denial (403/503, audited once) every egress addon uses."""
from __future__ import annotations

from mitmproxy import http

from gateway.audit.log import AuditLog
from gateway.egress.flows import FlowState, flow_state
from gateway.egress.responses import denial
from gateway.runtime.metrics import Metrics
from gateway.policy.base import PolicyEngine
from gateway.sessions.registry import SessionRegistry


class FlowRecorder:
    def __init__(self, audit: AuditLog, metrics: Metrics, sessions: SessionRegistry, engine: PolicyEngine):
        self._audit = audit
        self._metrics = metrics
        self._sessions = sessions
        self._engine = engine

    def deny(self, flow: http.HTTPFlow, code: str, reason: str, status: int = 403, *, kind: str = "egress",
             audit: bool = True) -> None:
        """Answer the flow with a denial (never forwarded) and record it once."""
        flow.request.stream = False
        flow.response = denial(code, reason, flow.id, status=status)
        self._metrics.decision("egress", "deny")
        st = flow_state(flow)
        if st is not None:
            st.denied = True
        if audit and st is not None and not st.audited:
            st.audited = True
            self.audit(flow, st, action="deny", codes=[code], reasons=[reason], status=status, kind=kind)
        elif audit and st is None:
            self._audit.record(kind, action="deny", codes=[code], reasons=[reason], request_id=flow.id,
                               method=flow.request.method, host=flow.request.pretty_host,
                               path=flow.request.path, http_status=status)

    def audit(self, flow: http.HTTPFlow, st: FlowState, *, action: str, codes: list, reasons: list,
              status: int | None, kind: str = "egress", detail: dict | None = None) -> None:
        """The flow's audit row (and, for egress rows, the session's counters)."""
        sid = st.session_id
        if kind == "egress":
            self._sessions.count(sid, requests=1, denied=int(action == "deny"), asked=int(action == "ask"),
                                 bytes_out=st.bytes_out, bytes_in=st.bytes_in)
        self._audit.record(
            kind, session=sid, step=self._sessions.step(sid), action=action, reasons=reasons, codes=codes,
            request_id=flow.id, method=flow.request.method, host=flow.request.host,
            path="" if flow.request.method == "CONNECT" else (st.path or flow.request.path), http_status=status,
            bytes_in=st.bytes_in, bytes_out=st.bytes_out,
            policy_rev=st.decision.rev if st.decision else self._engine.rev, detail=detail or {})

    def record(self, kind: str, **fields: object) -> None:
        """Any other row (exfiltration, secret use, tunnels)."""
        self._audit.record(kind, **fields)
