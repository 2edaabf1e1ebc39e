"""`sandgate policy check`: parse and compile a policy directory the way `opa check` does.

Reported with file:line: parse errors, calls to functions that are neither defined by the policy nor
builtins of the engine, unsafe variables and conflicting rules (regorus finds the last two when a rule is
first evaluated, so every package, tests included, is evaluated once on an empty input, and every rule of a
package that fails on its own). `strict` adds OPA's strict-mode checks
that a static walk can make: unused and duplicate imports, deprecated builtins, local assignments and function
arguments never used, assignments to `input` or `data`, and what is wrong with `# METADATA` annotations
(gateway/policy/annotations.py); and sandgate's own trap: an egress rule restricting the
request method that forgets the CONNECT every HTTPS request starts with.
In every mode: an import whose name shadows a rule of its package (`import
data.sandgate.lib.decision` in a package with a `decision` rule: alias it, `... as decision_lib`).
"""
from __future__ import annotations

import json
import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import regorus

from gateway.policy import ast
from gateway.policy.annotations import read_annotations
from gateway.policy.cache import is_pure
from gateway.policy.loader import PolicySource
from gateway.policy.rego import PolicyError, build_engine, error_text, prepared

DEPRECATED = {"any", "all", "re_match", "set_diff", "net.cidr_overlap", "cast_array", "cast_set",
              "cast_string", "cast_boolean", "cast_null", "cast_object"}
_LOC = re.compile(r"^(?P<file>[^:\s]+):(?P<line>\d+)(?::\d+)?:\s*(?P<msg>.*)$")


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    message: str
    severity: str = "error"          # "error" | "warning" (strict mode)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"


def _finding(text: str) -> Finding:
    m = _LOC.match(text)
    if m:
        return Finding(m.group("file"), int(m.group("line")), m.group("msg"))
    return Finding("", 0, text)


@lru_cache(maxsize=1024)
def is_builtin(name: str, arity: int) -> bool:
    """Whether regorus knows `name` as a function of `arity` arguments (probed with a throw-away policy)."""
    args = ", ".join(["input.a"] * arity)
    engine = regorus.Engine()
    engine.set_gather_prints(True)
    try:
        engine.add_policy("probe.rego", f"package probe\nimport rego.v1\nx if {{ {name}({args}) }}\n")
        engine.set_input({})
        engine.eval_rule("data.probe.x")
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return "could not find function" not in str(exc)
    return True


def _alias(imp: dict, path: list[str], contents: str) -> str:
    span = imp.get("as")
    if isinstance(span, dict) and "start" in span:
        return contents[span["start"]:span["end"]]
    return path[-1]


def _imports(module: dict) -> dict[str, list[str]]:
    """alias -> imported path, for `import data.a.b` (alias b) and `import data.a.b as c`."""
    contents = module.get("source", {}).get("contents", "")
    out: dict[str, list[str]] = {}
    for imp in module["ast"].get("imports", []):
        path = ast.ref_path(imp.get("refr"))
        if path and path[0] in ("data", "input"):
            out[_alias(imp, path, contents)] = path
    return out


def _unknown_functions(modules: list[dict], facts: _Walked) -> list[Finding]:
    functions = {r.path for r in ast.rules(modules) if r.kind == "Func"}
    findings = []
    for module in modules:
        package, imports = ast.module_package(module), _imports(module)
        for rule in module["ast"].get("rules", []):
            for name, line, arity in facts(rule).calls:
                if _resolves(name, package, imports, functions) or is_builtin(".".join(name), arity):
                    continue
                findings.append(Finding(ast.module_file(module), line,
                                        f"unknown function {'.'.join(name)}"))
    return findings


@dataclass(frozen=True)
class _Facts:
    """What the checks read of one rule, gathered in one walk of its AST (four walks before: the calls twice, the
    variables and the assignments once each)."""
    calls: tuple[tuple[list[str], int, int], ...]      # (function name, line, arity) of every call
    names: Counter                                    # every variable name of a Spec rule, counted
    assigned: tuple[tuple[str, int], ...]             # (name, line) of every `name := ...` in its bodies


