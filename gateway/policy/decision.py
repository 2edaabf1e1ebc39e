"""Policy decisions: the one shape both engines return, parsed strictly (anything odd is a deny)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("allow", "deny", "ask")

MAX_APPROVAL_TTL_S = 365 * 24 * 3600.0      # the longest an ask may keep its approval open


@dataclass(frozen=True)
class Decision:
    action: str
    reasons: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    approval_ttl_s: float | None = None
    rev: str = ""
    extra: dict = field(default_factory=dict, compare=False)
    decision_id: str = field(default="", compare=False)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) or self.action

    @property
    def code(self) -> str:
        return self.codes[0] if self.codes else f"policy.{self.action}"

    def with_id(self, decision_id: str) -> "Decision":
        """This decision under another id (dataclasses.replace without re-running __init__: every request)."""
        new = object.__new__(Decision)
        new.__dict__.update(self.__dict__)
        object.__setattr__(new, "decision_id", decision_id)
        return new

    def to_json(self) -> dict:
        out: dict = {"action": self.action, "reasons": list(self.reasons), "codes": list(self.codes)}
        if self.approval_ttl_s is not None:
            out["ttl_s"] = self.approval_ttl_s
        return out


def deny(code: str, reason: str, rev: str = "") -> Decision:
    return Decision("deny", (reason,), (code,), rev=rev)


def parse_decision(raw: Any, rev: str = "") -> Decision:
    """Turn an engine's `decision` value into a Decision. Undefined, wrong types, unknown actions -> deny."""
    if raw is None:
        return deny("policy.undefined", "the policy returned no decision", rev)
    if not isinstance(raw, dict):
        return deny("policy.malformed", "the policy decision is not an object", rev)
    action = raw.get("action")
    if action not in ACTIONS:
        return deny("policy.malformed", "the policy decision has no valid action", rev)
    reasons = raw.get("reasons", [])
    codes = raw.get("codes", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return deny("policy.malformed", "decision.reasons must be a list of strings", rev)
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        return deny("policy.malformed", "decision.codes must be a list of strings", rev)
    ttl = None
    approval = raw.get("approval")             # wave 1's spelling, still read
    for candidate in (raw.get("ttl_s"), approval.get("ttl_s") if isinstance(approval, dict) else None):
        if isinstance(candidate, (int, float)) and not isinstance(candidate, bool) and candidate > 0:
            ttl = min(float(candidate), MAX_APPROVAL_TTL_S)     # 1e300: an expiry no date can show
            break
    return Decision(action, tuple(reasons), tuple(codes), approval_ttl_s=ttl, rev=rev)
