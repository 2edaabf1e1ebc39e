"""Build the configured policy engine (`[policy]` in the configuration): embedded regorus (worker processes
or threads) or an OPA server, with the decision log and, when `policy.shadow_dir` is set, a shadow policy."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gateway.config import PolicySettings
from gateway.policy.base import CachingEngine, DecisionSink, PolicyEngine
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.isolated import IsolatedEngine
from gateway.policy.loader import default_policy_dir
from gateway.policy.opa import OpaEngine
from gateway.policy.shadow import ShadowedEngine


def policy_dir(pol: PolicySettings) -> Path:
    return Path(pol.dir) if pol.dir else default_policy_dir()


def build_engine(pol: PolicySettings, directory: Path, decision_log: DecisionSink | None) -> CachingEngine:
    if pol.engine == "opa":
        return OpaEngine(directory, url=pol.opa_url, timeout_s=pol.timeout_s, push=pol.opa_push,
                         decision_log=decision_log)
    if pol.isolation == "process":
        return IsolatedEngine(directory, timeout_s=pol.timeout_s, workers=pol.workers, decision_log=decision_log)
    return EmbeddedEngine(directory, timeout_s=pol.timeout_s, workers=pol.workers, decision_log=decision_log)


def make_engine(pol: PolicySettings, decision_log: DecisionSink | None = None) -> PolicyEngine:
    live = build_engine(pol, policy_dir(pol), decision_log)
    if not pol.shadow_dir or decision_log is None:
        return live
    # The shadow runs on the embedded engine, on one thread: a dry run must not cost the live path a process.
    shadow = build_engine(replace(pol, engine="embedded", isolation="thread", workers=1), Path(pol.shadow_dir), None)
    return ShadowedEngine(live, shadow, decision_log)
