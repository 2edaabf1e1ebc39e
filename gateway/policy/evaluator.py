"""Synchronous, in-process decisions for the command line (`policy eval`, `replay`, `diff`)."""
from __future__ import annotations

from typing import Any

from gateway.policy.decision import deny, parse_decision
from gateway.policy.loader import PolicySource
from gateway.policy.rego import ENTRYPOINTS, PolicyError, build_engine, evaluate


class Evaluator:
    def __init__(self, source: PolicySource):
        self.source = source
        self.engine = build_engine(source)

    def raw(self, kind: str, doc: Any) -> Any:
        return evaluate(self.engine, ENTRYPOINTS[kind], doc)

    def decide(self, kind: str, doc: Any) -> dict:
        """The decision as the gateway would act on it: anything malformed or failing is a deny."""
        try:
            decision = parse_decision(self.raw(kind, doc), self.source.rev)
        except PolicyError as exc:
            decision = deny("policy.error", f"the policy engine failed: {exc}", self.source.rev)
        return decision.to_json()
