"""The fact builders' tables are the policy's data, read at each revision: a site edits `executors` or
`plain_programs` or `wrappers` in its policy directory and the next decisions use them, with the embedded engine and with
`policy.engine = "opa"` (the real OPA server), through POST /v1/toolcalls of a real sandgate. The facts memo keys
on the revision, so a call decided before the edit is not served stale facts after it.
"""
from __future__ import annotations

import json
import shutil
import time

import pytest

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import ROOT, Sandgate
from tests.support.opa import OpaServer

DATA = ("sandgate", "config", "toolcall", "data.json")


def decide(sg: Sandgate, sid: str, command: str) -> str:
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "shell", "args": {"command": command},
                                                  "step": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()["decision"]


def wait_for_rev(sg: Sandgate, old: str, timeout: float = 60.0) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        rev = sg.call("GET", "/healthz").json()["policy"]["rev"]
        if rev != old:
            return rev
        time.sleep(0.2)
    raise AssertionError("the policy was not reloaded in time")


def edit_tables(pol) -> None:
    path = pol.joinpath(*DATA)
    data = json.loads(path.read_text())
    data["executors"]["myrun exec"] = {"targets": 1, "remote": True}
    data["plain_programs"] = ["hyperfine"]
    data["wrappers"]["myprivs"] = {"args": "-u"}            # `myprivs -u USER CMD`
    path.write_text(json.dumps(data))


def run(sg: Sandgate, pol) -> None:
    sid = sg.session(workload="persistent", allow=["example.com"], workspace="/workspace")["id"]
    assert decide(sg, sid, "myrun exec box ls") == "allow"              # an unknown program carrying a read
    assert decide(sg, sid, "hyperfine 'git push --force origin main'") == "ask"
    assert decide(sg, sid, "myprivs -u rm ls") == "ask"                 # read as `rm ls`
    old = sg.call("GET", "/healthz").json()["policy"]["rev"]
    edit_tables(pol)
    wait_for_rev(sg, old)
    sid = sg.session(workload="persistent", allow=["example.com"], workspace="/workspace")["id"]
    assert decide(sg, sid, "myrun exec box ls") == "ask"                # now a remote runner: it asks as ssh does
    assert decide(sg, sid, "myrun exec box rm -rf /") == "deny"         # its command is decided over there
    assert decide(sg, sid, "hyperfine 'git push --force origin main'") == "allow"   # the site made it plain
    assert decide(sg, sid, "myprivs -u rm ls") == "allow"               # a wrapper now: user rm runs `ls`
    assert decide(sg, sid, "myprivs -u x rm -rf ~") == "deny"


def copy_policies(tmp_path):
    pol = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return pol


@pytest.mark.e2e
def test_site_tables_apply_at_the_next_revision_embedded(tmp_path):
    pol = copy_policies(tmp_path)
    with Sandgate(tmp_path / "gw", {**LOOPBACK_CONFIG, "policy": {"dir": str(pol)}}) as sg:
        run(sg, pol)


@pytest.mark.e2e
def test_site_tables_apply_at_the_next_revision_opa(tmp_path):
    pol = copy_policies(tmp_path)
    with OpaServer(tmp_path / "opa") as opa:
        cfg = {**LOOPBACK_CONFIG, "policy": {"engine": "opa", "opa_url": opa.url, "dir": str(pol)}}
        with Sandgate(tmp_path / "gw", cfg) as sg:
            assert sg.call("GET", "/healthz").json()["policy"]["engine"] == "opa"
            run(sg, pol)
