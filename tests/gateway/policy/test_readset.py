"""The decision cache keys on what the policy reads of the input (gateway/policy/readset.py): a changed read
field misses, a changed unread field hits, and a revision that starts reading a field keys on it."""
from __future__ import annotations

import copy
import json

import pytest
import regorus
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.evaluator import Evaluator
from gateway.policy.loader import default_policy_dir, load_policy_dir
from gateway.policy.base import DecisionCache
from gateway.policy.cache import Shared, Stamped, build_trie, compile_projection, project
from gateway.policy.readset import LEN, WILD, scan_reads
from gateway.toolcalls.enrich import build_toolcall_input

HEAD = "package sandgate.egress\nimport rego.v1\n"
QUERIED = "data.sandgate.egress.a"          # the rule the engine evaluates in these modules


@pytest.mark.parametrize("text, reads", [
    ("a if input.request.host == 1", {("request", "host")}),
    ('a if input["request"]["path"] == 1', {("request", "path")}),
    ("a if input.history[i].decision == 1", {("history", WILD, "decision")}),
    ("a if input.xs[0].y", {("xs", 0, "y")}),
    ("a if count(input.history) > 2", {("history", LEN)}),
    ("a if count(input.history) + 1 > 2", {("history", LEN)}),
    ('a if object.get(input, "sql", {}) == 1', {("sql",)}),
    ('a if object.get(input, ["tool", "name"], "") == 1', {("tool", "name")}),
    ("a if count(input.tool.args[k]) > 2", {("tool", "args", WILD, LEN)}),
    ('# input.step in a comment\na if "input.step" == input.kind', {("kind",)}),
    ("a if data.x.input.step", set()),
    ("a if input.a.b[concat(\"\", [x])]", {("a", "b")}),
])
def test_scan_follows_literal_references(text, reads):
    assert scan_reads([HEAD + text], [QUERIED]) == frozenset(reads)


@pytest.mark.parametrize("text", [
    "a if input", "a if walk(input, [p, v])", 'a if object.get(input, k, "")', "a if count(input) > 1",
    "a if f with input as {}", "import input\na if input.x", "import input.tool as t\na if t.x", "a if json.marshal(input)", "x := input\na if x",
])
def test_anything_else_reads_the_whole_input(text):
    assert scan_reads([HEAD + text], [QUERIED]) is None


def key(reads, doc):
    return json.dumps(project(doc, build_trie(reads)), sort_keys=True)


def test_projection_keeps_read_fields_only():
    reads = {("session", "frozen"), ("history", WILD, "decision"), ("history", LEN)}
    doc = {"step": 1, "session": {"frozen": False, "stats": {"n": 1}},
           "history": [{"id": "a", "decision": "allow", "age_s": 1.0}]}
    other = copy.deepcopy(doc)
    other.update(step=2)
    other["session"]["stats"]["n"] = 5
    other["history"][0].update(id="b", age_s=7.5)
    assert key(reads, doc) == key(reads, other)                      # unread fields differ: same key
    for change in (lambda d: d["session"].update(frozen=True), lambda d: d["history"][0].update(decision="deny"),
                   lambda d: d["history"].append({"id": "c"}), lambda d: d["session"].pop("frozen"),
                   lambda d: d.update(history={"0": {"decision": "allow"}})):
        changed = copy.deepcopy(doc)
        change(changed)
        assert key(reads, doc) != key(reads, changed)


def test_a_whole_read_keeps_everything_below():
    reads = {("tool",), ("tool", "args", "x")}
    assert key(reads, {"tool": {"args": {"y": 1}}}) != key(reads, {"tool": {"args": {"y": 2}}})


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_scan_never_raises(text):
    scan_reads([text])


# -- the shipped policies -------------------------------------------------------------------------

SESSION = {"id": "s1", "workload": "persistent", "created_at": 0.0, "labels": {}, "frozen": False,
           "allow": ["example.com"], "workspace": "/workspace", "secrets": [], "stats": {"toolcalls": 3}}


def _entry(i: int, decision: str, frozen: bool) -> dict:
    return {"id": f"t_{i}", "step": i, "age_s": 0.5 * i, "tool": "shell", "summary": f"shell: x{i}",
            "decision": decision, "codes": [], "frozen": frozen, "writes": []}


