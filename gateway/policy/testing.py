"""Running Rego unit tests the way `opa test` does: every rule named `test_*` (found through regorus' AST,
in any loaded module), evaluated on its own with no input; true passes, anything else fails, an evaluation
error is an error. Optional line coverage of the non-test modules (regorus coverage)."""
from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regorus

from gateway.policy import ast
from gateway.policy.loader import PolicySource, load_policy_dir
from gateway.policy.rego import PolicyError, build_engine, error_text, prepared


@dataclass(frozen=True)
class TestResult:
    name: str            # data.package.test_rule
    file: str
    line: int
    outcome: str         # "pass" | "fail" | "error" | "skip" (a `todo_test_*` rule, as opa test does)
    detail: str = ""
    prints: tuple[str, ...] = ()
    duration_us: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"


@dataclass
class FileCoverage:
    covered: set[int] = field(default_factory=set)
    not_covered: set[int] = field(default_factory=set)

    @property
    def percent(self) -> float:
        total = len(self.covered | self.not_covered)
        return 100.0 if total == 0 else 100.0 * len(self.covered) / total


@dataclass
class TestReport:
    results: list[TestResult]
    coverage: dict[str, FileCoverage] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if any(r.outcome == "error" for r in self.results):
            return 2
        ran = [r for r in self.results if r.outcome != "skip"]
        return 0 if ran and all(r.passed for r in ran) else 1

    def coverage_percent(self) -> float:
        covered = sum(len(c.covered) for c in self.coverage.values())
        total = sum(len(c.covered | c.not_covered) for c in self.coverage.values())
        return 100.0 if total == 0 else 100.0 * covered / total


def discover(engine: Any) -> list[ast.Rule]:
    """The test rules of every module, once each (a test may be defined incrementally), in source order."""
    seen: dict[str, ast.Rule] = {}
    for rule in ast.rules(ast.parse_ast(engine.get_ast_as_json())):
        if rule.name.startswith(("test_", "todo_test_")) and rule.kind in ("Compr", "Default") \
                and rule.path not in seen:
            seen[rule.path] = rule
    return list(seen.values())


# The test rules of the last few sources run in this process, by the exact module and test texts with their file
# names (and the engine): what `discover` finds is regorus's parse of those texts and nothing else (not the data,
# nothing evaluated). Reading the parse is most of what `policy test --run ONE_TEST` costs (the AST of the shipped
# policy and its tests is about 10 MB of JSON); a process that runs the tests of the same source again (the tests,
# in process) reads it once.
_DISCOVERED_LOCK = threading.Lock()
_DISCOVERED: OrderedDict[tuple, tuple[ast.Rule, ...]] = OrderedDict()
_DISCOVERED_SIZE = 4


def _discover_source(source: PolicySource, engine: Any) -> tuple[ast.Rule, ...]:
    key = (regorus.Engine, source.modules, source.tests)
    with _DISCOVERED_LOCK:
        found = _DISCOVERED.get(key)
        if found is not None:
            _DISCOVERED.move_to_end(key)
            return found
    found = tuple(discover(engine))
    with _DISCOVERED_LOCK:
        _DISCOVERED[key] = found
        while len(_DISCOVERED) > _DISCOVERED_SIZE:
            _DISCOVERED.popitem(last=False)
    return found


def _run_one(engine: Any, rule: ast.Rule) -> TestResult:
    started = time.perf_counter()
    outcome, detail = "pass", ""
    try:
        value = engine.eval_rule(rule.path)
    except BaseException as exc:  # noqa: BLE001 - RuntimeError or a pyo3 panic: an ERROR result
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        outcome, detail = "error", error_text(exc)
    else:
        if value is not True:
            outcome, detail = "fail", "undefined" if value is None else f"got {value!r}"
    prints = tuple(engine.take_prints())
    return TestResult(rule.path, rule.file, rule.line, outcome, detail, prints,
                      (time.perf_counter() - started) * 1e6)


def _merge_coverage(into: dict[str, FileCoverage], report: dict, test_files: set[str]) -> None:
    for item in report.get("files", []):
        if item["path"] in test_files:
            continue
        cov = into.setdefault(item["path"], FileCoverage())
        cov.covered.update(item.get("covered", []))
        cov.not_covered.update(item.get("not_covered", []))


def run_source(source: PolicySource, run: str | None = None, coverage: bool = False) -> TestReport:
    import json

    base = prepared(build_engine(source, tests=True, coverage=coverage))     # each test a clone of it
    pattern = re.compile(run) if run else None
    results: list[TestResult] = []
    cov: dict[str, FileCoverage] = {}
    test_files = {rel for rel, _ in source.tests}
    for rule in _discover_source(source, base):
        if pattern is not None and not pattern.search(rule.path):
            continue
        if rule.name.startswith("todo_"):
            results.append(TestResult(rule.path, rule.file, rule.line, "skip"))
            continue
        engine = base.clone()
        results.append(_run_one(engine, rule))
        if coverage:
            _merge_coverage(cov, json.loads(engine.get_coverage_report_as_json()), test_files)
    for c in cov.values():
        c.not_covered -= c.covered
    return TestReport(results, cov)


def run_tests(directory: str | Path, run: str | None = None, coverage: bool = False) -> TestReport:
    """Raises PolicyError when the policy does not parse (or ValueError for a bad directory)."""
    return run_source(load_policy_dir(directory, require_modules=False), run, coverage)


__all__ = ["FileCoverage", "PolicyError", "TestReport", "TestResult", "discover", "run_source", "run_tests"]
