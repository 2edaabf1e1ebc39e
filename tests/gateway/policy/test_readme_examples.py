"""The worked site-rule examples in policies/README.md compile beside the shipped policies, their test passes,
and each one changes the decision it says it changes."""
from __future__ import annotations

import re
import shutil

import pytest

from gateway.policy.evaluator import Evaluator
from gateway.policy.loader import load_policy_dir
from gateway.policy.testing import run_tests
from tests.support.gateway import ROOT

BLOCKS = re.findall(r"\*\*\d+\. [^*]+\*\* \(`(site/[\w./]+)`\).*?```rego\n(.*?)```",
                    (ROOT / "policies" / "README.md").read_text(), re.S)
TEST_BLOCK = re.search(r"\(`(site/budget_test\.rego)`\).*?```rego\n(.*?)```",
                       (ROOT / "policies" / "README.md").read_text(), re.S)


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    pol = tmp_path_factory.mktemp("pol")
    shutil.copytree(ROOT / "policies", pol, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for rel, text in BLOCKS + [TEST_BLOCK.groups()]:
        (pol / rel).parent.mkdir(parents=True, exist_ok=True)
        (pol / rel).write_text(text)
    return pol


def test_the_examples_are_found():
    assert len(BLOCKS) == 6 and TEST_BLOCK is not None


def test_examples_compile_and_their_test_passes(site_dir):
    report = run_tests(site_dir, run=r"^data\.site\.")
    assert [r.outcome for r in report.results] == ["pass"], report.results


SESSION = {"id": "s", "workload": "ephemeral", "allow": ["example.com"], "labels": {}, "frozen": False,
           "stats": {"requests": 1}}


def egress(host="example.com", method="GET", port=443, **session):
    return {"kind": "egress", "session": {**SESSION, **session},
            "request": {"method": method, "host": host, "port": port, "path": "/", "ip_class": ""}}


@pytest.mark.parametrize("kind, doc, action, code", [
    ("egress", egress("pastebin.com"), "deny", "site.blocked_host"),
    ("egress", egress("mirror.corp.example"), "allow", "site.mirror"),
    ("egress", egress("mirror.corp.example", port=80), "deny", "egress.not_allowlisted"),
    ("egress", egress(stats={"requests": 1000}), "deny", "site.budget"),
    ("egress", egress("b.s3.amazonaws.com", "PUT", allow=["*.s3.amazonaws.com"]), "ask", "site.upload"),
    ("egress", egress(), "allow", "egress.allowed"),
    ("egress", egress("docs.corp.example", "CONNECT", allow=[]), "allow", "site.docs_read"),
    ("egress", egress("docs.corp.example", "GET", allow=[]), "allow", "site.docs_read"),
    ("egress", egress("docs.corp.example", "POST", allow=[]), "deny", "egress.not_allowlisted"),
    ("toolcall", {"kind": "toolcall", "session": {**SESSION, "labels": {"env": "prod"}},
                  "tool": {"name": "sql", "args": {"query": "select 1"}}}, "deny", "site.prod_sql"),
])
def test_each_example_changes_what_it_says(site_dir, kind, doc, action, code):
    decision = Evaluator(load_policy_dir(site_dir)).decide(kind, doc)
    assert decision["action"] == action and code in decision["codes"], decision
