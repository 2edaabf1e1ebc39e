"""The decision log (every decision, secrets redacted, batched off the hot path), its OPA-format export,
`policy replay` against a candidate policy, and the shadow policy with `policy diff`."""
from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.decisionlog import REDACTED, DecisionLog, redact_input, redacted_json
from gateway.policy.cache import Shared, Stamped
from gateway.policy.logcommands import parse_since, summarise_change
from gateway.store import Store
from gateway.store.decisions import DecisionStore
from gateway.toolcalls.history import history_entries
from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import ROOT, Sandgate, gateway_cli

# -- redaction (pure) --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ({"headers": {"authorization": "Bearer abc", "accept": "*/*"}},
     {"headers": {"authorization": REDACTED, "accept": "*/*"}}),
    ({"args": {"password": "hunter2", "user": "bob"}}, {"args": {"password": REDACTED, "user": "bob"}}),
    ({"x": {"API_KEY": "k", "Private-Key": "p", "session_token": "t", "Cookie": "c"}},
     {"x": {"API_KEY": REDACTED, "Private-Key": REDACTED, "session_token": REDACTED, "Cookie": REDACTED}}),
    ({"command": "curl -H 'Authorization: Bearer sk-live-123456789' https://x"},
     {"command": f"curl -H 'Authorization: {REDACTED}' https://x"}),
    ({"command": "export TOKEN=abcdef; psql --password=hunter22"},
     {"command": f"export TOKEN={REDACTED}; psql --password={REDACTED}"}),
    ({"url": "https://user:s3cret@github.com/o/r.git"}, {"url": f"https://user:{REDACTED}@github.com/o/r.git"}),
    ({"url": "https://api.test/x?api_key=abc&q=1"}, {"url": f"https://api.test/x?api_key={REDACTED}&q=1"}),
    ({"session": {"secrets": ["github"]}, "request": {"secrets": ["github"]}},
     {"session": {"secrets": ["github"]}, "request": {"secrets": ["github"]}}),
    ({"token_count": 3, "has_password": False, "password": ""}, {"token_count": 3, "has_password": False,
                                                                 "password": ""}),
    ([{"authorization": ["a", "b"], "token": {"v": "x", "n": 2}}],
     [{"authorization": [REDACTED, REDACTED], "token": {"v": REDACTED, "n": 2}}]),
])
def test_redact_input(value, expected):
    assert redact_input(value) == expected


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.sampled_from(["a", "token", "Authorization", "path", "password", "x"])
                                      | st.text(max_size=8), children, max_size=4), max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(JSON, st.text(alphabet="0123456789", min_size=12, max_size=20).map(lambda t: "sk" + t))
def test_redaction_is_idempotent_and_hides_credentials(value, secret):
    once = redact_input(value)
    assert redact_input(once) == once
    doc = {"wrap": value, "password": secret, "h": {"authorization": f"Bearer {secret}"},
           "cmd": f"curl -H 'Authorization: Bearer {secret}'", "u": f"https://me:{secret}@x.test/"}
    assert secret not in json.dumps(redact_input(doc)["password"])
    assert secret not in json.dumps({k: v for k, v in redact_input(doc).items() if k != "wrap"})


# Words and shapes the redaction looks for, mixed into keys and strings: the fast path (redacted_json reads the
# JSON text to skip the walk) must give exactly what the walk gives.
_WORDS = ["Bearer ", "basic\t", "token ", "Authorization: ", "x-api-key=", "cookie:", "password=", "api_key=",
          "--token ", "-password=", "https://u:", "@", "secrets", "Secrets", "pass", "passenger", "sk-123456789",
          "\"", "\\", "é", "\n", " ", "=", ":", "'", "abcdefghij", "\ud800"]
_PLAIN = [w for w in _WORDS if w.isascii() and w.isprintable() and '"' not in w and "\\" not in w]


def _json_of(words: list[str], max_leaves: int = 25):
    text = st.lists(st.sampled_from(words) | st.text(alphabet="abcxyz:=@ /-", max_size=6), max_size=6).map("".join)
    return st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
                        lambda children: st.lists(children, max_size=4)
                        | st.dictionaries(text, children, max_size=4), max_leaves=max_leaves)