@pytest.fixture(scope="module")
def shipped():
    source = load_policy_dir(default_policy_dir())
    reads = scan_reads([t for _, t in source.modules])
    assert reads is not None and ("step",) not in reads
    return Evaluator(source), build_trie(reads)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["allow", "deny", "ask"]), st.booleans()), max_size=5),
       st.integers(0, 1000), st.sampled_from(["rm -rf build", "ls", "git push origin main"]))
def test_shipped_policies_same_key_same_decision(shipped, entries, step, command):
    """Two tool calls that differ in everything the policy does not read get the same key, and then the
    same decision from the real engine."""
    evaluator, trie = shipped
    history = [_entry(i, d, f) for i, (d, f) in enumerate(entries)]
    doc = build_toolcall_input(session=SESSION, tool="shell", args={"command": command}, step=step, now=100.0,
                               history=history)
    shifted = build_toolcall_input(session={**SESSION, "stats": {"toolcalls": 99}}, tool="shell",
                                   args={"command": command}, step=step + 7, now=500.0,
                                   history=[{**h, "id": h["id"] + "x", "step": h["step"] + 7,
                                             "age_s": h["age_s"] + 3} for h in history])
    assert project(doc, trie) == project(shifted, trie)
    assert evaluator.decide("toolcall", doc) == evaluator.decide("toolcall", shifted)


def test_shipped_history_decisions_change_the_key(shipped):
    evaluator, trie = shipped
    denied = [_entry(i, "deny", False) for i in range(3)]
    mixed = denied[:2] + [_entry(2, "allow", False)]
    a, b = (build_toolcall_input(session=SESSION, tool="shell", args={"command": "rm -rf build"}, step=4,
                                 now=10.0, history=h) for h in (denied, mixed))
    assert project(a, trie) != project(b, trie)
    assert "toolcall.after_denials" in evaluator.decide("toolcall", a)["codes"]
    assert "toolcall.after_denials" not in evaluator.decide("toolcall", b)["codes"]


@pytest.mark.parametrize("one, two, same", [
    ("SELECT abalance FROM pgbench_accounts WHERE aid = 1", "SELECT abalance FROM pgbench_accounts WHERE aid = 2",
     True),
    ("DELETE FROM t WHERE id = 1 OR 1 = 2", "DELETE FROM t WHERE id = 1 OR 1 = 1", False),
])
def test_shipped_policies_key_sql_on_its_facts_not_its_text(shipped, one, two, same):
    """The shipped tool-call policy reads a statement's facts, not its text: two statements that differ only in
    constants the facts do not depend on share a key (and the decision), and those whose facts differ do not."""
    evaluator, trie = shipped
    a, b = (build_toolcall_input(session=SESSION, tool="sql", args={"query": q, "database": "prod"}, step=1,
                                 now=10.0, history=[]) for q in (one, two))
    assert (project(a, trie) == project(b, trie)) is same
    if same:
        assert evaluator.decide("toolcall", a) == evaluator.decide("toolcall", b)
    else:
        assert evaluator.decide("toolcall", a) != evaluator.decide("toolcall", b)


# -- the engine's cache ---------------------------------------------------------------------------

def _write(tmp_path, body: str):
    (tmp_path / "egress.rego").write_text(HEAD + body)
    (tmp_path / "toolcall.rego").write_text("package sandgate.toolcall\nimport rego.v1\n"
                                           'decision := {"action": "allow", "reasons": [], "codes": []}\n')
    return tmp_path


async def test_cache_hits_on_unread_field_misses_on_read_field_and_a_new_revision_rekeys(tmp_path):
    allow = '{"action": "allow", "reasons": [], "codes": []}'
    deny = '{"action": "deny", "reasons": ["no"], "codes": ["x"]}'
    engine = EmbeddedEngine(_write(tmp_path, f'default decision := {deny}\ndecision := {allow} if input.a == 1\n'),
                            workers=1)
    await engine.start()
    try:
        c = engine.cache
        assert (await engine.decide("egress", {"a": 1, "b": 1})).action == "allow"
        assert (c.hits, c.misses) == (0, 1)
        assert (await engine.decide("egress", {"a": 1, "b": 2})).action == "allow"       # b unread: a hit
        assert (c.hits, c.misses) == (1, 1)
        assert (await engine.decide("egress", {"a": 2, "b": 2})).action == "deny"        # a read: a miss
        assert (c.hits, c.misses) == (1, 2)
        # a revision that starts reading b: b is in the key, and nothing from the old revision is served
        _write(tmp_path, f'default decision := {deny}\ndecision := {allow} if {{\n\tinput.a == 1\n\tinput.b == 1\n}}\n')
        assert await engine.reload() is True
        assert ("b",) in c.reads
        assert (await engine.decide("egress", {"a": 1, "b": 2})).action == "deny"
        assert (await engine.decide("egress", {"a": 1, "b": 1})).action == "allow"
        assert (await engine.decide("egress", {"a": 1, "b": 3})).action == "deny"
        assert c.hits == 1
    finally:
        await engine.close()


