"""The policy advisor's pure core: which rows count, the scope it proposes, the data it writes, the tests it
renders (and that they pass under the proposed data only, with the shipped policy)."""
from __future__ import annotations

import json
import shutil

import pytest

from gateway.policy import advisor
from gateway.policy.advisor import Filters
from gateway.policy.testing import run_tests
from tests.support.gateway import ROOT


def row(host="api.partner.test", *, session="s1", workload="persistent", labels=None, codes=("egress.not_allowlisted",),
        action="deny", port=443, method="CONNECT", ts=100.0, ip_class="", kind="egress"):
    return {"kind": kind, "ts": ts, "session": session, "request_id": f"r-{session}-{ts}",
            "input": {"session": {"id": session, "workload": workload, "labels": labels or {}},
                      "request": {"host": host, "port": port, "method": method, "ip_class": ip_class}},
            "result": {"action": action, "codes": list(codes)}}


@pytest.mark.parametrize("case, curable", [
    (row(), True),
    (row(codes=("egress.not_allowlisted", "address.private")), False),     # an allow would not cure it
    (row(codes=("package.malicious",)), False),
    (row(action="ask"), False),
    (row(kind="toolcall"), False),
    (row(host="10.0.0.1", ip_class="private"), False),                     # never an address
    (row(host="203.0.113.9"), False),
    (row(host="::1"), False),
    (row(host="sandgate.internal"), False),
    (row(host="localhost"), False),
    (row(host="a.b\n#x"), False),
])
def test_which_denials_count(case, curable):
    assert advisor.is_curable(case) is curable


def test_scope_is_what_every_denied_session_shared():
    rows = [row(session="a", labels={"team": "x", "env": "dev"}, ts=1), row(session="b", labels={"team": "x"}, ts=2),
            row(session="b", labels={"team": "x"}, ts=3)]
    found = advisor.gather(rows, [], {}, Filters(min_count=3))
    [s] = advisor.suggestions(found, Filters(min_count=3))
    assert (s.entry, s.scope.workload, s.scope.labels) == ("api.partner.test:443", "persistent", (("team", "x"),))
    assert s.evidence.denials == 3 and len(s.evidence.scopes) == 2 and s.evidence.first == 1 and s.evidence.last == 3
    mixed = rows + [row(session="c", workload="ephemeral", labels={"team": "y"}, port=8443)]
    [m] = advisor.suggestions(advisor.gather(mixed, [], {}, Filters()), Filters())
    assert (m.entry, m.scope.workload, m.scope.labels) == ("api.partner.test", None, ())
    assert m.scope.describe() == "every session"
    assert advisor.suggestions(advisor.gather(rows, [], {}, Filters(min_count=4)), Filters(min_count=4)) == []


def test_filters_and_access_requests():
    rows = [row(session="a", labels={"team": "x"}), row(session="b", workload="ephemeral", labels={"team": "x"})]
    access = [{"kind": "access", "status": st, "created_at": 50.0, "session": "a", "id": f"ap-{st}",
               "action": {"grant": {"host": "api.partner.test", "port": None, "methods": ["GET"]}}}
              for st in ("pending", "approved", "expired", "denied", "cancelled")]
    f = Filters(workload="persistent", labels=(("team", "x"),), min_count=1)
    found = advisor.gather(rows, access, {"a": {"workload": "persistent", "labels": {"team": "x"}}}, f)
    ev = found["api.partner.test"]
    assert (ev.denials, ev.access_requests) == (1, 3)       # a person's "no" is not evidence for a yes
    [s] = advisor.suggestions(found, f)
    assert s.entry == "api.partner.test:443"                # the port the denial used (the requests named none)
    assert advisor.gather(rows, access, {}, Filters(since=200.0)) == {}


def test_proposed_data_merges_into_an_entry_of_the_same_scope():
    rows = [row(session="a", labels={"team": "x"})] * 3 + [row("b.example.com", session="a", labels={"team": "x"})] * 3
    found = advisor.suggestions(advisor.gather(rows, [], {}, Filters()), Filters())
    base = {"egress": {"base_allow": ["pypi.org"], "scoped_allow": [
        {"hosts": ["old.example"], "workload": "persistent", "labels": {"team": "x"}}]}}
    text = advisor.propose_data("sandgate/config/data.json", json.dumps(base, indent=2) + "\n", found)
    doc = json.loads(text)
    assert doc["egress"]["base_allow"] == ["pypi.org"]
    assert doc["egress"]["scoped_allow"] == [{"hosts": ["old.example", "api.partner.test:443", "b.example.com:443"],
                                              "workload": "persistent", "labels": {"team": "x"}}]
    new = json.loads(advisor.propose_data(advisor.DATA_FILES[0], None, found))
    assert new == [{"hosts": ["api.partner.test:443", "b.example.com:443"], "workload": "persistent",
                    "labels": {"team": "x"}}]
    assert advisor.data_file({}) == advisor.DATA_FILES[0]
    assert advisor.data_file({"sandgate/config/data.json": "{}"}) == "sandgate/config/data.json"
    with pytest.raises(ValueError):
        advisor.propose_data("sandgate/config/data.json", "[1]", found)


def test_label_text_cannot_leave_the_generated_tests_comment_or_strings(tmp_path):
    evil = 'x"\n}\ntest_evil if { true }\n# '
    rows = [row(session=str(i), labels={"team": evil, "b\nad": "v"}) for i in range(3)]
    [s] = advisor.suggestions(advisor.gather(rows, [], {}, Filters()), Filters())
    text = advisor.render_test(s, "2026-12-02")
    assert "\ntest_evil" not in text
    policies = tmp_path / "p"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.py"))
    target = policies / advisor.test_path(s.host)
    target.parent.mkdir(parents=True)
    target.write_text(text)
    before = run_tests(policies, run=r"^data\.site\.")
    assert [r.name for r in before.results if not r.passed] == [
        "data.site.suggested.allow_api_partner_test_test.test_allowed_in_scope"]     # the proposal is not in yet
    data = policies / "sandgate/config/data.json"
    data.write_text(advisor.propose_data("sandgate/config/data.json", data.read_text(), [s]))
    after = run_tests(policies, run=r"^data\.site\.")
    assert after.exit_code == 0 and len(after.results) == 8, [(r.name, r.outcome, r.detail) for r in after.results]


def test_a_proposal_the_policy_would_not_honour_is_reported_not_hidden(tmp_path, capsys):
    # a site rule asks for every request to the host: allowing it in data cannot make it allowed, so the
    # generated test fails in the scratch copy; the command says so (exit 1) and still prints the proposal
    import io

    from gateway.cli.suggest import suggest

    policies = tmp_path / "p"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("__pycache__", "*.md", "*.py"))
    (policies / "site").mkdir()
    (policies / "site" / "ask.rego").write_text(
        'package sandgate.egress\n\nimport rego.v1\n\nask contains {"code": "site.ask", "reason": "r"} if '
        '{\n\tinput.request.host == "api.partner.test"\n}\n')
    out = io.StringIO()
    rows = [row(session=str(i)) for i in range(3)]
    assert suggest(policies, rows, [], {}, Filters(), "json", out) == 1
    doc = json.loads(out.getvalue())
    assert doc["tests"]["failed"] >= 1 and doc["suggestions"][0]["replay"] == {"denied": 3, "would_allow": 0}
    assert "test_allowed_in_scope" in capsys.readouterr().err
    assert not (policies / "site" / "suggested").exists()        # nothing applied
    empty = io.StringIO()
    assert suggest(policies, [], [], {}, Filters(), "json", empty) == 0
    assert json.loads(empty.getvalue())["suggestions"] == []