# 200 examples (was 1500, then 600: 3.6 s of CPU, almost all of it hypothesis drawing nested documents), with
# test_redacted_json_of_every_pair_of_words below trying each word and pair of words in every position
@settings(max_examples=200, deadline=None)
@given(_json_of(_PLAIN) | _json_of(_WORDS))        # plain: no escapes in the JSON text, so the fast path is tried
def test_redacted_json_is_the_redacted_input(value):
    assert json.loads(redacted_json(value)) == redact_input(value)


def _with_parts(words):
    """Top-level inputs whose values may be Shared, or lists of Stamped entries (as tool calls build them). The
    values inside are small (what they may hold is the test above's): drawing a dozen 25-leaf documents for each
    of a thousand examples cost 11.5 s of CPU, 100 s at load 17, past pytest's timeout at load 15."""
    value = _json_of(words, max_leaves=6)
    text = st.lists(st.sampled_from(words) | st.text(alphabet="abcxyz:=@ /-", max_size=6), max_size=4).map("".join)
    shared = st.dictionaries(text, value, max_size=4).map(Shared)
    entry = st.tuples(st.dictionaries(text, value, max_size=3), st.sampled_from(["age_s", "n"]),
                      st.integers(-5, 5) | st.floats(allow_nan=False) | st.booleans() | text).map(
        lambda t: Stamped(Shared({**t[0], t[1]: 0.0}), t[1], t[2]))
    return st.dictionaries(text, value | shared | st.lists(entry, max_size=3), max_size=4)


@settings(max_examples=150, deadline=None)           # was 1000, then 400 (5.3 s of CPU); the pairs test below
@given(_with_parts(_PLAIN) | _with_parts(_WORDS))
def test_redacted_json_of_shared_parts_is_the_redacted_input(value):
    for _ in range(2):                                  # the second time from the fragments kept
        assert json.loads(redacted_json(value)) == redact_input(value)


# More of what the redaction matches: characters that match a word's letters case-insensitively but are written
# as escapes in the JSON text (the Kelvin sign for k, the long s), and key-like names.
_MORE_WORDS = ["to\u212aen ", "pa\u017fsword=", "Private-Key", "private-token: ", "access_key=", "credential",
               "session_key"]


def test_redacted_json_of_every_pair_of_words_is_the_redacted_input():
    """What the properties above draw at random, tried exhaustively where it matters: every word the redaction
    looks for, and every pair of them (then a credential-like tail), as a key, as a value, nested, in a Shared
    value and in a history entry (Stamped), the second time from the fragments kept."""
    words = _WORDS + _MORE_WORDS
    texts = words + [a + b + tail for a in words for b in words for tail in ("", "abcdefghij")] \
        + [a + "abcdefghij" + b for a in words for b in words]
    wrong = []
    for t in texts:
        docs = [{t: "v"}, {"k": t}, {"a": {"b": [t, {t: t}]}},
                {"s": Shared({t: t, "n": 1}),
                 "history": [Stamped(Shared({"summary": t, "age_s": 0.0}), "age_s", 1.5)]}]
        for doc in docs:
            for _ in range(2):
                if json.loads(redacted_json(doc)) != redact_input(doc):
                    wrong.append(doc)
    assert not wrong, wrong[:5]


def test_a_history_entry_that_holds_the_split_marker_is_still_logged_as_it_is():
    from gateway.policy.decisionlog import _MARK
    entry = Stamped(Shared({"summary": _MARK, "age_s": 0.0, "n": [_MARK]}), "age_s", 2.5)
    doc = {"history": [entry, Stamped(Shared({"age_s": 0.0, "s": "x"}), "age_s", 1)]}
    for _ in range(2):
        assert json.loads(redacted_json(doc)) == redact_input(doc)