# -- rules nothing refers to ----------------------------------------------------------------------

@pytest.mark.parametrize("extra, whole_read", [
    ("", False),                                                            # `h` is never used
    ("allow if count(h) > 0", True),                                        # used by name
    ("allow if count(data.sandgate.egress.h) > 0", True),                   # used through data
    ("allow if count(data.sandgate.egress) > 0", True),                     # the package read whole
    ('allow if count(data.sandgate["egress"][k]) > 0', True),
])
def test_an_unreferenced_rule_reads_nothing(extra, whole_read):
    reads = scan_reads([HEAD + "h := object.get(input, \"history\", [])\nallow if input.a\n" + extra],
                       ["data.sandgate.egress.allow"])
    assert (("history",) in reads) is whole_read and ("a",) in reads


def test_a_piece_holding_two_rules_is_never_dropped():
    text = HEAD + "h := input.x\n  g := input.y\nallow if g\n"
    assert ("y",) in scan_reads([text], ["data.sandgate.egress.allow"])


@pytest.mark.parametrize("site", [
    "package sandgate.toolcall\nimport rego.v1\nask contains {\"code\": \"s\", \"reason\": \"r\"} if {\n"
    "\tsome h in history\n\th.summary == \"x\"\n}\n",
    "package site\nimport rego.v1\nimport data.sandgate.toolcall\nx := toolcall.history\n",
])
def test_a_site_rule_using_the_history_helper_keys_on_the_whole_history(site):
    source = load_policy_dir(default_policy_dir())
    assert ("history",) not in scan_reads([t for _, t in source.modules])
    assert ("history",) in scan_reads([t for _, t in source.modules] + [site])


_paths = st.lists(st.lists(st.one_of(st.sampled_from(["a", "b", "c", WILD]), st.integers(0, 2)), min_size=1,
                           max_size=3).map(lambda p: tuple(p) + (LEN,) if len(p) == 3 and p[0] == "c" else tuple(p)),
                  max_size=5)
_docs = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3)),
                     lambda kids: st.one_of(st.lists(kids, max_size=3),
                                            st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), kids, max_size=4)),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_paths, _docs)
def test_compiled_projection_is_project(paths, doc):
    trie = build_trie(paths)
    assert compile_projection(trie)(doc) == project(doc, trie)


def same(one, other) -> bool:
    """Two projections alike as the key sees them, as JSON: 0, False and 0.0 are different values to a policy (and in
    the key), which Python's == makes one (drawn apart, `{"c": 0}` and `{"c": False}` must key apart)."""
    return json.dumps(one, sort_keys=True) == json.dumps(other, sort_keys=True)


def _wrap(doc, mask):
    return {k: Shared(v) if m and isinstance(v, dict) else v for (k, v), m in zip(doc.items(), mask)}


@settings(max_examples=400, deadline=None)
@given(_paths, st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _docs, max_size=4),
       st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _docs, max_size=4),
       st.lists(st.booleans(), min_size=4, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4),
       st.booleans())
def test_shared_parts_key_like_the_whole_projection(paths, doc1, doc2, mask1, mask2, counted):
    """Top-level values marked Shared are serialised once per object: two inputs with the same key still
    project alike, and the same content keys the same whether its objects are new or seen before."""
    paths = paths + [(LEN,)] if counted else paths          # count(input) reads how many keys there are
    cache = DecisionCache()
    cache.enabled = True
    cache.set_reads(frozenset(paths))
    trie = build_trie(paths)
    one, two = _wrap(doc1, mask1), _wrap(doc2, mask2)
    k1, k2 = cache.key("toolcall", one), cache.key("toolcall", two)
    if k1 == k2:
        assert same(project(doc1, trie), project(doc2, trie))
    again = _wrap(copy.deepcopy(doc1), mask1)
    assert cache.key("toolcall", one) == k1 == cache.key("toolcall", again)
    if same(project(doc1, trie), project(doc2, trie)) and [isinstance(v, Shared) for v in one.values()] == [
            isinstance(v, Shared) for v in two.values()] and list(one) == list(two):
        assert k1 == k2


