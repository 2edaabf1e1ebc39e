"""Everything a session's creator can make sandgate hold is capped, and past a cap the API answers 4xx naming it
(one sandgate for the module).

Before: `labels` (create and PATCH), `allow`, `secrets`, `databases`, `workspace`, `ca_path` and a tool call's
`tool` name took anything the 4 MiB body cap let through, and the session row, every policy input built from it and
the approval page held all of it.
"""
from __future__ import annotations

import pytest

from gateway.api.bodies import MAX_TOOL_NAME
from gateway.approvals.access import MAX_PREFIX, MAX_REASON
from gateway.gates.toolcall import MAX_ARGS_BYTES
from gateway.mcp.context import MAX_ANNOTATIONS_BYTES
from gateway.sessions.spec import MAX_ALLOW, MAX_LABEL_KEY, MAX_LABEL_VALUE, MAX_LABELS, MAX_NAMES, MAX_PATH
from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with Sandgate(tmp_path_factory.mktemp("caps"), LOOPBACK_CONFIG) as sg:
        yield sg


def refused(resp, words: str, status: int = 400) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    body = resp.json()
    assert set(body) == {"error", "detail"}
    assert words in body["detail"], body


def labels(n: int) -> dict:
    return {f"k{i}": "v" for i in range(n)}


def test_labels_at_the_cap_are_kept(gw):
    sess = gw.session(labels=labels(MAX_LABELS - 1) | {"n" * MAX_LABEL_KEY: "v" * MAX_LABEL_VALUE})
    assert len(gw.call("GET", f"/v1/sessions/{sess['id']}").json()["labels"]) == MAX_LABELS


@pytest.mark.parametrize("bad", [
    pytest.param(labels(MAX_LABELS + 1), id="too-many"),
    pytest.param({"n" * (MAX_LABEL_KEY + 1): "v"}, id="long-name"),
    pytest.param({"k": "v" * (MAX_LABEL_VALUE + 1)}, id="long-value"),
])
def test_labels_past_the_cap_are_400_at_create_and_patch(gw, bad):
    refused(gw.call("POST", "/v1/sessions", json={"labels": bad}), "labels: ")
    sess = gw.session(labels={"team": "a"})
    refused(gw.call("PATCH", f"/v1/sessions/{sess['id']}", json={"labels": bad}), "labels: ")
    assert gw.call("GET", f"/v1/sessions/{sess['id']}").json()["labels"] == {"team": "a"}


def test_allow_past_the_cap_is_400(gw):
    hosts = [f"h{i}.example.com" for i in range(MAX_ALLOW + 1)]
    refused(gw.call("POST", "/v1/sessions", json={"allow": hosts}), f"at most {MAX_ALLOW} host patterns")
    assert len(gw.session(allow=hosts[:MAX_ALLOW])["allow"]) == MAX_ALLOW


@pytest.mark.parametrize("key", ["secrets", "databases"])
def test_secret_and_database_lists_past_the_cap_are_400(gw, key):
    resp = gw.call("POST", "/v1/sessions", json={key: ["x" * 1000] * (MAX_NAMES + 1)})
    refused(resp, f"at most {MAX_NAMES}")
    # below the cap an unknown name is still refused, and the answer does not echo every name back
    resp = gw.call("POST", "/v1/sessions", json={key: [f"{i}" + "x" * 10_000 for i in range(MAX_NAMES)]})
    refused(resp, f"unknown {key}")
    assert len(resp.text) < 1000


@pytest.mark.parametrize("key", ["workspace", "ca_path"])
def test_paths_past_the_cap_are_400(gw, key):
    refused(gw.call("POST", "/v1/sessions", json={key: "/" + "a" * MAX_PATH}), f"at most {MAX_PATH} characters")


def test_a_tool_name_past_the_cap_is_400(gw):
    sid = gw.session()["id"]
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "t" * (MAX_TOOL_NAME + 1), "args": {}})
    refused(resp, f"at most {MAX_TOOL_NAME} characters")
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "t" * MAX_TOOL_NAME, "args": {}})
    assert resp.status_code == 200, resp.text


def test_tool_args_and_mcp_annotations_past_their_caps_are_refused(gw):
    sid = gw.session()["id"]
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "write_file",
                                                  "args": {"path": "/workspace/a", "content": "x" * MAX_ARGS_BYTES}})
    refused(resp, "too large", status=413)
    resp = gw.call("POST", "/v1/toolcalls", json={"session": sid, "tool": "t", "args": {},
                                                  "mcp": {"server": "s", "annotations": {"a": "x" * MAX_ANNOTATIONS_BYTES}}})
    refused(resp, "too large")


def test_access_request_fields_past_their_caps_are_400(gw):
    sid = gw.session()["id"]
    path = f"/v1/sessions/{sid}/access-requests"
    refused(gw.call("POST", path, json={"host": "api.example.com", "reason": "r" * (MAX_REASON + 1)}), "reason")
    refused(gw.call("POST", path, json={"host": "api.example.com", "reason": "r",
                                        "path_prefix": "/" + "p" * MAX_PREFIX}), "path_prefix")
    refused(gw.call("POST", path, json={"host": "a" * 254 + ".com", "reason": "r"}), "host")