@pytest.mark.parametrize("value", [
    {"pass": "x"}, {"a": {"token ": "abc"}}, {"Secrets": ["n"]}, {"x": ["Bearer abcdefghij"]},
    {"cmd": "curl https://u:p@h/"}, {"cmd": "psql --password=x"}, {"h": "Cookie: a=b"}, {"q": "api_key=abc"},
    {"s": "tab\tBearer abcdefghi"}, {"s": "é token abcdefghij"}, {"k\"token": "v"}])
def test_redacted_json_redacts_what_redact_input_does(value):
    assert json.loads(redacted_json(value)) == redact_input(value) != value


@pytest.mark.parametrize("value", [
    {"session": {"secrets": ["github"]}, "cmd": "ls"}, {"history": [{"summary": "http_request GET https://api.x/"}]},
    {"a": [1, 2.5, None, True]}])
def test_redacted_json_takes_the_fast_path_when_nothing_is_sensitive(value, monkeypatch):
    import gateway.policy.decisionlog as dl
    monkeypatch.setattr(dl, "redact_input", lambda v: pytest.fail("walked"))
    assert json.loads(redacted_json(value)) == value


def test_redacted_json_walks_only_the_values_that_may_hold_a_credential(monkeypatch):
    import gateway.policy.decisionlog as dl
    history = [Stamped(Shared({"summary": "shell: ls", "age_s": 0.0}), "age_s", 1.5) for _ in range(3)]
    doc = {"tool": {"args": {"command": "curl -H 'Authorization: Bearer abcdefghijk' https://x.test/"}},
           "history": history, "session": {"id": "s1", "secrets": ["github"]}, "password": "hunter2", "step": 3}
    expected, walked, real = redact_input(doc), [], dl.redact_input
    monkeypatch.setattr(dl, "redact_input", lambda v: walked.append(v) or real(v))
    assert json.loads(redacted_json(doc)) == expected
    assert walked[0] is doc["tool"] and not any(v is doc or v is history for v in walked)               # not the history, the session, or the whole input


@pytest.mark.parametrize("text, now, expected", [
    ("1h", 10_000.0, 6_400.0), ("30m", 10_000.0, 8_200.0), ("2d", 200_000.0, 27_200.0), ("0", 5.0, 0.0),
    ("1700000000", 0.0, 1_700_000_000.0), ("2026-01-01T00:00:00Z", 0.0, 1_767_225_600.0),
])
def test_parse_since(text, now, expected):
    assert parse_since(text, now) == expected


@pytest.mark.parametrize("text", ["yesterday", "1w", "", "-1h"])
def test_parse_since_refuses(text):
    with pytest.raises(ValueError):
        parse_since(text, 0.0)


def test_summarise_change():
    a = {"action": "allow", "codes": ["x"]}
    assert summarise_change(a, {"action": "allow", "codes": ["x"]}) is None
    assert summarise_change(a, {"action": "deny", "codes": ["y"]}) == "allow -> deny  [x] -> [y]"
    assert summarise_change(a, {"action": "allow", "codes": ["z"]}) is not None


# -- the writer on a real store ----------------------------------------------------------------------------

