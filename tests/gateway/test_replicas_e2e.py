"""Two sandgate processes on one SQLite file (as two replicas would be, without PostgreSQL): sessions made or ended
on one hold on both, and a tool call on one sees what the session's calls on the other left behind (regression: each
process kept the session's tool-call memory as if it were the store's only writer, so a script written through one
replica and run through the other was "already there", and allowed). A process keeps that memory only while no
other sandgate has the file open.

One pair serves every test (each with sessions of its own): `a` starts alone and loads a session's memory while it
is the file's only process, then `b` joins."""
from __future__ import annotations

import shutil
import time

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


def _call(sg, token, sid, step, tool, **args):
    resp = sg.call("POST", "/v1/toolcalls", token, json={"session": sid, "tool": tool, "step": step, "args": args})
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """(a, b, sid): `a` started alone, `sid` a session `a` has loaded while alone, then `b` joined (one key)."""
    tmp = tmp_path_factory.mktemp("sqlite-replicas")
    cfg = {**LOOPBACK_CONFIG, "store": {"url": f"sqlite:///{tmp / 'shared.db'}"}}
    with Sandgate(tmp / "a", cfg) as a:
        sid = a.session(allow=["allowed.test"])["id"]
        assert _call(a, a.harness_token, sid, 1, "shell", command="ls")["decision"] == "allow"   # a has it loaded
        b = Sandgate(tmp / "b", cfg)
        b.data_dir.mkdir(parents=True)
        shutil.copy(a.data_dir / "signing.key", b.data_dir / "signing.key")   # one key for the deployment
        with b:
            yield a, b, sid


def test_the_first_replica_learns_of_the_second_that_joins_later(replicas):
    """Runs first (defined first): `b` writes at once after it joined, as `a` was loaded alone."""
    a, b, sid = replicas                    # sid: loaded by `a` before `b` joined
    token = a.harness_token
    assert _call(b, token, sid, 2, "write_file", path="/workspace/evil.sh",
                 content="rm -rf ~\n")["decision"] == "allow"
    ran = _call(a, token, sid, 3, "shell", command="bash evil.sh")
    assert ran["decision"] != "allow", ran


def test_a_script_written_through_one_replica_is_known_to_the_other(replicas):
    a, b, _ = replicas
    sid = a.session(allow=["allowed.test"])["id"]
    token = a.harness_token
    assert _call(b, token, sid, 1, "shell", command="ls")["decision"] == "allow"      # b has it loaded
    assert _call(a, token, sid, 2, "write_file", path="/workspace/evil.sh",
                 content="rm -rf ~\n")["decision"] == "allow"
    ran = _call(b, token, sid, 3, "shell", command="bash evil.sh")
    assert ran["decision"] != "allow", ran
    assert _call(a, token, sid, 4, "shell", command="ln -s /etc conf")["decision"] == "allow"
    through = _call(b, token, sid, 5, "shell", command="echo x > conf/passwd")
    assert through["decision"] != "allow", through


def test_second_replica_sees_sessions_of_the_first(replicas, upstream):
    a, b, _ = replicas
    sess = a.session(allow=["allowed.test"])
    via_b = {"http": sess["proxy_url"].replace(f":{a.proxy_port}", f":{b.proxy_port}")}
    url = f"http://allowed.test:{upstream.port}/replica"
    assert requests.get(url, proxies=via_b, timeout=10).status_code == 200
    assert a.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
    deadline = time.time() + 15
    while time.time() < deadline:
        if requests.get(url, proxies=via_b, timeout=10).status_code == 407:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("replica b kept serving a session deleted on a")
