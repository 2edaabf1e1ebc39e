"""`sandgate audit export --format ocsf`: every audit row of a real trail (egress allowed and denied, tool calls of
several tools, an approval filed and decided, session events) exported by the real CLI, each line validated
against the OCSF 1.5.0 schema (ocsf-json-schema's packaged export, JSON Schema 2020-12 with jsonschema)."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import requests
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema

from gateway.audit.ocsf import OCSF_VERSION, ocsf_event
from tests.conftest import LOOPBACK_CONFIG
from tests.support.cli import run_cli
from tests.support.gateway import Sandgate

SCHEMA = OcsfJsonSchemaEmbedded(get_ocsf_schema(version=OCSF_VERSION))
_VALIDATORS: dict = {}


def validate(event: dict) -> str:
    """The event's class name, after validating it against its class (with the profiles it declares)."""
    name = SCHEMA.lookup_class_name_from_uid(event["class_uid"])
    profiles = tuple(event["metadata"].get("profiles", []))
    key = (name, profiles)
    if key not in _VALIDATORS:
        schema = SCHEMA.get_class_schema(name, list(profiles))
        _VALIDATORS[key] = jsonschema.Draft202012Validator(schema)
    errors = sorted(_VALIDATORS[key].iter_errors(event), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    return name


ROWS = [
    {"id": 1, "chain_n": 1, "hash": "ab" * 32, "seq": 1, "ts": 1.7e9, "session": "s1", "kind": "egress", "action": "allow",
     "reasons": '["example.com is allowed"]', "codes": '["egress.allowed"]', "request_id": "r1", "method": "GET",
     "host": "example.com", "path": "/x?y=1", "http_status": 200, "bytes_in": 10, "bytes_out": 0, "policy_rev": "p",
     "detail": "{}", "step": 3},
    {"id": 2, "seq": 2, "ts": 1.7e9, "session": "s1", "kind": "egress", "action": "deny", "reasons": ["nope"],
     "codes": ["egress.not_allowlisted"], "method": "CONNECT", "host": "evil.test", "path": "", "http_status": 403,
     "detail": {}},
    {"id": 3, "seq": 3, "ts": 1.7e9, "session": "s1", "kind": "egress", "action": "ask", "method": "PATCH",
     "host": "api.test", "path": "/v1", "detail": {}},
    {"id": 4, "seq": 4, "ts": 1.7e9, "session": "s1", "kind": "toolcall", "action": "allow",
     "detail": {"tool": "shell", "summary": "ls -la", "toolcall_id": "t1"}},
    {"id": 5, "seq": 5, "ts": 1.7e9, "session": "s1", "kind": "toolcall", "action": "ask",
     "detail": {"tool": "delete_file", "summary": "rm x", "toolcall_id": "t2"}},
    {"id": 6, "seq": 6, "ts": 1.7e9, "session": "s1", "kind": "toolcall", "action": "deny",
     "detail": {"tool": "query", "mcp_server": "db", "toolcall_id": "t3"}},
    {"id": 7, "seq": 7, "ts": 1.7e9, "session": "s1", "kind": "approval.filed", "action": "ask",
     "detail": {"approval_id": "a1"}},
    {"id": 8, "seq": 8, "ts": 1.7e9, "session": "s1", "kind": "approval.approved", "action": "approved",
     "reasons": ["ok"], "detail": {"approval_id": "a1", "by": "approver:alice"}},
    {"id": 9, "seq": 9, "ts": 1.7e9, "session": "s1", "kind": "approval.denied", "action": "denied",
     "detail": {"approval_id": "a2", "by": "approver:bob"}},
    {"id": 10, "seq": 1, "ts": 1.7e9, "session": None, "kind": "token.revoked", "action": "revoke",
     "detail": {"jti": "x"}},
    {"id": 11, "seq": 10, "ts": 1.7e9, "session": "s1", "kind": "exfiltration", "action": "deny",
     "codes": ["secret.exfiltration"], "host": "evil.test", "detail": {"secrets": ["github"]}},
    {"id": 12, "seq": 2, "ts": 1.7e9, "session": None, "kind": "package.allow", "action": "allow", "detail": {}},
]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['kind']}-{r['action']}" for r in ROWS])
def test_each_kind_of_row_is_a_valid_ocsf_event(row):
    event = ocsf_event(row)
    name = validate(event)
    detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else row["detail"]
    expected = {"egress": "http_activity", "toolcall": "process_activity" if detail.get("tool") == "shell"
                else "api_activity"}.get(row["kind"], "authorize_session" if row["kind"].startswith("approval.")
                                                      else "api_activity")
    assert name == expected
    assert event["unmapped"]["sandgate"]["kind"] == row["kind"]
    assert event["type_uid"] == event["class_uid"] * 100 + event["activity_id"]