@pytest.mark.parametrize("one, two", [
    ({"a": Shared({})}, {"b": Shared({})}),                              # same projection, other key
    ({"a": Shared({"x": 1})}, {"a": Shared({"x": 2})}),
    ({"a": Shared({}), "c": 1}, {"a": {}, "c": 1}),                     # a read field shared or not: same
])
def test_shared_parts_tell_keys_and_values_apart(one, two):
    cache = DecisionCache()
    cache.enabled = True
    cache.set_reads(frozenset({("a",), ("b",), ("c",)}))
    trie = build_trie({("a",), ("b",), ("c",)})
    assert (cache.key("k", one) == cache.key("k", two)) == (project(one, trie) == project(two, trie)) or (
        any(isinstance(v, Shared) for v in one.values()) != any(isinstance(v, Shared) for v in two.values()))


_stamped_docs = st.lists(st.tuples(st.dictionaries(st.sampled_from(["a", "b", "c"]), _docs, max_size=3),
                                   st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 3)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(_paths, _stamped_docs)
def test_projection_of_stamped_entries_is_the_projection_of_plain_ones(paths, entries):
    """History entries are Stamped (a shared base, one field set per call): projecting them (once per base when
    the field is not read) gives what projecting the plain dicts gives, call after call."""
    from gateway.policy.cache import Stamped
    trie = build_trie([("h",) + p for p in paths])
    proj = compile_projection(trie)
    bases = [Shared({**d, f: 0}) for d, f, _ in entries]
    for shift in range(2):
        stamped = {"h": [Stamped(b, f, v + shift) for b, (_, f, v) in zip(bases, entries)]}
        plain = {"h": [dict(s) for s in stamped["h"]]}
        assert proj(stamped) == project(plain, trie)


# Paths under `h` as history rules read them (`h[_].a`, `count(h)`), sometimes with others mixed in.
_list_paths = st.tuples(st.lists(st.sampled_from([(WILD, "a"), (WILD, "b"), (WILD, "c"), (WILD, "d"), (LEN,)]),
                                 max_size=3), st.lists(_paths, max_size=1)).map(lambda t: t[0] + [p for ps in t[1]
                                                                                                   for p in ps])


@settings(max_examples=400, deadline=None)
@given(_list_paths, _stamped_docs, st.lists(st.integers(0, 3), min_size=4, max_size=4), st.booleans())
def test_stamped_lists_key_like_their_projection(paths, entries, other_values, counted):
    """A top-level list of Stamped entries is keyed once per run of shared bases when no rule reads the stamped
    field of its elements: keys still tell apart exactly what the projection tells apart."""
    from gateway.policy.cache import Stamped
    paths = [("h",) + p for p in paths] + ([(LEN,)] if counted else [])
    cache = DecisionCache()
    cache.enabled = True
    cache.set_reads(frozenset(paths))
    trie = build_trie(paths)
    bases = [Shared({**d, f: 0}) for d, f, _ in entries]
    one = {"h": [Stamped(b, f, v) for b, (_, f, v) in zip(bases, entries)], "x": 1}
    two = {"h": [Stamped(b, f, w) for b, (_, f, _), w in zip(bases, entries, other_values)], "x": 1}
    plain = [{"h": [dict(e) for e in d["h"]], "x": 1} for d in (one, two)]
    same_projection = same(project(plain[0], trie), project(plain[1], trie))
    k1, k2 = cache.key("k", one), cache.key("k", two)
    assert (k1 == k2) == same_projection
    assert cache.key("k", one) == k1                 # from the kept fragment


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=8),
       st.text(max_size=5), st.floats(allow_nan=False))
def test_stamp_is_stamped(base, field, value):
    """The hot path's constructor gives what the class gives: the same dict, base and field."""
    from gateway.policy.cache import stamp
    shared = Shared(base)
    fast, slow = stamp(shared, field, value), Stamped(shared, field, value)
    assert type(fast) is type(slow) is Stamped
    assert fast == slow == {**base, field: value} and list(fast) == list(slow)
    assert fast.base is slow.base is shared and fast.field == slow.field == field