def _rule_facts(rule: dict) -> _Facts:
    calls: list = []
    names: Counter = Counter()
    assigned: list = []

    def visit(node: dict, count: bool, assigns: bool) -> None:
        call = node.get("Call")
        if isinstance(call, dict):
            name = ast.ref_path(call.get("fcn"))
            if name is not None:
                calls.append((name, call["span"]["line"], len(call.get("params", []))))
        if count:
            var = node.get("Var")
            if isinstance(var, dict) and isinstance(var.get("value"), str):
                names[var["value"]] += 1
        if assigns:
            assign = node.get("AssignExpr")
            if isinstance(assign, dict) and isinstance(assign.get("lhs"), dict) and "Var" in assign["lhs"]:
                var = assign["lhs"]["Var"]
                assigned.append((var["value"], var["span"]["line"]))

    def walk(node: Any, count: bool, assigns: bool) -> None:
        if isinstance(node, dict):
            visit(node, count, assigns)
            for value in node.values():
                if isinstance(value, (dict, list)):
                    walk(value, count, assigns)
        elif isinstance(node, list):
            for value in node:
                if isinstance(value, (dict, list)):
                    walk(value, count, assigns)

    visit(rule, False, False)
    for i, (kind, body) in enumerate(rule.items()):
        if i == 0 and kind == "Spec" and isinstance(body, dict):
            visit(body, True, False)                  # the variables of the Spec, its assignments in its bodies
            for key, value in body.items():
                walk(value, True, key == "bodies")
        else:
            walk(body, False, False)
    return _Facts(tuple(calls), names, tuple(assigned))


class _Walked:
    """Each rule's facts, walked once per check (keyed by the rule's AST node, which the check keeps alive)."""

    def __init__(self) -> None:
        self._facts: dict[int, tuple[dict, _Facts]] = {}

    def __call__(self, rule: dict) -> _Facts:
        hit = self._facts.get(id(rule))
        if hit is None or hit[0] is not rule:
            hit = self._facts[id(rule)] = (rule, _rule_facts(rule))
        return hit[1]


def _resolves(name: list[str], package: str, imports: dict[str, list[str]], functions: set[str]) -> bool:
    candidates = [f"data.{package}." + ".".join(name)]
    if name[0] == "data":
        candidates.append(".".join(name))
    if name[0] in imports:
        candidates.append(".".join(imports[name[0]] + name[1:]))
    return any(c in functions for c in candidates)


def _evaluation_errors(engine: Any, modules: list[dict]) -> list[Finding]:
    """Evaluate each package whole on an empty input (this also reaches functions, e.g. arity conflicts), then,
    in a package that failed, each rule on its own: a package's evaluation stops at its first error, and a
    package that evaluates runs every rule it holds, so its rules on their own find nothing more. The tests are
    rules too: a clean policy's check evaluates them once, as its packages."""
    engine = prepared(engine)             # each package and rule below evaluates on a clone of it
    findings, failed = [], set()
    for package in sorted({ast.module_package(m) for m in modules}):
        text = _error_of(engine, f"data.{package}", query=True)
        if text is None:
            continue
        failed.add(package)
        if "could not find function" not in text:     # reported with the static walk
            findings.append(_finding(text))
    seen: set[str] = set()
    for rule in ast.rules(modules):
        if rule.kind == "Func" or rule.path in seen or rule.package not in failed:
            continue
        seen.add(rule.path)
        text = _error_of(engine, rule.path, query=False)
        if text is not None and "could not find function" not in text:
            findings.append(_finding(text))
    return findings


def _error_of(engine: Any, path: str, query: bool) -> str | None:
    """The error evaluating `path` (a package's query, or a rule) on a clone of `engine` raises, or None."""
    probe = engine.clone()
    probe.set_gather_prints(True)             # a print() in the policy must not reach our stdout/stderr
    try:
        probe.set_input({})
        if query:
            probe.eval_query_as_json(path)
        else:
            probe.eval_rule_as_json(path)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return error_text(exc)
    return None


def _strict(modules: list[dict], facts: _Walked) -> list[Finding]:
    findings = []
    for module in modules:
        file = ast.module_file(module)
        text = module.get("source", {}).get("contents", "")
        seen: set[str] = set()
        for imp in module["ast"].get("imports", []):
            path = ast.ref_path(imp.get("refr"))
            if not path or path[0] not in ("data", "input"):
                continue
            line = imp["span"]["line"]
            alias = _alias(imp, path, text)
            if alias in seen:
                findings.append(Finding(file, line, f"duplicate import {alias}", "warning"))
            seen.add(alias)
            body = "\n".join(t for i, t in enumerate(text.splitlines(), 1) if i != line)
            if not re.search(rf"(?<![\w.]){re.escape(alias)}\b", body):
                findings.append(Finding(file, line, f"import {'.'.join(path)} is unused", "warning"))
        for rule in module["ast"].get("rules", []):
            for name, line, _ in facts(rule).calls:
                if ".".join(name) in DEPRECATED:
                    findings.append(Finding(file, line, f"deprecated built-in function {'.'.join(name)}",
                                            "warning"))
        findings.extend(_unused_locals(module, facts))
    return findings


