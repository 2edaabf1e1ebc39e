"""The `opa` engine against a server speaking OPA's REST API with the real OPA Go engine behind it
(tests/support/opa_server.py): policies and data pushed, decisions equal to the embedded engine's, and every
failure (server down, slow, 500, not JSON, no result, a push it refuses) a deny."""
from __future__ import annotations

import shutil

import pytest
import requests

from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.opa import OpaEngine, parse_opa_url
from tests.support.gateway import ROOT
from tests.support.opa import OpaServer

SESSION = {"id": "s1", "workload": "persistent", "labels": {}, "frozen": False, "allow": ["example.com"],
           "workspace": "/workspace", "secrets": [], "stats": {}}


def egress(method="GET", host="example.com", path="/", frozen=False, ip_class=""):
    return {"kind": "egress", "session": {**SESSION, "frozen": frozen},
            "request": {"method": method, "scheme": "https", "host": host, "port": 443, "path": path, "query": {},
                        "headers": {}, "ip": "", "ip_class": ip_class, "secrets": []}}


# The engine's timeout in the failure tests: longer than a busy machine takes to answer a decision (or a push: five
# times this), shorter than the slow fault holds an answer (30 s). A failure must be the one the test injected, never
# a timeout of an answer that was merely late.
TIMEOUT_S = 5.0

INPUTS = [egress(), egress("DELETE"), egress(host="evil.test"), egress(host="pypi.org"),
          egress("POST", frozen=True), egress("POST", path="/r.git/git-receive-pack"),
          egress(ip_class="private"), {"kind": "egress"}, {},
          {"kind": "toolcall", "session": SESSION, "tool": {"name": "read_file", "args": {"path": "/workspace/a"}}}]


@pytest.fixture(scope="module")
def _opa_server(tmp_path_factory):
    with OpaServer(tmp_path_factory.mktemp("opa")) as server:
        yield server


@pytest.fixture
def opa(_opa_server):
    """The module's OPA test server, as freshly started: reset (no modules, data or fault), or started again when the
    test before stopped it (a server that goes away)."""
    if _opa_server.proc is None or _opa_server.proc.poll() is not None:
        _opa_server.start()
    _opa_server.reset()
    return _opa_server


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:8181", ("127.0.0.1", 8181, False)), ("https://opa.internal", ("opa.internal", 443, True)),
    ("http://[::1]:9", ("::1", 9, False)),
])
def test_parse_opa_url(url, expected):
    assert parse_opa_url(url) == expected


@pytest.mark.parametrize("url", ["ftp://x", "127.0.0.1:8181", "http://", "http://h:1/v1"])
def test_parse_opa_url_refuses(url):
    with pytest.raises(ValueError):
        parse_opa_url(url)


async def test_pushes_and_decides_like_the_embedded_engine(opa):
    remote = OpaEngine(ROOT / "policies", opa.url)
    local = EmbeddedEngine(ROOT / "policies", workers=1)
    await remote.start()
    await local.start()
    try:
        listed = requests.get(opa.url + "/v1/policies", timeout=5).json()["result"]
        assert {p["id"] for p in listed} >= {"sandgate/sandgate/egress.rego", "sandgate/sandgate/lib/hosts.rego"}
        assert not any(p["id"].endswith("_test.rego") for p in listed)
        data = requests.get(opa.url + "/v1/data/sandgate/config/egress/base_allow", timeout=5).json()
        assert "pypi.org" in data["result"]
        for doc in INPUTS:
            kind = "toolcall" if doc.get("kind") == "toolcall" else "egress"
            assert (await remote.decide(kind, doc)) == (await local.decide(kind, doc)), doc
        assert remote.health()["state"] == "ok" and remote.health()["rev"] == local.rev
    finally:
        await remote.close()
        await local.close()


@pytest.mark.parametrize("fault, code", [
    ("error", "policy.error"), ("garbage", "policy.error"), ("no_result", "policy.undefined"),
    ("slow", "policy.timeout"),
])
async def test_server_failures_deny(opa, fault, code):
    engine = OpaEngine(ROOT / "policies", opa.url, timeout_s=TIMEOUT_S)
    await engine.start()
    try:
        assert (await engine.decide("egress", egress())).action == "allow"
        opa.fault(fault)
        d = await engine.decide("egress", egress(path="/other"))      # not a cached input
        assert (d.action, d.codes) == ("deny", (code,))
        if fault != "no_result":
            assert engine.health()["state"] == "unreachable"
        opa.fault("")
        assert (await engine.decide("egress", egress(path="/third"))).action == "allow"
        assert engine.health()["state"] == "ok"
    finally:
        await engine.close()


