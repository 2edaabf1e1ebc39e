"""# METADATA annotations (gateway/policy/annotations.py), and the shipped entry packages' rules carrying them."""
from __future__ import annotations

import re

import pytest

from gateway.policy.annotations import read_annotations
from tests.support.gateway import ROOT


def test_a_block_annotates_the_line_after_it():
    text = "package p\n\n# METADATA\n# title: T\n# custom:\n#   code: p.x\nx := 1\n"
    annotations, problems = read_annotations(text)
    assert problems == [] and len(annotations) == 1
    assert annotations[0].line == 3 and annotations[0].target == 7
    assert annotations[0].data == {"title": "T", "custom": {"code": "p.x"}}


@pytest.mark.parametrize("block, message", [
    ("# METADATA\n# title: T\n\nx := 1\n", "followed directly by a rule or package"),
    ("# METADATA\n# title: T\n", "followed directly by a rule or package"),
    ("# METADATA\n# - a list\nx := 1\n", "must be a YAML mapping"),
    ("# METADATA\n# scope: everywhere\nx := 1\n", "scope 'everywhere'"),
    ("# METADATA\n# title: 3\nx := 1\n", "title must be a string"),
    ("# METADATA\n# entrypoint: maybe\nx := 1\n", "entrypoint must be true or false"),
    ("# METADATA\n# custom:\n#   code: 7\nx := 1\n", "custom.code must be a decision code"),
    ("# METADATA\n# custom:\n#   code: not a code\nx := 1\n", "custom.code must be a decision code"),
])
def test_wrong_blocks_are_problems(block, message):
    annotations, problems = read_annotations("package p\n" + block)
    assert annotations == [] and len(problems) == 1 and message in problems[0].message


ENTRY_FILES = ("egress.rego", "toolcall_mcp.rego")
_ITEM_RULE = re.compile(r"^(deny|ask|allow) contains ")


@pytest.mark.parametrize("name", ENTRY_FILES)
def test_every_rule_adding_a_decision_item_is_annotated_with_its_code(name):
    text = (ROOT / "policies" / "sandgate" / name).read_text()
    annotations, problems = read_annotations(text)
    assert problems == []
    by_target = {a.target: a.data for a in annotations}
    lines = text.splitlines()
    rules = [i + 1 for i, line in enumerate(lines) if _ITEM_RULE.match(line)]
    assert rules
    for line in rules:
        data = by_target.get(line)
        assert data and data.get("title") and data.get("description"), (name, line)
        code = data["custom"]["code"]
        body = "\n".join(lines[line - 1:line + 12])
        assert f'"{code}"' in body or code.endswith(".CLASS"), (name, line, code)