def _annotation_errors(modules: list[dict]) -> list[Finding]:
    findings = []
    for module in modules:
        _, problems = read_annotations(module.get("source", {}).get("contents", ""))
        findings.extend(Finding(ast.module_file(module), p.line, p.message) for p in problems)
    return findings


def _shadowing_imports(modules: list[dict]) -> list[Finding]:
    """An import named like a rule of its own package: `decision.combine(...)` then reads as the rule."""
    names: dict[str, set[str]] = {}
    for rule in ast.rules(modules):
        names.setdefault(rule.package, set()).add(rule.name)
    findings = []
    for module in modules:
        package, text = ast.module_package(module), module.get("source", {}).get("contents", "")
        for imp in module["ast"].get("imports", []):
            path = ast.ref_path(imp.get("refr"))
            if not path or path[0] not in ("data", "input"):     # `import input.request as decision` too
                continue
            alias = _alias(imp, path, text)
            if alias in names.get(package, ()):
                findings.append(Finding(ast.module_file(module), imp["span"]["line"],
                                        f"import {'.'.join(path)} shadows the rule {alias} of package {package} "
                                        f"(alias it: import {'.'.join(path)} as {alias}_lib)"))
    return findings


def _var_names(node: Any, out: Counter) -> Counter:
    if isinstance(node, dict):
        var = node.get("Var")
        if isinstance(var, dict) and isinstance(var.get("value"), str):
            out[var["value"]] += 1
        for value in node.values():
            _var_names(value, out)
    elif isinstance(node, list):
        for value in node:
            _var_names(value, out)
    return out


def _unused_locals(module: dict, facts: _Walked) -> list[Finding]:
    """OPA strict mode: local assignments never used, function arguments never used, `input`/`data`
    assigned to."""
    file, findings = ast.module_file(module), []
    for rule in module["ast"].get("rules", []):
        kind, body = next(iter(rule.items()))
        if kind != "Spec":
            continue
        walked = facts(rule)
        counts = walked.names
        for name, line in walked.assigned:
            if name in ("input", "data"):
                findings.append(Finding(file, line, f"assigns to the reserved name {name}", "warning"))
            elif not name.startswith("_") and counts[name] == 1:
                findings.append(Finding(file, line, f"local variable {name} is assigned but never used", "warning"))
        head = body["head"].get("Func")
        if head:
            for arg in head.get("args", []):
                var = arg.get("Var") if isinstance(arg, dict) else None
                if var and not var["value"].startswith("_") and counts[var["value"]] == 1:
                    findings.append(Finding(file, var["span"]["line"],
                                            f"function argument {var['value']} is never used", "warning"))
    return findings


def _has_var(node: Any) -> bool:
    return bool(_var_names(node, Counter()))


def _opa_only_errors(modules: list[dict]) -> list[Finding]:
    """What regorus accepts and OPA refuses to compile (the `opa` engine could not load the policy):
    `else` on a rule whose head has a variable (`x[i] := ... else := ...`)."""
    findings = []
    for module in modules:
        for rule in module["ast"].get("rules", []):
            kind, body = next(iter(rule.items()))
            if kind != "Spec" or not any(b.get("is_else") for b in body.get("bodies", [])):
                continue
            head = next(iter(body["head"].values()))
            ref = head.get("refr", {})
            if "RefBrack" in ref and _has_var(ref["RefBrack"].get("index")):
                findings.append(Finding(ast.module_file(module), head["span"]["line"],
                                        "else cannot be used on a rule with variables in its head (OPA refuses it)"))
    return findings


_METHOD = re.compile(r"input\.request\.method|(?<![\w.])method(?!\w)")
_NEGATED_METHOD = re.compile(r"(\bnot\b|!=)[^\n]*(input\.request\.method|(?<![\w.])method(?!\w))|"
                             r"(input\.request\.method|(?<![\w.])method(?!\w))[^\n]*!=")


