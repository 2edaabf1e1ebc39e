"""Running Rego unit tests (`*_test.rego`, rules named `test_*`) on the embedded engine."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import regopy

from gateway.policy.engine import PolicyError, build_bundle, evaluate_bundle
from gateway.policy.loader import PolicySource, load_policy_dir

_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)", re.M)
_TEST_RULE = re.compile(r"^(test_\w+)\s*(?:if\b|:=|=|\{)", re.M)


@dataclass(frozen=True)
class TestResult:
    name: str            # package.rule
    passed: bool
    detail: str = ""


def discover_tests(tests: tuple[tuple[str, str], ...]) -> list[str]:
    """Entry points ('a/b/test_x') for every test rule in the test modules."""
    out: list[str] = []
    for rel, text in tests:
        pkg = _PACKAGE.search(text)
        if not pkg:
            raise PolicyError(f"{rel}: no package line")
        for name in dict.fromkeys(_TEST_RULE.findall(text)):
            out.append(pkg.group(1).replace(".", "/") + "/" + name)
    return out


def run_tests(directory: str | Path) -> list[TestResult]:
    source = load_policy_dir(directory)
    entrypoints = discover_tests(source.tests)
    if not entrypoints:
        return []
    combined = PolicySource(source.root, source.modules + source.tests, (), source.data, source.rev)
    bundle = build_bundle(combined, entrypoints)
    interp = regopy.Interpreter()
    results = []
    for ep in entrypoints:
        name = ep.replace("/", ".")
        try:
            value = evaluate_bundle(interp, bundle, ep, {})
        except PolicyError as exc:
            results.append(TestResult(name, False, str(exc)))
            continue
        results.append(TestResult(name, value is True, "" if value is True else f"got {value!r}"))
    return results
