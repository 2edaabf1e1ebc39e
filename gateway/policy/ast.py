"""Reading regorus' AST (`Engine.get_ast_as_json()`): packages, rules with their lines, calls. Pure functions."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class Rule:
    package: str            # "sandgate.egress"
    name: str               # first segment of the rule head: "deny", "test_allow_x"
    kind: str               # "Compr" (complete), "Set" (partial set), "Func", "Default"
    file: str
    line: int

    @property
    def path(self) -> str:
        return f"data.{self.package}.{self.name}"


def ref_path(node: Any) -> list[str] | None:
    """`a.b.c` / `a["b"]` as ["a", "b", "c"]; None for anything that is not a plain reference."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    kind, body = next(iter(node.items()))
    if kind == "Var":
        return [body["value"]]
    if kind == "RefDot":
        head = ref_path(body["refr"])
        return None if head is None else head + [body["field"][1]]
    if kind == "RefBrack":
        head = ref_path(body["refr"])
        index = body.get("index", {})
        if head is not None and isinstance(index, dict) and "String" in index:
            return head + [index["String"]["value"]]
        return head
    return None


def parse_ast(text: str) -> list[dict]:
    return json.loads(text)


def module_package(module: dict) -> str:
    return ".".join(ref_path(module["ast"]["package"]["refr"]) or [])


def module_file(module: dict) -> str:
    return module.get("source", {}).get("file", "")


def rules(modules: list[dict]) -> Iterator[Rule]:
    for module in modules:
        package, file = module_package(module), module_file(module)
        for rule in module["ast"].get("rules", []):
            kind, body = next(iter(rule.items()))
            if kind == "Default":
                path, line = ref_path(body["refr"]), body["span"]["line"]
                yield Rule(package, (path or ["?"])[0], "Default", file, line)
                continue
            head_kind, head = next(iter(body["head"].items()))
            path = ref_path(head["refr"]) or ["?"]
            yield Rule(package, path[0], head_kind, file, head["span"]["line"])


def calls(node: Any) -> Iterator[tuple[list[str], int]]:
    """Every function call in a subtree: (name path, line)."""
    if isinstance(node, dict):
        call = node.get("Call")
        if isinstance(call, dict):
            name = ref_path(call.get("fcn"))
            if name is not None:
                yield name, call["span"]["line"]
        for value in node.values():
            yield from calls(value)
    elif isinstance(node, list):
        for value in node:
            yield from calls(value)
