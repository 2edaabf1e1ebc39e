"""What a session's earlier calls left (files written, links made) is never forgotten while the session lives:
a script written early and run after hundreds of other writes is still "written earlier" (regression: only the
newest 500 path rows were kept, so `bash evil.sh` after 600 other writes looked like running a script that was
already there, and was allowed; a link made early was no longer followed). Past MAX_SESSION_PATHS distinct
paths sandgate cannot know them all, and the session's tool calls are denied (`toolcall.paths_exceeded`, audited),
not decided blind.

Through a real `sandgate serve`, and again after a restart (the memory is then loaded from the store)."""
from __future__ import annotations

import pytest

from gateway.toolcalls.history import MAX_SESSION_PATHS
from tests.support.gateway import Sandgate


def _call(sg, sid, step, tool, **args):
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": tool, "step": step, "args": args})
    return resp


def _fill(sg, sid, step, count, prefix="f"):
    """Shell calls that write `count` distinct files (each a path row), 100 per call (a line of more commands
    is not parsed); returns the next step."""
    for start in range(0, count, 100):
        command = "; ".join(f"echo x > {prefix}{i}.txt" for i in range(start, min(count, start + 100)))
        resp = _call(sg, sid, step, "shell", command=command)
        assert resp.status_code == 200 and resp.json()["decision"] == "allow", resp.text
        step += 1
    return step


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("sandgate")) as running:
        yield running


# Each case below makes its session's calls through the running sandgate and checks what it decides, then returns
# the check it repeats after the restart (the memory then loaded from the store). The three cases' sessions are
# apart, so one restart serves the three.
def _a_script_written_before_many_other_writes_is_still_known(sg):
    sess = sg.session(allow=["allowed.test"])
    sid = sess["id"]
    resp = _call(sg, sid, 1, "write_file", path="/workspace/evil.sh", content="rm -rf ~\n")
    assert resp.json()["decision"] == "allow", resp.text
    step = _fill(sg, sid, 2, 600)
    ran = _call(sg, sid, step, "shell", command="bash evil.sh")
    assert ran.status_code == 200 and ran.json()["decision"] != "allow", ran.text
    assert "toolcall.runs_written" in ran.json()["codes"] or "toolcall.delete_home" in ran.json()["codes"]

    def after_the_restart(sg):
        again = _call(sg, sid, step + 1, "shell", command="bash evil.sh")
        assert again.status_code == 200 and again.json()["decision"] != "allow", again.text
    return after_the_restart


def _a_link_made_before_many_other_writes_is_still_followed(sg):
    sess = sg.session(allow=["allowed.test"])
    sid = sess["id"]
    assert _call(sg, sid, 1, "shell", command="ln -s /etc conf").json()["decision"] == "allow"
    step = _fill(sg, sid, 2, 600)
    rm = _call(sg, sid, step, "shell", command="echo x > conf/passwd")
    assert rm.status_code == 200 and rm.json()["decision"] != "allow", rm.text

    def after_the_restart(sg):
        rm = _call(sg, sid, step + 1, "shell", command="echo x > conf/passwd")
        assert rm.status_code == 200 and rm.json()["decision"] != "allow", rm.text
    return after_the_restart


def _denied(resp) -> None:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["decision"] == "deny" and body["codes"] == ["toolcall.paths_exceeded"], body


def _past_the_bound_the_sessions_tool_calls_are_denied(sg):
    sess = sg.session(allow=["allowed.test"])
    sid = sess["id"]
    step = _fill(sg, sid, 1, MAX_SESSION_PATHS + 1)
    _denied(_call(sg, sid, step + 1, "shell", command="ls"))

    def after_the_restart(sg):
        _denied(_call(sg, sid, step + 2, "read_file", path="/workspace/README.md"))
        assert any(e.get("codes") == ["toolcall.paths_exceeded"] and e["kind"] == "toolcall"
                   for e in sg.events(sid))
    return after_the_restart


def test_what_a_session_left_is_known_after_many_writes_and_a_restart(sg):
    """A script written early, a link made early (each before 600 other writes), and a session past the bound."""
    checks = [_a_script_written_before_many_other_writes_is_still_known(sg),
              _a_link_made_before_many_other_writes_is_still_followed(sg),
              _past_the_bound_the_sessions_tool_calls_are_denied(sg)]
    sg.stop()
    sg.start()                                   # loaded from the store this time
    for check in checks:
        check(sg)