async def test_decision_log_batches_redacts_and_survives_a_store_outage(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    log = DecisionLog(store, flush_interval_s=3600)          # flushed by hand below
    log.start()
    try:
        for i in range(1200):
            log.record("egress", {"session": {"id": f"s{i % 3}"}, "request": {"headers": {"cookie": "c=1"}}},
                       {"action": "allow", "reasons": [], "codes": []}, "rev1", "embedded", 7, f"d{i}")
        await log.flush()
        rows = await DecisionStore(store).list_decisions()
        assert [r["id"] for r in rows] == [f"d{i}" for i in range(1200)]
        assert rows[5]["input"]["request"]["headers"]["cookie"] == REDACTED
        assert (rows[5]["session"], rows[5]["latency_us"], rows[5]["policy_rev"]) == ("s2", 7, "rev1")
        store.engine.dispose()
        real_engine = store.engine
        from sqlalchemy import create_engine
        store.engine = create_engine(f"sqlite:///{tmp_path}/missing-dir/x.db")   # writes fail
        log.record("toolcall", {}, {"action": "deny"}, "rev1", "embedded", 1, "late")
        await log.flush()                                    # kept for retry, never raised
        store.engine = real_engine
        await log.flush()
        assert (await DecisionStore(store).list_decisions(kind="toolcall"))[0]["id"] == "late"
    finally:
        await log.close()
        store.close()


async def test_decision_log_drains_a_backlog_in_few_writes(tmp_path):
    """A busy loop makes every write a hop of milliseconds: the log takes what is pending in large batches, so it
    keeps up (with 32-row batches it fell behind at about 1,600 decisions/s, holding thousands of inputs)."""
    store = Store(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    log = DecisionLog(store, flush_interval_s=3600)
    writes = []
    real_run_bulk = store.run_bulk

    async def counting_run_bulk(fn, *args):
        writes.append(len(args[0]))
        return await real_run_bulk(fn, *args)

    store.run_bulk = counting_run_bulk
    try:
        for i in range(1200):
            log.record("toolcall", {"session": {"id": "s"}, "step": i}, {"action": "allow"}, "rev1", "embedded", 3,
                       f"d{i}")
        await log.flush()
        assert sum(writes) == 1200 and len(writes) <= 3
        assert len(await DecisionStore(store).list_decisions(limit=5000)) == 1200
    finally:
        await log.close()
        store.close()


async def test_history_entries_are_stored_once_and_given_back_whole(tmp_path):
    """A tool call's input carries the session's last 20 calls, each also in the next 20 inputs: the rows reference
    entries stored once (by content), and reading gives every input back as it was decided, redacted, ages
    included. A credential in an entry's summary is redacted in the stored entry too."""
    store = Store(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    log = DecisionLog(store, flush_interval_s=3600)
    log.start()
    secret = "ghp_abcdefghijklmnop1234"
    events = [{"kind": "toolcall", "request_id": f"t_{i:04d}", "step": i, "ts": 1000.0 + i, "action": "allow",
               "codes": ["c"], "detail": {"tool": "shell", "summary": f"shell: curl -H 'Authorization: Bearer "
                                                                      f"{secret}' x" if i == 3 else f"shell: ls {i}"}}
              for i in range(60)]
    try:
        wanted = []
        for n in range(40):
            history = history_entries(events[: n + 1], 1100.0 + n * 0.25)
            doc = {"session": {"id": "s1"}, "tool": {"name": "shell", "args": {"command": "ls"}}, "history": history}
            wanted.append(redact_input(json.loads(json.dumps(doc))))
            log.record("toolcall", doc, {"action": "allow"}, "rev1", "embedded", 5, f"d{n}")
        log.record("toolcall", {"session": {"id": "s1"}, "history": []}, {"action": "allow"}, "rev1", "embedded", 5,
                   "empty")
        await log.flush()
        rows = await DecisionStore(store).list_decisions()
        assert [r["input"] for r in rows[:40]] == wanted
        assert rows[-1]["input"] == {"session": {"id": "s1"}, "history": []}
        assert all("history" not in r for r in rows)
        assert len(rows[39]["input"]["history"]) == 20 and rows[39]["input"]["history"][-1]["age_s"] == 70.75
        assert rows[5]["input"]["history"][3]["summary"] == f"shell: curl -H 'Authorization: {REDACTED}' x"
        stored = store.driver_rows("SELECT ref, entry FROM decision_history", ())
        assert len(stored) == 40                                 # each entry once
        raw = store.driver_rows("SELECT input, history FROM decisions", ())
        assert secret not in json.dumps([list(r) for r in raw] + [list(r) for r in stored])
        assert max(len(i) + len(h or "") for i, h in raw) < 2000         # 20 entries inline: about 4 KB
    finally:
        await log.close()
        store.close()


async def test_a_row_whose_history_entry_is_missing_is_refused_not_read_short(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    log = DecisionLog(store, flush_interval_s=3600)
    log.start()
    try:
        events = [{"kind": "toolcall", "request_id": "t_1", "step": 1, "ts": 1000.0, "action": "allow",
                   "detail": {"tool": "shell", "summary": "shell: ls"}}]
        log.record("toolcall", {"session": {"id": "s1"}, "history": history_entries(events, 1001.0)},
                   {"action": "allow"}, "rev1", "embedded", 5, "d1")
        await log.flush()
        store.driver(lambda cur: cur.execute("DELETE FROM decision_history"), commit=True)
        with pytest.raises(LookupError, match="missing"):
            await DecisionStore(store).list_decisions()
    finally:
        await log.close()
        store.close()


# -- end to end: export, replay, shadow + diff ----------------------------------------------------------------

def cli(sg: Sandgate, *args: str, process: bool = False) -> subprocess.CompletedProcess:
    """A command on the server's data directory and configuration: in this process (tests/support/cli.py), or a
    real `sandgate` process (one export below, for the wiring)."""
    argv = (*args, "--data-dir", str(sg.data_dir), "--config", str(sg.config_path))
    if process:
        return gateway_cli(*argv, cwd=ROOT)
    return run_cli(*argv)


def wait_lines(fn, n, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = [line for line in fn().stdout.splitlines() if line.strip()]
        if len(lines) >= n:
            return lines
        time.sleep(0.2)
    raise AssertionError("the decision log did not fill in time")


@pytest.fixture(scope="module")
def sg(tmp_path_factory):
    """One sandgate for the export and replay tests: each looks at its own session's decisions (the export's
    --session) and replays those made since it began (--since)."""
    with Sandgate(tmp_path_factory.mktemp("decisionlog") / "gw", LOOPBACK_CONFIG) as started:
        yield started


@pytest.mark.e2e
def test_every_decision_is_logged_and_exported_in_opa_format(sg, upstream):
    sess = sg.session(allow=["allowed.test"], secrets=[])
    proxies = sess["proxies"]
    assert requests.get(f"http://allowed.test:{upstream.port}/a?api_key=abc123", proxies=proxies,
                        headers={"Authorization": "Bearer sk-abcdefgh12345"}, timeout=30).status_code == 200
    assert requests.get(f"http://other.test:{upstream.port}/b", proxies=proxies, timeout=30).status_code == 403
    resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": 1, "args": {
        "command": "curl -H 'Authorization: Bearer ghp_abcdefghijklmnop' https://allowed.test/"}})
    assert resp.status_code == 200
    rev = sg.call("GET", "/healthz").json()["policy_rev"]
    wait_lines(lambda: cli(sg, "audit", "export", "--format", "opa-decision-log", "--session", sess["id"]), 3)
    exported = cli(sg, "audit", "export", "--format", "opa-decision-log", "--session", sess["id"], process=True)
    assert exported.returncode == 0, exported.stderr
    lines = [line for line in exported.stdout.splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]
    assert len(entries) == 3 and len({e["decision_id"] for e in entries}) == 3
    by_path = {}
    for e in entries:
        by_path.setdefault(e["path"], []).append(e)
        assert e["bundles"] == {"sandgate": {"revision": rev}} and e["labels"]["engine"] == "embedded"
        assert e["timestamp"].endswith("Z") and e["metrics"]["timer_server_handler_ns"] > 0
    egress = by_path["sandgate/egress/decision"]
    assert [e["result"]["action"] for e in egress] == ["allow", "deny"]
    assert egress[0]["input"]["request"]["headers"]["authorization"] == REDACTED
    assert egress[0]["input"]["request"]["query"]["api_key"] == [REDACTED]
    tc = by_path["sandgate/toolcall/decision"][0]
    assert tc["input"]["tool"]["name"] == "shell"
    text = json.dumps(entries)
    for secret in ("sk-abcdefgh12345", "ghp_abcdefghijklmnop", "abc123", sess["token"]):
        assert secret not in text


@pytest.mark.e2e
def test_exported_tool_calls_carry_their_whole_history(sg):
    """Rows reference their history entries (stored once): the export gives each input whole, as decided."""
    sess = sg.session(allow=["allowed.test"], secrets=[])
    ids = []
    for step, command in enumerate(["ls", "git status", "cat README.md", "ls -la"], 1):
        resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": step,
                                                      "args": {"command": command}})
        assert resp.status_code == 200
        ids.append(resp.json()["id"])
    lines = wait_lines(lambda: cli(sg, "audit", "export", "--format", "opa-decision-log", "--kind", "toolcall",
                                   "--session", sess["id"]), 4)
    entries = [json.loads(line) for line in lines]
    assert [e["request_id"] for e in entries] == ids
    for n, e in enumerate(entries):
        history = e["input"]["history"]
        assert [h["id"] for h in history] == ids[:n]
        assert [h["summary"] for h in history] == [f"shell: {c}" for c in ["ls", "git status", "cat README.md"][:n]]
        assert all(isinstance(h["age_s"], float) and h["age_s"] >= 0 for h in history)