def test_http_activity_fields():
    event = ocsf_event(ROWS[0])
    assert event["activity_id"] == 3 and event["http_request"]["url"] == {"path": "/x", "hostname": "example.com",
                                                                          "query_string": "y=1"}
    assert event["http_response"] == {"code": 200} and event["action_id"] == 1 and event["disposition_id"] == 1
    assert event["metadata"]["uid"] == "1" and event["metadata"]["correlation_uid"] == "s1"
    denied = ocsf_event(ROWS[1])
    assert denied["activity_id"] == 1 and denied["action_id"] == 2 and denied["status_id"] == 2
    assert denied["message"] == "nope"


@pytest.fixture(scope="module")
def trail(tmp_path_factory):
    """A real sandgate's trail: egress allowed and denied, tool calls, an approval asked and approved."""
    from tests.support.upstream import Upstream

    tmp = tmp_path_factory.mktemp("ocsf")
    with Upstream() as up, Sandgate(tmp, LOOPBACK_CONFIG) as sg:
        sess = sg.session(allow=["allowed.test"])
        proxies = sess["proxies"]
        assert requests.get(f"http://allowed.test:{up.port}/ok", proxies=proxies, timeout=10).status_code == 200
        assert requests.get(f"http://other.test:{up.port}/no", proxies=proxies, timeout=10).status_code == 403
        for tool, args in (("shell", {"command": "ls -la"}), ("read_file", {"path": "/workspace/a"}),
                           ("deploy", {"target": "prod"})):
            sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": tool, "args": args})
        asked = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "delete_file",
                                                       "args": {"path": "/workspace/b"}}).json()
        approver = sg.token("approver", "alice")
        assert sg.call("POST", f"/v1/approvals/{asked['approval_id']}/approve", token=approver,
                       json={"reason": "fine"}).status_code == 200
        sg.call("DELETE", f"/v1/sessions/{sess['id']}")
        sg.stop()
        out = subprocess.run([sys.executable, "-m", "gateway", "audit", "export", "--format", "ocsf",
                              "--config", str(sg.config_path), "--data-dir", str(sg.data_dir)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        yield [json.loads(line) for line in out.stdout.splitlines()], sg


@pytest.mark.e2e
def test_a_real_trail_exports_as_valid_ocsf(trail):
    events, _sg = trail
    classes = [validate(e) for e in events]
    assert {"http_activity", "process_activity", "api_activity", "authorize_session"} <= set(classes)
    kinds = [e["unmapped"]["sandgate"]["kind"] for e in events]
    assert {"egress", "toolcall", "approval.filed", "approval.approved", "session.created", "session.deleted"} <= \
        set(kinds)
    places = [int(e["metadata"]["uid"]) for e in events]
    assert places == sorted(places) and len(set(places)) == len(places)


@pytest.mark.e2e
def test_the_exported_trail_verifies(trail):
    _events, sg = trail
    # in process (run_cli): the command's real process is test_verify_e2e.py's; the export above runs one here
    out = run_cli("audit", "verify", "--config", str(sg.config_path), "--data-dir", str(sg.data_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "signed checkpoint" in out.stdout and "; 0 rows after it" in out.stdout     # a clean stop seals the tail
