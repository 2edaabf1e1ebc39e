"""The decision cache's promise, checked against the real engine: two inputs the scan cannot tell apart (the
same projection on what the policy can read, readset.py) get the same decision from regorus.

Policies are generated from the ways a rule reads the input (`input.a.b`, `object.get`, `count`, indexing) and
the ways one rule reaches another (its name, `data.<package>.<rule>`, a `data` reference through a variable, a
package written with brackets, the engine's own query of `decision`); inputs differ by one random change. Any
pair with equal projections and different decisions is a decision served to an input it was not taken for."""
from __future__ import annotations

import copy
import functools
import json

import regorus
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gateway.policy.cache import build_trie, project
from gateway.policy.readset import scan_reads
from gateway.policy.rego import ENTRYPOINTS, prepared

READERS = ["input.a", "input.b.c", "input.b", 'object.get(input, "a", 9)', 'object.get(input, ["b", "d"], 9)',
           "count(input.l)", "input.l[0]", 'input["s"]', "sum(input.l)", "input.b[k]", "[x | x := input.l[_]]",
           'input.b["c"]', "count(input.b)", "[i | some i; input.l[i] == 1]", "{k | some k; input.b[k]}",
           "input.l[count(input.l) - 1]", "is_number(input.z)", 'input.b["#len"]', 'input["*"]',
           'count(input.b) + count(object.get(input.b, "#len", []))']
# (package declaration, data path of the package)
PACKAGES = [("sandgate.egress", "sandgate.egress"), ("site.one", "site.one"), ('site["two"]', "site.two"),
            ("site.three.four", "site.three.four")]


def _reference(helper: str, package: str, style: int, imports: set) -> str:
    """An expression reaching rule `helper` of package `package` (a data path)."""
    if style == 0 and package == "sandgate.egress":
        return helper
    if style == 1 and package.startswith("site."):
        return f"[v | v := data.site[_].{helper}]" if package.count(".") == 1 else \
            f"[v | v := data.site[_][_].{helper}]"
    if style == 2 and package.startswith("site."):
        return "[v | some p; v := data.site[p]" + ("" if package.count(".") == 1 else "[_]") + f".{helper}]"
    if style == 4:
        alias = "p_" + package.replace(".", "_")
        imports.add(f"import data.{package} as {alias}")
        return f"{alias}.{helper}"
    if style == 5 and package.startswith("site."):
        imports.add("import data.site")
        return f"site.{package[5:]}.{helper}"
    return f"data.{package}.{helper}"


# The composites' strategies, built once instead of at every draw (hypothesis works out a new strategy's properties
# each time one is built); the same draws.
_HELPERS = st.integers(1, 3)
_PACKAGE = st.sampled_from(PACKAGES)
_READER = st.sampled_from(READERS)
_STYLE = st.integers(0, 5)
_BOOL = st.booleans()
_INDENT = st.sampled_from(["", "\t", "  "])
_WHERE = st.sampled_from(["a", "s", "l", "b", "z", "b.c", "b.d", "l.0", "*", "b.#len"])
_CHANGED_VALUE = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["x", "y"]))


@st.composite
def policies(draw):
    n = draw(_HELPERS)
    helpers = [(f"h{i}", draw(_PACKAGE), draw(_READER)) for i in range(n)]
    modules: dict[str, list[str]] = {}
    for name, (decl, _), reader in helpers:
        body = f"{name} := {reader}" if "[k]" not in reader else f"{name} := {{k: v | some k; v := {reader}}}"
        modules.setdefault(decl, []).append(body)
    conds, shown, entry_rules, imports = [], [], [], set()
    for name, (_, path), _ in draw(st.lists(st.sampled_from(helpers), min_size=1, max_size=3)):
        ref = _reference(name, path, draw(_STYLE), imports)
        if draw(_BOOL):                # a condition of the verdict
            conds.append(f"json.marshal({ref}) == {json.dumps(draw(_VALUE))}")
        else:                          # or shown in the decision: any change of its value changes the decision
            shown.append(f"s{len(shown)}")
            entry_rules.append(f'default s{len(shown) - 1} := "undefined"\ns{len(shown) - 1} := {ref}')
    entry = entry_rules + ['default verdict := "allow"']
    if conds:
        entry.append('verdict := "deny" if {\n\t' + "\n\t".join(conds) + "\n}")
    if draw(_BOOL):              # the entry rule reads the input itself, and is named nowhere else
        shown.append('object.get(input, "s", 0)')
    entry.append('decision := {"action": verdict, "reasons": [], "codes": [], "shown": [' + ", ".join(shown) + "]}")
    modules.setdefault("sandgate.egress", []).extend(entry)
    indent = draw(_INDENT)                                # how the package line starts: the parse decides
    return [indent + "package " + decl + "\nimport rego.v1\n" + ("".join(i + "\n" for i in sorted(imports))
                                                      if decl == "sandgate.egress" else "") +
            "\n".join(rules) + "\n" for decl, rules in modules.items()]


