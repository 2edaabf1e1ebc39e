"""Prometheus metrics (own registry, so tests and several apps in one process do not collide).

Under `serve --workers N` every worker writes its metrics to files in PROMETHEUS_MULTIPROC_DIR (set by the
supervisor; prometheus_client's multiprocess mode), and `/metrics` on any worker reports all of them: counters
and histograms summed, gauges of shared state (live sessions, pending approvals) as the highest, audit rows
waiting summed over the live workers.
"""
from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter("sandgate_decisions", "Policy decisions", ["kind", "action"],
                                 registry=self.registry)
        self.latency = Histogram("sandgate_proxy_request_seconds", "Proxy request latency (decision to response)",
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=self.registry)
        self.sessions_live = Gauge("sandgate_sessions_live", "Live sessions", registry=self.registry,
                                   multiprocess_mode="max")
        self.approvals_pending = Gauge("sandgate_approvals_pending", "Pending approvals", registry=self.registry,
                                       multiprocess_mode="max")
        self._children: dict = {}
        self.exfiltration = Counter("sandgate_exfiltration_blocked", "Placeholders sent to unbound hosts",
                                    registry=self.registry)
        self.audit_refused = Counter("sandgate_audit_refused", "Requests refused because audit cannot record "
                                     "(503 audit.unavailable)", ["kind"], registry=self.registry)
        self.audit_pending = Gauge("sandgate_audit_pending", "Audit rows waiting to be written",
                                   registry=self.registry, multiprocess_mode="livesum")
        self.notify = Counter("sandgate_notify_deliveries", "Approval events sent to notify.webhook_url, by result "
                              "(delivered, failed: an attempt, dropped: never sent)", ["result"],
                              registry=self.registry)
        self.notify_outbox = Gauge("sandgate_notify_outbox", "Approval events waiting for delivery (all replicas')",
                                   registry=self.registry, multiprocess_mode="max")

    def decision(self, kind: str, action: str) -> None:
        """Count a decision (labelled children cached: this runs on every request)."""
        child = self._children.get((kind, action))
        if child is None:
            child = self._children[(kind, action)] = self.decisions.labels(kind, action)
        child.inc()

    def render(self) -> bytes:
        shared = os.environ.get(MULTIPROC_ENV)
        if shared:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=shared)
            return generate_latest(registry)
        return generate_latest(self.registry)