def candidate_policy(tmp_path):
    cand = tmp_path / "candidate"
    shutil.copytree(ROOT / "policies", cand, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (cand / "site").mkdir()
    (cand / "site" / "stricter.rego").write_text(
        "package sandgate.egress\nimport rego.v1\n"
        'deny contains {"code": "site.no_b", "reason": "no /b"} if startswith(input.request.path, "/b")\n')
    return cand


@pytest.mark.e2e
def test_replay_shows_what_a_candidate_policy_would_change(sg, tmp_path, upstream):
    cand = candidate_policy(tmp_path)
    since = str(time.time())                    # the module's sandgate decided other tests' requests before
    sess = sg.session(allow=["allowed.test"])
    for path in ("/a", "/b1", "/b2", "/c"):
        requests.get(f"http://allowed.test:{upstream.port}{path}", proxies=sess["proxies"], timeout=30)
    wait_lines(lambda: cli(sg, "audit", "export", "--format", "opa-decision-log", "--session", sess["id"]), 4)
    proc = cli(sg, "policy", "replay", "--since", since, "--policies", str(cand))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "4 decisions replayed, 2 would change (allow -> deny: 2)"
    assert len(lines) == 3 and all("allow -> deny  [egress.allowed] -> [site.no_b]" in l for l in lines[:2])
    as_json = [json.loads(l) for l in cli(sg, "policy", "replay", "--since", since, "--policies", str(cand),
                                          "--json").stdout.splitlines()]
    assert [j["candidate"]["codes"] for j in as_json] == [["site.no_b"], ["site.no_b"]]
    assert cli(sg, "policy", "replay", "--since", "2000-01-01T00:00:00Z", "--until", "2000-01-02T00:00:00Z",
               "--policies", str(cand)).stdout.strip() == "0 decisions replayed, 0 would change"


@pytest.mark.e2e
def test_shadow_policy_records_divergences_without_changing_decisions(tmp_path, upstream):
    cand = candidate_policy(tmp_path)
    cfg = {**LOOPBACK_CONFIG, "policy": {"shadow_dir": str(cand)}}
    with Sandgate(tmp_path / "gw", cfg) as sg:
        assert sg.call("GET", "/healthz").json()["policy"]["shadow"]["state"] == "ok"
        sess = sg.session(allow=["allowed.test"])
        codes = [requests.get(f"http://allowed.test:{upstream.port}{p}", proxies=sess["proxies"],
                              timeout=30).status_code for p in ("/a", "/b", "/c")]
        assert codes == [200, 200, 200], "the shadow is a dry run"
        lines = wait_lines(lambda: cli(sg, "policy", "diff"), 2)
        assert lines[-1] == "1 divergences"
        assert "live allow -> shadow deny  [egress.allowed] -> [site.no_b]" in lines[0]
        rows = [json.loads(l) for l in cli(sg, "policy", "diff", "--json").stdout.splitlines()]
        assert rows[0]["input"]["request"]["path"] == "/b" and rows[0]["live_rev"] != rows[0]["shadow_rev"]
        exported = [json.loads(l) for l in cli(sg, "audit", "export", "--format", "opa-decision-log").stdout
                    .splitlines()]
        assert rows[0]["decision_id"] in {e["decision_id"] for e in exported}
