"""`policy test` keeps the test rules it found in the last few sources it ran, by their exact texts and file names
(gateway/policy/testing.py): the same source runs the same tests, and any change to a module or a test (a name, a
line, a file, a test added) is read afresh."""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest

from gateway.policy import testing
from gateway.policy.loader import PolicySource
from gateway.policy.testing import run_source

MODULE = ("p.rego", "package p\nimport rego.v1\nx := 1 if true\n")
TESTS = "package p_test\nimport rego.v1\nimport data.p\ntest_x if p.x == 1\ntest_y if p.x == 2\n"


def source(modules, tests, data=None) -> PolicySource:
    return PolicySource(Path("/nowhere"), tuple(modules), tuple(tests), data or {}, "r")


def ran(src, run=None) -> list[tuple[str, str, int, str]]:
    return [(r.name, r.file, r.line, r.outcome) for r in run_source(src, run=run).results]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(testing, "_DISCOVERED", OrderedDict())


def test_the_same_source_runs_the_same_tests():
    src = source([MODULE], [("p_test.rego", TESTS)])
    first = ran(src)
    assert first == [("data.p_test.test_x", "p_test.rego", 4, "pass"), ("data.p_test.test_y", "p_test.rego", 5, "fail")]
    assert ran(src) == first and len(testing._DISCOVERED) == 1
    assert ran(src, run="test_y") == first[1:]
    other_data = source([MODULE], [("p_test.rego", TESTS)], {"q": 1})       # the data is not read: the same rules
    assert ran(other_data) == first and len(testing._DISCOVERED) == 1


def test_a_changed_text_or_name_is_read_afresh():
    assert ran(source([MODULE], [("p_test.rego", TESTS)]))[0][1:3] == ("p_test.rego", 4)
    assert ran(source([MODULE], [("p_test.rego", "\n" + TESTS)]))[0][1:3] == ("p_test.rego", 5)      # a line
    assert ran(source([MODULE], [("q_test.rego", TESTS)]))[0][1:3] == ("q_test.rego", 4)             # a file
    renamed = ran(source([MODULE], [("p_test.rego", TESTS.replace("test_y", "test_z"))]))
    assert [r[0] for r in renamed] == ["data.p_test.test_x", "data.p_test.test_z"]
    in_module = ran(source([(MODULE[0], MODULE[1] + "test_in_module if x == 1\n")], [("p_test.rego", TESTS)]))
    assert [r[0] for r in in_module] == ["data.p.test_in_module", "data.p_test.test_x", "data.p_test.test_y"]
    assert len(testing._DISCOVERED) == testing._DISCOVERED_SIZE


def test_a_policy_that_does_not_parse_is_an_error_every_time():
    src = source([MODULE], [("p_test.rego", "package p_test\nimport rego.v1\ntest_x if {\n")])
    for _ in range(2):
        with pytest.raises(testing.PolicyError):
            run_source(src)
    assert not testing._DISCOVERED