async def test_server_gone_denies(opa):
    engine = OpaEngine(ROOT / "policies", opa.url, timeout_s=TIMEOUT_S)
    await engine.start()
    try:
        opa.stop()
        d = await engine.decide("egress", egress(path="/gone"))
        assert (d.action, d.codes) == ("deny", ("policy.error",))
    finally:
        await engine.close()


async def test_unreachable_at_start_refuses_to_start(tmp_path):
    from tests.support.upstream import free_port

    engine = OpaEngine(ROOT / "policies", f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    with pytest.raises(Exception, match="cannot push"):
        await engine.start()
    await engine.close()


async def test_reload_pushes_changes_and_deletes_removed_modules(opa, tmp_path):
    pol = tmp_path / "pol"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    site = pol / "site.rego"
    site.write_text('package sandgate.egress\nimport rego.v1\n'
                    'deny contains {"code": "site.x", "reason": "x"} if input.request.path == "/x"\n')
    engine = OpaEngine(pol, opa.url)
    await engine.start()
    try:
        assert (await engine.decide("egress", egress(path="/x"))).codes == ("site.x",)
        site.unlink()
        assert await engine.reload() is True
        ids = {p["id"] for p in requests.get(opa.url + "/v1/policies", timeout=5).json()["result"]}
        assert "sandgate/site.rego" not in ids
        assert (await engine.decide("egress", egress(path="/x"))).action == "allow"
        rev = engine.rev
        (pol / "broken.rego").write_text("package sandgate.egress\nimport rego.v1\nx := {\n")
        assert await engine.reload() is False
        assert engine.rev == rev and engine.health()["state"] == "error" and engine.last_error
        assert (await engine.decide("egress", egress(path="/y"))).action == "allow"
    finally:
        await engine.close()


async def test_no_push_decides_with_the_servers_own_policy(opa):
    requests.put(opa.url + "/v1/policies/own", timeout=5, data=(
        'package sandgate.egress\nimport rego.v1\n'
        'decision := {"action": "deny", "reasons": ["own"], "codes": ["own.policy"]}\n')).raise_for_status()
    engine = OpaEngine(ROOT / "policies", opa.url, push=False)
    await engine.start()
    try:
        d = await engine.decide("egress", egress())
        assert (d.action, d.codes) == ("deny", ("own.policy",))
        assert {p["id"] for p in requests.get(opa.url + "/v1/policies", timeout=5).json()["result"]} == {"own"}
        assert engine.cache.enabled is False           # the server may change its policy at any time
        assert (await engine.decide("toolcall", {})).codes == ("policy.undefined",)
    finally:
        await engine.close()


def test_merge_by_package_gathers_imports_once_and_keeps_every_rule():
    from gateway.policy.opapush import merge_by_package, package_of

    merged = merge_by_package([
        ("a.rego", "# head\npackage p.q\n\nimport rego.v1\nimport data.lib as l\n\nx := l.f(1)\n"),
        ("b.rego", "package p.q\nimport rego.v1\n\ny := 2\n"),
        ("c.rego", "package other\nimport rego.v1\nz := 3\n"),
    ])
    assert [pid for pid, _ in merged] == ["sandgate/_package/p.q", "sandgate/_package/other"]
    text = merged[0][1]
    assert text.count("import rego.v1") == 1 and "import data.lib as l" in text
    assert "x := l.f(1)" in text and "y := 2" in text and package_of(text) == "p.q"
    with pytest.raises(ValueError):
        package_of("x := 1\n")


async def test_modules_that_call_each_other_go_up_merged(opa, tmp_path):
    """OPA compiles each PUT against what it holds: two files of one package calling each other's functions
    cannot go up one at a time (the shipped tool-call package is such a pair)."""
    pol = tmp_path / "pol"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (pol / "site").mkdir()
    (pol / "site" / "one.rego").write_text(
        'package sandgate.egress\nimport rego.v1\nsite_a(x) := x + 1\n'
        'deny contains {"code": "site.pair", "reason": "r"} if site_b(input.request.port) == 888\n')
    (pol / "site" / "two.rego").write_text('package sandgate.egress\nimport rego.v1\nsite_b(x) := site_a(x) * 2\n')
    engine = OpaEngine(pol, opa.url)
    await engine.start()
    try:
        ids = {p["id"] for p in requests.get(opa.url + "/v1/policies", timeout=5).json()["result"]}
        assert "sandgate/_package/sandgate.egress" in ids and "sandgate/site/one.rego" not in ids
        assert (await engine.decide("egress", egress())).codes == ("site.pair",)       # (443 + 1) * 2
        assert (await engine.decide("toolcall", {**INPUTS[-1], "tool": {"name": "list_files", "args": {}}})).action \
            == "allow"
    finally:
        await engine.close()
