"""`sandgate policy suggest` end to end: real denials through the real proxy (and an access request filed from
inside), the CLI (in process, the patch from a real process) reading the decision log (the store, and the API with an admin token), the patch
applied with `patch -p1` to a copy of the policy directory, `sandgate policy test` passing there, and the proxy,
once the live policy directory carries the patch, allowing the host for the proposed scope and nothing else."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import ROOT, Sandgate, gateway_cli

ENDPOINT = "http://sandgate.internal/v1/access-requests"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suggest")
    policies = tmp / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.py"))
    cfg = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "resolve": {
        **LOOPBACK_CONFIG["egress"]["resolve"], "api.partner.test": ["127.0.0.1"]}},
        "policy": {"dir": str(policies)}}
    with Sandgate(tmp, cfg) as sg:
        sg.policies = policies
        sg.pristine = tmp / "pristine"
        shutil.copytree(policies, sg.pristine)
        yield sg


def cli(gw, *args: str, timeout: float = 120, process: bool = False) -> subprocess.CompletedProcess:
    """A command on the gateway's configuration and data directory: in this process (tests/support/cli.py), or a
    real `sandgate` process (the patch below, for the wiring)."""
    argv = (*args, "--config", str(gw.config_path), "--data-dir", str(gw.data_dir))
    if not process:
        return run_cli(*argv, env=gw.env)
    return gateway_cli(*argv, env=gw.env, timeout=timeout)


def suggest(gw, *args: str, wait: bool = True, process: bool = False) -> subprocess.CompletedProcess:
    """With `wait`, run until the decision log's batch is written (rows are flushed within ~100 ms, but the machine
    may be busy)."""
    deadline = time.time() + (30 if wait else 0)
    while True:
        proc = cli(gw, "policy", "suggest", "--since", "1h", *args, process=process)
        if proc.returncode != 0 or "nothing to suggest" not in proc.stderr or time.time() > deadline:
            return proc
        time.sleep(0.5)


def get(sess, url):
    return requests.get(url, proxies=sess["proxies"], timeout=10)


def test_repeated_denials_become_a_reviewed_patch_whose_test_passes_and_which_allows_only_that_scope(gw, upstream):
    url = f"http://api.partner.test:{upstream.port}/v1/x"
    a = gw.session(workload="persistent", labels={"team": "x", "env": "dev"}, allow=[])
    b = gw.session(workload="persistent", labels={"team": "x", "env": "prod"}, allow=[])
    c = gw.session(workload="ephemeral", labels={"team": "y"}, allow=[])
    for sess, times in ((a, 3), (b, 1)):
        for _ in range(times):
            assert get(sess, url).status_code == 403
    assert get(c, f"http://other.test:{upstream.port}/").status_code == 403        # once: below --min-count
    filed = requests.post(ENDPOINT, json={"host": "api.partner.test", "reason": "the partner API"},
                          proxies=b["proxies"], timeout=10)
    assert filed.status_code == 202, filed.text

    proc = suggest(gw, "--min-count", "5", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [s["host"] for s in doc["suggestions"]] == ["api.partner.test"], doc
    s = doc["suggestions"][0]
    assert s["entry"] == f"api.partner.test:{upstream.port}"
    # the narrowest scope every denied session shared: persistent, team=x (env differed)
    assert s["scope"] == {"workload": "persistent", "labels": {"team": "x"},
                          "text": "persistent sessions labelled team=x"}
    assert s["evidence"]["denials"] == 4 and s["evidence"]["access_requests"] == 1
    assert s["evidence"]["sessions"] == 2
    assert s["replay"] == {"denied": 4, "would_allow": 4}
    assert doc["tests"]["failed"] == 0 and doc["tests"]["passed"] >= 4
    assert doc["data_file"] == "sandgate/config/data.json"

    # nothing for other.test (one denial), nothing for ephemeral sessions, nothing under a label no one had
    assert suggest(gw, "--min-count", "1", "--workload", "ephemeral", "--label", "team=x", wait=False).stdout == ""
    narrow = json.loads(suggest(gw, "--min-count", "1", "--label", "env=prod", "--format", "json").stdout)
    assert [(x["host"], x["scope"]["labels"]) for x in narrow["suggestions"]] == [
        ("api.partner.test", {"team": "x", "env": "prod"})]

    # the patch: applied to a copy of the policy directory, `sandgate policy test` passes there
    patch = suggest(gw, "--min-count", "5", process=True)
    assert patch.returncode == 0, patch.stderr
    assert doc["patch"] in patch.stdout and patch.stdout.index(doc["patch"]) > 0       # after the why-lines
    assert "allow api.partner.test" in patch.stdout.split("---", 1)[0]
    assert "partner API" not in patch.stdout                # the agent's reason is untrusted: never in the patch
    copy = gw.tmp / "applied"
    shutil.copytree(gw.pristine, copy)
    applied = subprocess.run(["patch", "-p1", "-d", str(copy)], input=patch.stdout, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    data = json.loads((copy / "sandgate/config/data.json").read_text())
    assert data["egress"]["scoped_allow"] == [
        {"hosts": [f"api.partner.test:{upstream.port}"], "workload": "persistent", "labels": {"team": "x"}}]
    assert data["egress"]["base_allow"] == json.loads(
        (gw.pristine / "sandgate/config/data.json").read_text())["egress"]["base_allow"]
    tested = cli(gw, "policy", "test", str(copy))
    assert tested.returncode == 0 and " 0 failed" in tested.stdout, tested.stdout + tested.stderr
    # the generated test fails without the proposed data: it checks the change, not itself
    unpatched = gw.tmp / "test-only"
    shutil.copytree(gw.pristine, unpatched)
    shutil.copytree(copy / "site", unpatched / "site")
    failing = cli(gw, "policy", "test", str(unpatched), "--run", "site")
    assert failing.returncode == 1 and "FAIL data.site.suggested." in failing.stdout, failing.stdout

    # the live policy directory takes the patch: the proxy allows the host for that scope and nothing else
    rev = gw.call("GET", "/healthz").json()["policy_rev"]
    assert subprocess.run(["patch", "-p1", "-d", str(gw.policies)], input=patch.stdout, capture_output=True,
                          text=True).returncode == 0
    deadline = time.time() + 30
    while gw.call("GET", "/healthz").json()["policy_rev"] == rev and time.time() < deadline:
        time.sleep(0.2)
    assert gw.call("GET", "/healthz").json()["policy_rev"] != rev
    in_scope = gw.session(workload="persistent", labels={"team": "x"}, allow=[])
    ok = get(in_scope, url)
    assert ok.status_code == 200, ok.text
    for labels, workload in (({"team": "y"}, "persistent"), ({}, "persistent"), ({"team": "x"}, "ephemeral")):
        other = gw.session(workload=workload, labels=labels, allow=[])
        assert get(other, url).status_code == 403, (workload, labels)
    assert get(in_scope, f"http://other.test:{upstream.port}/").status_code == 403
    events = [e for e in gw.events(in_scope["id"]) if e["kind"] == "egress" and e["host"] == "api.partner.test"]
    assert events and events[0]["action"] == "allow"
    # and the advisor now has nothing more to say about the host (the policy in force allows it)
    assert suggest(gw, "--min-count", "5", wait=False).stdout == ""


def test_suggest_reads_the_api_with_an_admin_token(gw, upstream):
    url = f"http://api.api-read.test:{upstream.port}/"
    sess = gw.session(workload="ephemeral", labels={"team": "z"}, allow=[])
    for _ in range(3):
        assert get(sess, url).status_code == 403
    admin = gw.token("admin", "root")
    deadline = time.time() + 30
    while True:
        proc = cli(gw, "policy", "suggest", "--since", "1h", "--label", "team=z", "--format", "json",
                   "--api-url", gw.api, "--token", admin)
        assert proc.returncode == 0, proc.stderr
        found = json.loads(proc.stdout)["suggestions"]
        if found or time.time() > deadline:
            break
        time.sleep(0.5)
    assert [(s["host"], s["scope"]["workload"], s["scope"]["labels"]) for s in found] == [
        ("api.api-read.test", "ephemeral", {"team": "z"})]
    harness = cli(gw, "policy", "suggest", "--api-url", gw.api, "--token", gw.harness_token)
    assert harness.returncode == 2 and "403" in harness.stderr
