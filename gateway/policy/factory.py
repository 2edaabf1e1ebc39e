"""Build the configured policy engine (`[policy]` in the configuration)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.policy.base import CachingEngine
from gateway.policy.loader import default_policy_dir


def policy_dir(pol: dict) -> Path:
    return Path(pol["dir"]) if pol.get("dir") else default_policy_dir()


def make_engine(cfg: Any) -> CachingEngine:
    pol = cfg.raw["policy"]
    directory = policy_dir(pol)
    timeout_s = float(pol["timeout_s"])
    if pol["engine"] == "opa":
        raise ValueError("policy.engine 'opa' is not available yet in this build")
    if pol["isolation"] == "process":
        from gateway.policy.isolated import IsolatedEngine

        return IsolatedEngine(directory, timeout_s=timeout_s, workers=int(pol["workers"]))
    from gateway.policy.embedded import EmbeddedEngine

    return EmbeddedEngine(directory, timeout_s=timeout_s, workers=int(pol["workers"]))
