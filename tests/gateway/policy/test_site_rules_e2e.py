"""Site rules change decisions live, through the proxy and through /v1/toolcalls, without editing shipped files.

A real sandgate process with `policy.dir` = a copy of the shipped policies; the test adds files in `site/`
(any depth, same entry packages) and watches decisions change once the watcher reloads them.
"""
from __future__ import annotations

import hashlib
import shutil
import time

import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate


def wait_for(predicate, timeout=20.0, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def shipped_digest(directory) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and "site" not in p.parts):
        h.update(path.relative_to(directory).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def toolcall(sg, sess, tool, args):
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": tool, "args": args, "step": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_site_rules_change_decisions_live(tmp_path, upstream):
    pol = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    before = shipped_digest(pol)
    cfg = {**LOOPBACK_CONFIG, "policy": {"dir": str(pol)}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        sess = sg.session(workload="persistent", allow=["allowed.test"])
        proxies = sess["proxies"]
        allowed = f"http://allowed.test:{upstream.port}/x"
        other = f"http://other.test:{upstream.port}/y"
        assert requests.get(allowed, proxies=proxies, timeout=30).status_code == 200
        assert requests.get(other, proxies=proxies, timeout=30).status_code == 403
        assert toolcall(sg, sess, "sql", {"query": "select 1", "database": "app"})["decision"] == "allow"

        site = pol / "site" / "team"
        site.mkdir(parents=True)
        (site / "egress_rules.rego").write_text(
            "package sandgate.egress\n\nimport rego.v1\n\n"
            'deny contains {"code": "site.blocked_path", "reason": "the site blocks /x"} if {\n'
            '\tinput.request.path == "/x"\n}\n\n'
            'allow contains {"code": "site.open_host", "reason": "other.test is open to every session"} if {\n'
            '\tinput.request.host == "other.test"\n}\n')
        (site / "toolcall_rules.rego").write_text(
            "package sandgate.toolcall\n\nimport rego.v1\n\n"
            'deny contains {"code": "site.no_sql", "reason": "the site forbids SQL"} if {\n'
            '\tinput.tool.name == "sql"\n}\n')
        (site / "egress_rules_test.rego").write_text(          # never loaded for decisions
            "package sandgate.egress\n\nimport rego.v1\n\n"
            'deny contains {"code": "site.from_a_test_file", "reason": "must never apply"} if true\n')

        blocked = wait_for(lambda: [r for r in [requests.get(allowed, proxies=proxies, timeout=30)]
                                    if r.status_code == 403])[0]
        assert blocked.headers["X-Sandgate-Decision"] == "deny"
        assert blocked.json()["code"] == "site.blocked_path"
        assert requests.get(other, proxies=proxies, timeout=30).status_code == 200
        assert requests.get(f"http://allowed.test:{upstream.port}/z", proxies=proxies, timeout=30).status_code \
            == 200
        sql = toolcall(sg, sess, "sql", {"query": "select 1", "database": "app"})
        assert sql["decision"] == "deny" and sql["codes"] == ["site.no_sql"]
        assert toolcall(sg, sess, "read_file", {"path": "/workspace/a"})["decision"] == "allow"

        # Removing the site files restores the shipped behaviour, again without a restart.
        shutil.rmtree(pol / "site")
        wait_for(lambda: requests.get(allowed, proxies=proxies, timeout=30).status_code == 200)
        assert requests.get(other, proxies=proxies, timeout=30).status_code == 403
        assert toolcall(sg, sess, "sql", {"query": "select 1", "database": "app"})["decision"] == "allow"
    assert shipped_digest(pol) == before


def test_site_rule_that_conflicts_is_rejected_and_last_good_keeps_serving(tmp_path, upstream):
    pol = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    cfg = {**LOOPBACK_CONFIG, "policy": {"dir": str(pol)}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        sess = sg.session(allow=["allowed.test"])
        rev = sg.call("GET", "/healthz").json()["policy_rev"]
        (pol / "site.rego").write_text(      # a second `decision`: a conflict with the shipped rule
            "package sandgate.egress\nimport rego.v1\n"
            'decision := {"action": "allow", "reasons": [], "codes": []}\n')
        wait_for(lambda: sg.call("GET", "/healthz").json()["policy_error"])
        assert sg.call("GET", "/healthz").json()["policy_rev"] == rev
        url = f"http://other.test:{upstream.port}/"
        assert requests.get(url, proxies=sess["proxies"], timeout=30).status_code == 403
