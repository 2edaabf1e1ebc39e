"""Synchronous, in-process decisions for the command line (`policy eval`, `replay`, `diff`), and
`--explain`: which rule definition added which item to deny/ask/allow."""
from __future__ import annotations

import json
from typing import Any

from gateway.policy import ast as rast
from gateway.policy.decision import deny, parse_decision
from gateway.policy.loader import PolicySource
from gateway.policy.rego import ENTRY_PACKAGES, ENTRYPOINTS, PolicyError, build_engine, evaluate

SETS = ("deny", "ask", "allow")
_PREFIX = "__sandgate_explain_"


def explain_modules(ast_modules: list[dict], package: str) -> tuple[list[tuple[str, str]], list[dict]]:
    """For every definition of deny/ask/allow in `package`, a module holding a renamed copy of it (so each
    definition can be evaluated on its own), and what each copy stands for: {"rule", "set", "file", "line"}."""
    modules, index = [], []
    for module in ast_modules:
        if rast.module_package(module) != package:
            continue
        contents = module.get("source", {}).get("contents", "")
        imports = "\n".join(contents[i["span"]["start"]:i["span"]["end"]] for i in module["ast"].get("imports", []))
        # A rule's text runs to the next rule (regorus' span can stop short of a closing quote).
        starts = sorted(next(iter(r.values()))["span"]["start"] for r in module["ast"].get("rules", []))
        ends = dict(zip(starts, starts[1:] + [len(contents)]))
        for rule in module["ast"].get("rules", []):
            kind, body = next(iter(rule.items()))
            if kind != "Spec" or "Set" not in body["head"]:
                continue
            head = body["head"]["Set"]["refr"]
            if "Var" not in head or head["Var"]["value"] not in SETS:
                continue
            var, span = head["Var"]["span"], body["span"]
            name = f"{_PREFIX}{len(index)}"
            text = contents[span["start"]:var["start"]] + name + contents[var["end"]:ends[span["start"]]]
            modules.append((f"{name}.rego", f"package {package}\n{imports}\n{text}\n"))
            index.append({"rule": name, "set": head["Var"]["value"], "file": rast.module_file(module),
                          "line": span["line"]})
    return modules, index


class Evaluator:
    def __init__(self, source: PolicySource):
        self.source = source
        self.engine = build_engine(source)
        self._explainers: dict[str, tuple[Any, list[dict]]] = {}

    def raw(self, kind: str, doc: Any) -> Any:
        return evaluate(self.engine, ENTRYPOINTS[kind], doc)

    def decide(self, kind: str, doc: Any) -> dict:
        """The decision as the gateway would act on it: anything malformed or failing is a deny."""
        try:
            decision = parse_decision(self.raw(kind, doc), self.source.rev)
        except PolicyError as exc:
            decision = deny("policy.error", f"the policy engine failed: {exc}", self.source.rev)
        return decision.to_json()

    def explain(self, kind: str, doc: Any) -> list[dict]:
        """[{"set", "rule": "file:line", "items": [...]}] for every definition that added an item, in source
        order (or {"error"} for one that failed)."""
        package = ENTRY_PACKAGES[kind]
        if package not in self._explainers:
            modules, index = explain_modules(rast.parse_ast(self.engine.get_ast_as_json()), package)
            extra = PolicySource(self.source.root, self.source.modules + tuple(modules), (), self.source.data,
                                 self.source.rev)
            self._explainers[package] = (build_engine(extra), index)
        engine, index = self._explainers[package]
        out = []
        for entry in index:
            where = f"{entry['file']}:{entry['line']}"
            try:
                items = evaluate(engine, f"data.{package}.{entry['rule']}", doc, as_json=True)
            except PolicyError as exc:
                out.append({"set": entry["set"], "rule": where, "error": str(exc)})
                continue
            if items:
                out.append({"set": entry["set"], "rule": where,
                            "items": sorted(items, key=lambda i: json.dumps(i, sort_keys=True))})
        return out