_VALUES = ["1", "2", "[1]", "[]", '{"c":1,"d":2}', "9", '"x"', "{}", '{"c":1}', "[1,2]", "true"]
_VALUE = st.sampled_from(_VALUES)

_inputs = st.fixed_dictionaries({}, optional={
    "a": st.integers(0, 2), "s": st.sampled_from(["x", "y"]), "l": st.lists(st.integers(0, 2), max_size=3),
    "b": st.fixed_dictionaries({}, optional={"c": st.integers(0, 2), "d": st.integers(0, 2),
                                              "#len": st.integers(0, 2)}),
    "z": st.integers(0, 2), "*": st.integers(0, 2)})


@st.composite
def changes(draw, doc):
    """`doc` with one field set, changed or removed."""
    out = copy.deepcopy(doc)
    where = draw(_WHERE)
    value = draw(_CHANGED_VALUE)
    if where == "l.0":
        if isinstance(out.get("l"), list) and out["l"]:
            out["l"][0] = value if value is not None else 0
        return out
    if "." in where:
        top, key = where.split(".")
        target = out.setdefault(top, {}) if isinstance(out.get(top, {}), dict) else None
        if target is None:
            return out
    else:
        target, key = out, where
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value
    return out


@functools.lru_cache(maxsize=64)
def _compiled(modules: tuple[str, ...]):
    """The modules compiled and analysed once (RuntimeError when regorus refuses them): each decision of an
    example, and of an example hypothesis draws again, evaluates a clone of that engine (gateway/policy/rego.py's
    `prepared`), as the product's engines do, instead of compiling the modules three times an example."""
    engine = regorus.Engine()
    for i, text in enumerate(modules):
        engine.add_policy(f"m{i}.rego", text)
    return prepared(engine)


def _decide(modules: list[str], doc: dict):
    engine = _compiled(tuple(modules)).clone()
    engine.set_input_json(json.dumps(doc))
    try:
        return json.dumps(engine.eval_rule(ENTRYPOINTS["egress"]), sort_keys=True, default=str)
    except RuntimeError as exc:
        return f"error: {exc}"[:80]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies(), st.data())
def test_same_projection_same_decision(modules, data):
    try:
        _decide(modules, {})
    except RuntimeError as exc:
        event(f"does not compile: {str(exc).splitlines()[-1][:60] if str(exc) else ''}")
        assume(False)                                    # a combination regorus does not compile
    reads = scan_reads(modules, ENTRYPOINTS.values())
    assume(reads is not None)
    trie = build_trie(reads)
    doc = data.draw(_inputs)
    other = data.draw(changes(doc))
    same = project(doc, trie) == project(other, trie)
    event("same projection" if same else "other projection")
    if same:
        one = _decide(modules, doc)
        event("decision: " + one[:30])
        assert one == _decide(modules, other), (modules, doc, other, sorted(map(str, reads)))


def test_this_differential_runs_in_both_tiers():
    """`make test` and `make test-fast` (and CI, which runs `make test`) both run this file: it is not end to end,
    and nothing in it skips."""
    from pathlib import Path

    from tests.conftest import is_e2e
    here = Path(__file__)
    assert not is_e2e(here)
    assert "pytest.skip" not in here.read_text().replace('"pytest.skip"', "")