# -- every way a rule is reached counts (regression: these reads were dropped, and the cache served one decision
# -- for inputs the policy tells apart) ------------------------------------------------------------------------

@pytest.mark.parametrize("modules, read", [
    # the entry rule is queried by the engine, not named in any module
    (['package sandgate.toolcall\nimport rego.v1\ndecision := {"action": input.tool.name, "reasons": [], "codes": []}\n'],
     ("tool", "name")),
    (['package sandgate.egress\nimport rego.v1\ndecision := object.union(base, {"action": input.request.host})\n'
      'base := {"reasons": [], "codes": []}\n'], ("request", "host")),
    # a package reached with a variable, the rule named after it
    ([HEAD + "allow if data.sandgate[p].h\n", "package sandgate.site\nimport rego.v1\nh := input.a\n"], ("a",)),
    ([HEAD + "allow if data.sandgate[_].h == 1\n", "package sandgate.site\nimport rego.v1\nh := input.a\n"], ("a",)),
    ([HEAD + "allow if data[p][q].h == 1\n", "package sandgate.site\nimport rego.v1\nh := input.a\n"], ("a",)),
    ([HEAD + "x := [v | v := data.site[_].h]\nallow if count(x) > 0\n", "package site.one\nimport rego.v1\nh := input.a\n"],
     ("a",)),
    ([HEAD + "import data.site\nallow if site[_].h\n", "package site.one\nimport rego.v1\nh := input.a\n"], ("a",)),
    # a package path written with brackets
    ([HEAD + "allow if data.site.one.h\n", 'package site["one"]\nimport rego.v1\nh := input.a\n'], ("a",)),
    ([HEAD + "allow if data.site.one.h\n", 'package site[`one`]\nimport rego.v1\nh := input.a\n'], ("a",)),
])
def test_a_rule_reached_without_its_name_still_reads(modules, read):
    from gateway.policy.rego import ENTRYPOINTS
    reads = scan_reads(modules, ENTRYPOINTS.values())
    assert reads is None or read in reads


@pytest.mark.parametrize("text", [
    'a if $"{input.step}" == "3"',             # OPA 1.12 string interpolation: references inside a string
    'a if $`{input.step}` == "3"',
    'x := $"{h}"\nh := input.step\na if x == "3"',
])
def test_interpolated_strings_read_the_whole_input(text):
    assert scan_reads([HEAD + text]) is None


@pytest.mark.parametrize("text", [
    "a if time.now_ns() > 0", "a if time . now_ns() > 0", "a if net.lookup_ip_addr(input.h)",
    'a if io.jwt.decode_verify(input.t, {"secret": "k"})[0]',
    "a if crypto.x509.parse_and_verify_certificates(input.c)[0]",
    "a if rand.intn(\"x\", 2) == 1", "a if uuid.rfc4122(\"x\")", "a if http.send({})", "a if opa.runtime()",
])
def test_impure_or_clock_dependent_builtins_turn_the_cache_off(text):
    from gateway.policy.cache import IMPURE, read_set
    assert IMPURE.search(HEAD + text) is not None
    assert read_set([("m.rego", HEAD + text)], (QUERIED,)) == (False, read_set([("m.rego", HEAD + text)],
                                                                            (QUERIED,))[1])


async def test_an_entry_rule_that_reads_input_directly_is_never_served_another_inputs_decision(tmp_path):
    """A proxy-only policy directory (no tool-call package) whose `decision` reads the input itself: the
    engine queries that rule, so what it reads is in the key."""
    (tmp_path / "egress.rego").write_text(HEAD + 'decision := {"action": input.verdict, "reasons": [], "codes": []}\n')
    engine = EmbeddedEngine(tmp_path, workers=1)
    await engine.start()
    try:
        assert (await engine.decide("egress", {"verdict": "allow"})).action == "allow"
        assert (await engine.decide("egress", {"verdict": "deny"})).action == "deny"
        assert (await engine.decide("egress", {"verdict": "ask"})).action == "ask"
    finally:
        await engine.close()