def _method_without_connect(modules: list[dict]) -> list[Finding]:
    """Egress rules that restrict `input.request.method` and never mention CONNECT. For HTTPS the proxy decides
    the CONNECT first (method "CONNECT", empty path) and then each request in the tunnel: an `allow` limited to
    some methods never lets the tunnel open (the host is then denied as not allowlisted), and a `deny`/`ask` for
    every method but some catches the CONNECT too. Warnings: a rule may mean it."""
    findings = []
    for module in modules:
        file = ast.module_file(module)
        if ast.module_package(module) != "sandgate.egress" or file.endswith("_test.rego"):
            continue
        contents = module.get("source", {}).get("contents", "")
        rules = [next(iter(r.items())) for r in module["ast"].get("rules", [])]
        starts = sorted(body["span"]["start"] for _, body in rules)
        ends = dict(zip(starts, starts[1:] + [len(contents)]))
        for kind, body in rules:
            if kind != "Spec" or "Set" not in body["head"]:
                continue
            name = (ast.ref_path(body["head"]["Set"]["refr"]) or [""])[0]
            if name not in ("allow", "deny", "ask"):
                continue
            text = contents[body["span"]["start"]:ends[body["span"]["start"]]]
            if "CONNECT" in text or not _METHOD.search(text):
                continue
            if name == "allow":
                why = ("this allow restricts input.request.method but not to CONNECT: for HTTPS the proxy decides "
                       "the CONNECT first, so the tunnel never opens (add \"CONNECT\" to the methods)")
            elif _NEGATED_METHOD.search(text):
                why = (f"this {name} applies to every method but some, CONNECT included: for HTTPS the proxy decides "
                       "the CONNECT first (list \"CONNECT\" among the methods it leaves out)")
            else:
                continue
            findings.append(Finding(file, body["span"]["line"], why, "warning"))
    return findings


@dataclass
class _Checked:
    evaluated: frozenset[Finding]                              # what evaluating the packages found
    findings: dict[bool, tuple[Finding, ...]]                  # strict -> every finding


# The last few sources checked in this process, by their exact content: a check is a pure function of the module and
# test texts (with their file names), the data and the engine, once the modules call no impure builtin (the
# clock, randomness, the network: evaluating them twice could differ, so such a source is never kept). A CLI
# process checks once; a process that checks the same source again (the tests, in process) reuses the
# evaluation of every package (most of a check's CPU), and the whole result for the same mode (a strict check
# keeps the plain one's too: what it finds before its strict checks).
_CHECKED_LOCK = threading.Lock()
_CHECKED: OrderedDict[tuple, _Checked] = OrderedDict()
_CHECKED_SIZE = 4


def _content_key(source: PolicySource) -> tuple | None:
    try:
        data = json.dumps(source.data, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):              # not plain JSON (a YAML date): checked afresh every time
        return None
    return (regorus.Engine, source.modules, source.tests, data)


def check_source(source: PolicySource, strict: bool = False) -> list[Finding]:
    """Every problem found, sorted by file and line; empty when the policy is clean."""
    key = _content_key(source)
    with _CHECKED_LOCK:
        kept = _CHECKED.get(key) if key is not None else None
        if kept is not None:
            _CHECKED.move_to_end(key)
            if strict in kept.findings:
                return list(kept.findings[strict])
    try:
        engine = build_engine(source, tests=True)
    except PolicyError as exc:
        return [_finding(str(exc))]
    modules = ast.parse_ast(engine.get_ast_as_json())
    evaluated = kept.evaluated if kept is not None else frozenset(_evaluation_errors(engine, modules))
    facts = _Walked()
    findings = set(_unknown_functions(modules, facts)) | evaluated \
        | set(_opa_only_errors(modules)) | set(_shadowing_imports(modules))
    results = {False: tuple(sorted(findings))}           # a strict check finds what a plain one does, and more
    if strict:
        findings |= set(_strict(modules, facts)) | set(_method_without_connect(modules)) \
            | set(_annotation_errors(modules))
        results[True] = tuple(sorted(findings))
    result = results[strict]
    if key is not None and (kept is not None or is_pure([t for _, t in source.modules + source.tests], modules)):
        with _CHECKED_LOCK:
            kept = _CHECKED.setdefault(key, _Checked(evaluated, {}))
            kept.findings.update(results)
            _CHECKED.move_to_end(key)
            while len(_CHECKED) > _CHECKED_SIZE:
                _CHECKED.popitem(last=False)
    return list(result)
