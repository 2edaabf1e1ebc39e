"""The policy author's traps: the CONNECT every HTTPS request starts with (a `policy check --strict` warning, and a
403 inside an allowed tunnel that names the request, not the allow list), shipped tests that pass beside site rules
that are not null-safe, and `policy test` saying which directory it tests and counting an error once."""
from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

import pytest
import requests

from gateway.policy.evaluator import Evaluator
from gateway.policy.loader import load_policy_dir
from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import ROOT, Sandgate
from tests.support.upstream import Upstream, make_cert


def sandgate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command in this process (tests/support/cli.py): what it reports is the question here; the processes
    of `policy check`, `test` and `eval` are tested in tests/gateway/test_policy_cli.py."""
    return run_cli(*args, env=env)


def policy_copy(tmp_path, site: dict[str, str]):
    pol = tmp_path / "pol"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.md"))
    for rel, text in site.items():
        (pol / rel).parent.mkdir(parents=True, exist_ok=True)
        (pol / rel).write_text(textwrap.dedent(text).lstrip())
    return pol


READ_ONLY_ALLOW = """
    package sandgate.egress

    import rego.v1

    allow contains {"code": "site.docs_read", "reason": "docs are readable"} if {
        input.request.host == "secure.test"
        input.request.method in {METHODS}
    }
    """


# -- policy check --strict: the CONNECT warning -----------------------------------------------------------------

@pytest.mark.parametrize("rule, warned", [
    (READ_ONLY_ALLOW.replace("{METHODS}", '{"GET", "HEAD"}'), "this allow restricts input.request.method"),
    (READ_ONLY_ALLOW.replace("{METHODS}", '{"CONNECT", "GET", "HEAD"}'), None),
    ("""
     package sandgate.egress

     import rego.v1

     deny contains {"code": "site.reads_only", "reason": "reads only"} if {
         input.request.host == "wiki.test"
         not input.request.method in {"GET", "HEAD"}
     }
     """, "this deny applies to every method but some, CONNECT included"),
    ("""
     package sandgate.egress

     import rego.v1

     deny contains {"code": "site.no_put", "reason": "no PUT"} if input.request.method == "PUT"
     """, None),
    ("""
     package sandgate.egress

     import rego.v1

     ask contains {"code": "site.posts", "reason": "posts ask"} if method != "GET"
     """, "this ask applies to every method but some"),
])
def test_check_strict_warns_about_a_method_restriction_without_connect(tmp_path, rule, warned):
    pol = policy_copy(tmp_path, {"site/rule.rego": rule})
    strict = sandgate("policy", "check", str(pol), "--strict")
    if warned is None:
        assert strict.returncode == 0, strict.stdout
        return
    assert strict.returncode == 1
    assert f"site/rule.rego:5: warning: {warned}" in strict.stdout, strict.stdout
    assert "CONNECT" in strict.stdout
    assert sandgate("policy", "check", str(pol)).returncode == 0          # a strict-mode warning only


def test_check_strict_finds_no_connect_trap_in_the_shipped_policies():
    proc = sandgate("policy", "check", str(ROOT / "policies"), "--strict")
    assert proc.returncode == 0 and "CONNECT" not in proc.stdout, proc.stdout


# -- shipped tests beside site rules that are not null-safe -------------------------------------------------------

UNSAFE_SITE_RULES = {
    "site/egress_unsafe.rego": """
        package sandgate.egress

        import rego.v1

        deny contains {"code": "site.a", "reason": "a"} if endswith(input.request.host, ".internal.example")
        deny contains {"code": "site.b", "reason": "b"} if startswith(input.request.path, "/admin")
        deny contains {"code": "site.c", "reason": "c"} if lower(input.request.method) == "trace"
        deny contains {"code": "site.d", "reason": "d"} if contains(input.request.scheme, "ftp")
        deny contains {"code": "site.e", "reason": "e"} if startswith(input.session.id, "banned")
        """,
    "site/toolcall_unsafe.rego": """
        package sandgate.toolcall

        import rego.v1

        deny contains {"code": "site.a", "reason": "a"} if startswith(input.tool.name, "rocket")
        deny contains {"code": "site.b", "reason": "b"} if startswith(input.tool.args.command, "terraform destroy")
        deny contains {"code": "site.c", "reason": "c"} if startswith(input.tool.args.path, "/etc/shadow")
        deny contains {"code": "site.d", "reason": "d"} if endswith(input.tool.args.url, ".onion")
        deny contains {"code": "site.e", "reason": "e"} if startswith(input.session.labels.env, "prod")
        """,
}


def test_shipped_tests_pass_beside_site_rules_that_are_not_null_safe(tmp_path):
    pol = policy_copy(tmp_path, UNSAFE_SITE_RULES)
    proc = sandgate("policy", "test", str(pol))
    assert proc.returncode == 0, proc.stdout
    assert "ERROR" not in proc.stdout and proc.stdout.splitlines()[-1].endswith("passed, 0 failed")


@pytest.mark.parametrize("kind, doc, codes", [
    ("egress", {"kind": "egress", "session": {"id": "s", "allow": ["example.com"]},
                "request": {"method": "GET", "host": None, "port": 443, "path": "/"}}, None),
    ("egress", {"kind": "egress", "session": {"id": "s", "allow": ["example.com"]},
                "request": {"method": "GET", "host": 7, "port": 443, "path": "/"}}, None),
    ("toolcall", {"kind": "toolcall", "session": {"id": "s"}, "tool": {"name": 5, "args": {}}},
     ["toolcall.invalid_input"]),
])
def test_the_shipped_policy_alone_denies_inputs_of_the_wrong_type(kind, doc, codes):
    """What the shipped rego tests no longer feed (a site rule beside them would make them errors)."""
    decision = Evaluator(load_policy_dir(ROOT / "policies")).decide(kind, doc)
    assert decision["action"] == "deny", decision
    if codes is not None:
        assert decision["codes"] == codes


# -- policy test: which directory, errors counted once ---------------------------------------------------------

def test_policy_test_without_a_directory_says_which_it_tests(tmp_path):
    shipped = sandgate("policy", "test", "--run", "egress_test.test_allow_listed_host",
                       env={"SANDGATE_CONFIG": ""})
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    assert "the shipped policies: no policy.dir is configured" in shipped.stderr
    pol = policy_copy(tmp_path, {})
    config = tmp_path / "sandgate.toml"
    config.write_text(f'[policy]\ndir = "{pol}"\n')
    mine = sandgate("policy", "test", "--config", str(config), "--run", "egress_test.test_allow_listed_host")
    assert mine.returncode == 0 and f"sandgate policy test: {pol} (policy.dir)" in mine.stderr, mine.stderr
    check = sandgate("policy", "check", "--config", str(config))
    assert check.returncode == 0 and f"sandgate policy check: {pol} (policy.dir)" in check.stderr
    explicit = sandgate("policy", "test", str(pol), "--run", "egress_test.test_allow_listed_host")
    assert explicit.stderr == ""


# -- a 403 inside an allowed tunnel names the request ----------------------------------------------------------

@pytest.mark.e2e
def test_a_403_inside_an_allowed_tunnel_names_the_request_not_the_allow_list(tmp_path):
    cert = make_cert(tmp_path / "certs", ["secure.test"])
    pol = policy_copy(tmp_path, {"site/docs_read.rego": READ_ONLY_ALLOW.replace(
        "{METHODS}", '{"CONNECT", "GET", "HEAD"}')})
    with Upstream(tls=cert) as up:
        cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert},
               "policy": {"dir": str(pol)}}
        with Sandgate(tmp_path / "gw", cfg) as sg:
            sess = sg.session(allow=[])                       # secure.test is on no allow list: the site rule
            url = f"https://secure.test:{up.port}/page"
            got = requests.get(url, proxies=sess["proxies"], verify=sess["ca_file"], timeout=30)
            assert got.status_code == 200, got.text
            posted = requests.post(url, data=b"x", proxies=sess["proxies"], verify=sess["ca_file"], timeout=30)
            assert posted.status_code == 403
            body = posted.json()
            assert body["code"] == "egress.request_not_allowed"
            assert "allow list" not in body["reason"] and "POST" in body["reason"], body
            # the CLI's view of the same two steps
            view = tmp_path / "session.json"
            view.write_text(json.dumps(sg.call("GET", f"/v1/sessions/{sess['id']}").json()))
            proc = sandgate("policy", "eval", "--request", f"POST {url}", "--session-file", str(view), "--policies",
                            str(pol), "--data-dir", str(tmp_path / "cli"))
            assert json.loads(proc.stdout)["codes"] == ["egress.request_not_allowed"], proc.stdout + proc.stderr
            assert f"CONNECT secure.test:{up.port} -> allow" in proc.stderr
