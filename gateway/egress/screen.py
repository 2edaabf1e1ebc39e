"""The placeholder screen: where a request's placeholders may go, checked before the policy and again with the body.

A placeholder of another session, one bound to other hosts, one headed for cleartext or for a port its secret
does not allow: the request is refused (403) and an `exfiltration` event recorded. The verdict is the pure
`broker.inject.refuse_placeholders`; this is its mitmproxy side.
"""
from __future__ import annotations

from mitmproxy import http

from broker.broker import Broker
from broker.inject import refuse_placeholders
from broker.registry import Owner, PlaceholderRegistry
from gateway.egress.flows import FlowState
from gateway.net.hosts import normalise_host
from gateway.egress.recorder import FlowRecorder
from gateway.runtime.metrics import Metrics
from gateway.sessions.registry import SessionRegistry


class SecretScreen:
    def __init__(self, placeholders: PlaceholderRegistry, broker: Broker, sessions: SessionRegistry,
                 recorder: FlowRecorder, metrics: Metrics):
        self.placeholders = placeholders
        self._broker = broker
        self._sessions = sessions
        self._recorder = recorder
        self._metrics = metrics

    def scan_head(self, flow: http.HTTPFlow) -> set[Owner]:
        """The placeholders in the request's URL and headers (any session, any encoding)."""
        if not self.placeholders:
            return set()
        text = "\n".join([flow.request.url] + [f"{k}: {v}" for k, v in flow.request.headers.items(multi=True)])
        return self.placeholders.find(text)

    def refuse(self, flow: http.HTTPFlow, st: FlowState, found: set[Owner]) -> bool:
        """Deny the flow (and record the exfiltration) when `found` may not go where it is headed. True when
        refused."""
        sid = st.session_id
        host = normalise_host(flow.request.host)      # the one normaliser: policy, injection and audit agree
        refusal = refuse_placeholders(found, sid, host, flow.request.scheme == "https", flow.request.port,
                                      self._broker.specs)
        if refusal is None:
            return False
        self._metrics.exfiltration.inc()
        self._recorder.record("exfiltration", session=sid, step=self._sessions.step(sid), action="deny",
                              reasons=[refusal.reason], codes=[refusal.code], request_id=flow.id,
                              method=flow.request.method, host=host, path=st.path, http_status=403,
                              detail={"secrets": list(refusal.names), "foreign": refusal.foreign})
        self._recorder.deny(flow, refusal.code, refusal.reason)
        return True
