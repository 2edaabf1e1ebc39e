"""Build the configured policy engine (`[policy]` in the configuration)."""
from __future__ import annotations

from pathlib import Path

from gateway.config import PolicySettings
from gateway.policy.base import CachingEngine
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.isolated import IsolatedEngine
from gateway.policy.loader import default_policy_dir


def policy_dir(pol: PolicySettings) -> Path:
    return Path(pol.dir) if pol.dir else default_policy_dir()


def make_engine(pol: PolicySettings) -> CachingEngine:
    directory = policy_dir(pol)
    if pol.engine == "opa":
        raise ValueError("policy.engine 'opa' is not available yet in this build")
    if pol.isolation == "process":
        return IsolatedEngine(directory, timeout_s=pol.timeout_s, workers=pol.workers)
    return EmbeddedEngine(directory, timeout_s=pol.timeout_s, workers=pol.workers)
