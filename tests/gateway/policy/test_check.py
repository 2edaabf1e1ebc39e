"""`policy check` keeps the last few sources it checked in the process, by content (gateway/policy/check.py): a
source checked again gives what a fresh check gives, anything that differs (a module's text or file name, a test,
the data, the mode) is checked afresh, and a policy calling an impure builtin is never kept."""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

from gateway.policy import check
from gateway.policy.check import check_source
from gateway.policy.loader import PolicySource

HEAD = "package p\nimport rego.v1\n"
CONFLICT = HEAD + "x := 1 if true\nx := data.v if true\n"          # conflicts unless data.v is 1: found evaluating


def source(modules, data=None, tests=()) -> PolicySource:
    return PolicySource(Path("/nowhere"), tuple(modules), tuple(tests), data if data is not None else {}, "r")


def found(src, strict=False) -> list[str]:
    return [str(f) for f in check_source(src, strict=strict)]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(check, "_CHECKED", OrderedDict())


def fresh_check(src, strict=False) -> list[str]:
    kept = check._CHECKED
    check._CHECKED = OrderedDict()
    try:
        return found(src, strict)
    finally:
        check._CHECKED = kept


def test_a_source_checked_again_gives_what_a_fresh_check_gives():
    conflict = "p.rego:4: error: rule conflicts with rule at p.rego:3:1"
    unused = HEAD + "import data.q\n" + "x := 1 if true\nx := data.v if true\n"
    for n, modules in enumerate(([("p.rego", CONFLICT)], [("p.rego", unused)]), 1):
        src = source(modules, {"v": 2})
        for strict in ((False, True, False, True) if n == 1 else (True, False, True, False)):
            assert found(src, strict) == fresh_check(src, strict)
        assert len(check._CHECKED) == n
    assert found(source([("p.rego", CONFLICT)], {"v": 2})) == [conflict]
    assert "p.rego:3: warning: import data.q is unused" in found(source([("p.rego", unused)], {"v": 2}), True)
    assert "p.rego:3: warning: import data.q is unused" not in found(source([("p.rego", unused)], {"v": 2}))


def test_what_differs_is_checked_afresh():
    conflict = "p.rego:4: error: rule conflicts with rule at p.rego:3:1"
    assert found(source([("p.rego", CONFLICT)], {"v": 2})) == [conflict]
    assert found(source([("p.rego", CONFLICT)], {"v": 1})) == []                       # the data
    assert found(source([("q.rego", CONFLICT)], {"v": 2})) == [conflict.replace("p.rego", "q.rego")]   # the name
    assert found(source([("p.rego", CONFLICT.replace("x := 1", "x := 2"))], {"v": 2})) == []       # the text
    failing_test = ("p_test.rego", "package p_test\nimport rego.v1\ny := 1 if true\ny := 2 if true\n")
    assert found(source([("p.rego", CONFLICT)], {"v": 1}, [failing_test])) == [
        "p_test.rego:4: error: rule conflicts with rule at p_test.rego:3:1"]                   # a test
    assert found(source([("p.rego", CONFLICT)], {"v": 1})) == []
    assert found(source([("p.rego", CONFLICT)], {"v": 2})) == [conflict]


def test_a_policy_calling_an_impure_builtin_is_never_kept():
    for text in (CONFLICT.replace("1 if true", "1 if time.now_ns() > 0"),
                 CONFLICT + "# rand.intn in a comment is enough\n"):
        src = source([("p.rego", text)], {"v": 2})
        assert found(src) == found(src) == ["p.rego:4: error: rule conflicts with rule at p.rego:3:1"]
        assert not check._CHECKED
    assert found(source([("p.rego", CONFLICT)], {"v": 2})) and len(check._CHECKED) == 1


def test_data_that_is_not_plain_json_is_checked_afresh():
    import datetime

    src = source([("p.rego", HEAD + "x := 1 if true\n")], {"when": datetime.date(2026, 12, 3)})
    assert check._content_key(src) is None
    assert found(src) == found(src) == [":0: error: policy data: object cannot be converted to RegoValue"]
    assert not check._CHECKED


def test_only_the_last_few_are_kept():
    for v in range(check._CHECKED_SIZE + 3):
        found(source([("p.rego", CONFLICT)], {"v": v}))
    assert len(check._CHECKED) == check._CHECKED_SIZE