@pytest.mark.parametrize("text, reads", [
    ("count(x) := x.secret\na := count(input.a)", {("a",)}),                  # not the builtin: reads all of a
    ('object.get(x, y, z) := x\na := object.get(input, "a", 1)', None),       # returns the whole input
    ('import data.lib as object\na := object.get(input, "a", 1)', None),
    ('a := [count(input.a), object.get(input, "b", 1)]', {("a", LEN), ("b",)}),   # the builtins
])
def test_count_and_object_get_are_special_only_while_they_are_the_builtins(text, reads):
    got = scan_reads([HEAD + text + "\n"], [QUERIED])
    assert got == (frozenset(reads) if reads is not None else None)
    doc = {"a": {"secret": 5}, "b": 1}
    engine = regorus.Engine()
    engine.add_policy("m.rego", HEAD + text + "\n")
    if "data.lib" not in text:
        engine.set_input_json(json.dumps(doc))
        assert engine.eval_rule(QUERIED) is not None         # regorus takes these definitions


@pytest.mark.parametrize("text", [
    "\tpackage sandgate.egress\nimport rego.v1\nh := input.x\na if data.sandgate.egress.h\n",
    "  package sandgate.egress\nimport rego.v1\nh := input.x\na if data.sandgate.egress.h\n",
    'package sandgate["egress"]\nimport rego.v1\nh := input.x\na if data.sandgate.egress.h\n',
])
def test_the_package_is_the_parsers_however_the_line_is_written(text):
    assert scan_reads([text], [QUERIED]) == frozenset({("x",)})


@pytest.mark.parametrize("key", ["#len", "*", "WILD", "LEN"])
def test_a_key_named_like_a_marker_is_a_key(key):
    reads = scan_reads([HEAD + f'a if input.q["{key}"] == 1\n'], [QUERIED])
    assert reads == frozenset({("q", key)})
    one, other = {"q": {key: 1, "z": 1}}, {"q": {key: 2, "z": 1}}
    assert key_of(reads, one) != key_of(reads, other)                     # the value of that key is in the key
    assert key_of(reads, one) == key_of(reads, {"q": {key: 1, "z": 2}})   # and no other key of q


def key_of(reads, doc):
    return json.dumps(project(doc, build_trie(reads)))


def test_a_builtin_replaced_with_with_reads_the_whole_input():
    text = HEAD + "f(x) := x.secret\nb := count(input.a)\na := b with count as f\n"
    assert scan_reads([text], [QUERIED]) is None


_patched_docs = st.tuples(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _docs, max_size=4),
                          st.sets(st.sampled_from(["a", "b", "c", "d"]), max_size=2))


# One value a changed field (`fields` holds at most two: two of the four drawn each were never used).
@settings(max_examples=400, deadline=None)
@given(st.lists(_paths, max_size=1), _patched_docs, st.lists(_docs, min_size=2, max_size=2),
       st.lists(_docs, min_size=2, max_size=2), st.booleans(), st.booleans())
def test_patched_values_key_like_their_projection(paths, doc, values, other_values, counted, whole):
    """A session's input is a Patched value (its unchanging part Shared, its age and counters set per call): it
    is keyed once per base when no rule reads a changed field, and keys still tell apart exactly what the
    projection tells apart, whether the changed fields are read or not; projecting it is projecting the plain
    dict."""
    from gateway.policy.cache import Patched, patch
    body, fields = doc
    fields = frozenset(fields)
    paths = [("s",) + p for ps in paths for p in ps] + ([("s",)] if whole else []) + ([(LEN,)] if counted else [])
    cache = DecisionCache()
    cache.enabled = True
    cache.set_reads(frozenset(paths))
    trie = build_trie(paths)
    base = Shared({**body, **dict.fromkeys(fields, 0)})
    one = {"s": patch(base, dict(zip(sorted(fields), values)), fields), "x": 1}
    two = {"s": patch(base, dict(zip(sorted(fields), other_values)), fields), "x": 1}
    assert type(one["s"]) is Patched and one["s"].base is base and list(one["s"]) == list(base)
    plain = [{"s": dict(d["s"]), "x": 1} for d in (one, two)]
    assert compile_projection(trie)(one) == project(plain[0], trie)
    k1, k2 = cache.key("k", one), cache.key("k", two)
    assert (k1 == k2) == same(project(plain[0], trie), project(plain[1], trie))
    assert cache.key("k", one) == k1                 # from the kept fragment
    again = {"s": patch(Shared(copy.deepcopy(dict(base))), dict(zip(sorted(fields), values)), fields), "x": 1}
    assert cache.key("k", again) == k1               # a new base of the same content: the same key
