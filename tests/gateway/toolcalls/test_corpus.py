"""The tool-call corpus through the product's decision path, and the properties that keep it honest.

Every entry of corpus.yaml is decided in process by the facts sandgate builds and the shipped policy on the
shipped engine (corpus.SessionSim mirrors what POST /v1/toolcalls does); a slice goes through
POST /v1/toolcalls on a real sandgate. `test_recall_and_pass_rate` measures what the README quotes and writes
it to test-artifacts/toolcall-corpus.json. Hypothesis wraps dangerous commands in wrappers, interpreters and
write-then-run forms: none of them may turn into "allow".
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import LOOPBACK_CONFIG
from tests.gateway.toolcalls.corpus import call_of, evaluator, label, load_corpus, measure, run_entry
from tests.support.gateway import Sandgate

CORPUS = load_corpus()
DANGEROUS, ORDINARY = CORPUS["dangerous"], CORPUS["ordinary"]
CLASSES = {"wipe", "device", "delete", "interpreter", "wrapper", "runtime", "reads_run", "cli", "sql", "option_write",
           "git", "system", "external_write", "history"}
ARTIFACT = Path(__file__).resolve().parents[3] / "test-artifacts" / "toolcall-corpus.json"
README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.fixture(scope="module")
def ev():
    return evaluator()


_DECIDED: dict[int, tuple] = {}


def decided(ev, entry: dict) -> tuple:
    """run_entry, once per corpus entry in this module: test_entry checks each decision and
    test_recall_and_pass_rate counts the same decisions (each entry is decided in a fresh session)."""
    if id(entry) not in _DECIDED:
        _DECIDED[id(entry)] = run_entry(ev, entry)
    return _DECIDED[id(entry)]


def test_corpus_covers_every_class():
    assert len(DANGEROUS) >= 200 and len(ORDINARY) >= 120
    assert {e["class"] for e in DANGEROUS} == CLASSES
    assert all(e["expect"] in ("ask", "deny") for e in DANGEROUS)
    assert all(e["expect"] == "deny" for e in DANGEROUS if e["class"] == "wipe")
    assert all(e.get("why") for e in DANGEROUS + ORDINARY)
    keys = [json.dumps([e.get("cmd"), e.get("tool"), e.get("args"), e.get("frozen"), e.get("before")], sort_keys=True)
            for e in DANGEROUS + ORDINARY]
    assert len(keys) == len(set(keys)), "duplicate corpus entries"


@pytest.mark.parametrize("entry", DANGEROUS + ORDINARY, ids=[label(e) for e in DANGEROUS + ORDINARY])
def test_entry(ev, entry):
    decision, before = decided(ev, entry)
    for call, got in before:
        assert got["action"] == call["expect"], (call, got)
    assert decision["action"] == entry["expect"], (entry["why"], decision)
    assert decision["reasons"] and all(isinstance(r, str) and r for r in decision["reasons"])
    if "codes" in entry:
        assert decision["codes"] == entry["codes"]


def test_recall_and_pass_rate(ev, capsys):
    m = measure(ev, CORPUS, run=decided)
    report = {k: m[k] for k in ("dangerous", "caught", "recall", "ordinary", "allowed", "pass_rate", "missed",
                                "blocked")}
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps(report, indent=2))
    with capsys.disabled():
        print(f"\ntool-call corpus: recall on dangerous calls {m['caught']}/{m['dangerous']} = {m['recall']:.1%}, "
              f"pass rate on ordinary calls {m['allowed']}/{m['ordinary']} = {m['pass_rate']:.1%}")
    assert m["missed"] == []
    assert m["pass_rate"] >= 0.97
    readme = README.read_text()                  # the README quotes these measured figures
    assert f"recall on dangerous calls **{m['caught']}/{m['dangerous']} ({m['recall']:.0%})**" in readme
    assert f"ordinary calls **{m['allowed']}/{m['ordinary']} ({m['pass_rate']:.0%})**" in readme


# -- a slice through the HTTP API of a real sandgate -------------------------------------------------------
def api_slice() -> list[dict]:
    picked = [e for e in DANGEROUS + ORDINARY if e.get("before") or e.get("frozen")]
    picked += DANGEROUS[::9] + ORDINARY[::9]
    out, seen = [], set()
    for entry in picked:
        if id(entry) not in seen:
            seen.add(id(entry))
            out.append(entry)
    return out


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config = {**LOOPBACK_CONFIG, "approvals": {"reuse_window_s": 0}}
    with Sandgate(tmp_path_factory.mktemp("corpus"), config) as sg:
        yield sg


def api_call(sg: Sandgate, sid: str, call: dict) -> dict:
    frozen = bool(call.get("frozen"))
    resp = sg.call("PATCH", f"/v1/sessions/{sid}", json={"frozen": frozen})
    assert resp.status_code == 200, resp.text
    tool, args = call_of(call)
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sid, "tool": tool, "args": args, "step": 1})
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.e2e
@pytest.mark.parametrize("entry", api_slice(), ids=[label(e) for e in api_slice()])
def test_entry_through_the_api(gw, entry):
    sid = gw.session(workload="persistent", allow=["example.com", "*.example.com"], workspace="/workspace")["id"]
    for call in entry.get("before", []):
        assert api_call(gw, sid, call)["decision"] == call["expect"], call
    body = api_call(gw, sid, entry)
    assert body["decision"] == entry["expect"], (entry["why"], body)
    assert ("approval_id" in body) == (entry["expect"] == "ask")
    if "codes" in entry:
        assert body["codes"] == entry["codes"]


# -- wrapping never turns dangerous into allow ----------------------------------------------------------------
WRAPPABLE = [e["cmd"] for e in DANGEROUS if "cmd" in e and not e.get("before") and not e.get("frozen")
             and e["class"] != "history"]


def _py(text: str) -> str:
    return json.dumps(text)


WRAPPERS = [
    lambda c: f"sudo {c}", lambda c: f"env {c}", lambda c: f"timeout 5 {c}", lambda c: f"nice -n 5 {c}",
    lambda c: f"nohup {c}", lambda c: f"command {c}", lambda c: f"stdbuf -oL {c}", lambda c: f"setsid {c}",
    lambda c: f"busybox sh -c {shlex.quote(c)}", lambda c: f"bash -c {shlex.quote(c)}",
    lambda c: f"sh -lc {shlex.quote(c)}", lambda c: f"eval {shlex.quote(c)}", lambda c: f"su -c {shlex.quote(c)} root",
    lambda c: f"watch -n 1 {shlex.quote(c)}", lambda c: f"flock /tmp/l -c {shlex.quote(c)}",
    lambda c: f"script -qc {shlex.quote(c)} /dev/null", lambda c: f"echo {shlex.quote(c)} | sh",
    lambda c: f"sh <<< {shlex.quote(c)}", lambda c: f"bash <<'ZZEOF'\n{c}\nZZEOF",
    lambda c: f"printf '%s\\n' {shlex.quote(c)} | bash", lambda c: f"(cd /workspace && {c})", lambda c: f"true; {c}",
    lambda c: shlex.join(["python3", "-c", f"import os; os.system({_py(c)})"]),
    lambda c: shlex.join(["python3", "-c", f"import subprocess; subprocess.run({_py(c)}, shell=True)"]),
    lambda c: shlex.join(["perl", "-e", f"system({_py(c)})"]),
    lambda c: shlex.join(["node", "-e", f"require('child_process').execSync({_py(c)})"]),
    lambda c: shlex.join(["ruby", "-e", f"system({_py(c)})"]),
    lambda c: shlex.join(["php", "-r", f"system({_py(c)});"]),
    lambda c: f"echo {shlex.quote(c)} > w.sh && bash w.sh",
    lambda c: f"printf '%s\\n' {shlex.quote(c)} > w.sh; chmod +x w.sh; ./w.sh",
    lambda c: f"cat > w.sh <<'ZZEOF'\n{c}\nZZEOF\nsh w.sh", lambda c: f"echo {shlex.quote(c)} > w; . w",
    lambda c: f"alias zz={shlex.quote(c)}; zz", lambda c: f"zz() {{\n{c}\n}}; zz",
    lambda c: f"trap {shlex.quote(c)} EXIT", lambda c: f"X={shlex.quote(c)}; eval \"$X\"",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(WRAPPABLE), st.lists(st.sampled_from(range(len(WRAPPERS))), min_size=1, max_size=2))
def test_wrapping_never_allows(ev, command, wrappers):
    for index in wrappers:
        command = WRAPPERS[index](command)
    decision = run_entry(ev, {"cmd": command})[0]
    assert decision["action"] != "allow", (command, decision)


def test_every_wrapper_keeps_a_home_wipe_denied(ev):
    for wrap in WRAPPERS:
        command = wrap("rm -rf ~")
        assert run_entry(ev, {"cmd": command})[0]["action"] == "deny", command
