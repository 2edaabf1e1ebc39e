"""Differential for the egress scoped allowlist (`data.sandgate.config.egress.scoped_allow`, what `sandgate policy
suggest` proposes): regorus against the real OPA Go engine, with the shipped policies and a site's data that holds
well-formed, partial and malformed entries, over sessions of every workload and label shape. The shipped data has
no entries, so the main differential never reaches this rule."""
from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.policy.loader import load_policy_dir
from gateway.policy.rego import ENTRYPOINTS, PolicyError, build_engine, evaluate
from tests.support.gateway import ROOT
from tests.support.opa import need_opa

SCOPED = [
    {"hosts": ["api.partner.test:443"], "workload": "persistent", "labels": {"team": "x"}},
    {"hosts": ["*.docs.test", "plain.test"]},
    {"hosts": ["labels.test"], "labels": {"team": "x", "env": "dev"}},
    {"hosts": ["wl.test"], "workload": "ephemeral"},
    {"hosts": "api.partner.test"},                       # malformed: hosts not a list
    {"hosts": ["bad.test"], "labels": ["team"]},          # malformed: labels not an object
    {"hosts": ["num.test"], "labels": {"team": 1}},
    "not an entry",
]
HOSTS = ["api.partner.test", "a.docs.test", "docs.test", "plain.test", "labels.test", "wl.test", "bad.test",
         "num.test", "other.test"]


@pytest.fixture(scope="module")
def engines():
    need_opa()
    from opa_bindings import OpaEngine

    source = load_policy_dir(ROOT / "policies")
    data = copy.deepcopy(source.data)
    data["sandgate"]["config"]["egress"]["scoped_allow"] = SCOPED
    source = dataclasses.replace(source, data=data)
    go = OpaEngine()
    go.print_handler = lambda *_: None
    for rel, text in source.modules:
        go.add_policy(rel, text)
    go.add_data(source.data)
    yield build_engine(source), go
    go.close()


inputs = st.fixed_dictionaries({
    "kind": st.just("egress"),
    "session": st.fixed_dictionaries({
        "id": st.just("s1"), "frozen": st.just(False), "allow": st.just([]),
        "workload": st.sampled_from(["ephemeral", "persistent", "other", 3]),
        "labels": st.one_of(st.dictionaries(st.sampled_from(["team", "env"]), st.sampled_from(["x", "dev", "y", 1]),
                                            max_size=2), st.just([]), st.none()),
    }),
    "request": st.fixed_dictionaries({
        "method": st.sampled_from(["CONNECT", "GET", "POST", "DELETE"]), "scheme": st.just("https"),
        "host": st.sampled_from(HOSTS), "port": st.sampled_from([443, 8443]), "path": st.just("/"),
        "query": st.just({}), "headers": st.just({}), "ip": st.just(""), "ip_class": st.just(""),
    }),
})

SEEN: Counter = Counter()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=inputs)
def test_regorus_and_opa_agree_on_scoped_allow(engines, doc):
    from opa_bindings import OpaError, OpaUndefinedError

    ours_engine, go = engines
    try:
        ours = evaluate(ours_engine, ENTRYPOINTS["egress"], doc, as_json=True)
    except PolicyError:
        ours = "<error>"
    try:
        theirs = go.eval_document(ENTRYPOINTS["egress"].removeprefix("data."), doc)
    except OpaUndefinedError:
        theirs = None
    except OpaError:
        theirs = "<error>"
    assert ours == theirs, doc
    if isinstance(ours, dict):
        SEEN[(ours["action"], "egress.scoped_allow" in ours["codes"])] += 1


def test_the_generator_reached_both_sides():
    assert SEEN[("allow", True)] > 0 and SEEN[("deny", False)] > 0, SEEN
