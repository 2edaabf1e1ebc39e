"""The API's body schemas (gateway/api/bodies.py): unknown fields are refused by name, types are checked with
each field's own message, and None counts as absent."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.api.bodies import (BODIES, CREATE_SESSION, DECIDE, MCP_TOOLS, PATCH_SESSION, SCRUB, TOOLCALL, TYPES,
                                 check_body)
from gateway.api.errors import ApiError


def refusal(body, schema):
    with pytest.raises(ApiError) as err:
        check_body(body, schema)
    return err.value.status, err.value.code, err.value.detail


def test_a_misspelt_field_is_refused_by_name():
    status, code, detail = refusal({"lables": {"team": "a"}}, CREATE_SESSION)
    assert (status, code) == (400, "unknown_field") and "'lables'" in detail and "labels" in detail


@pytest.mark.parametrize("body, schema, detail", [
    ([], CREATE_SESSION, "body must be a JSON object"),
    ({"labels": {"a": 1}}, CREATE_SESSION, "labels must be an object of strings"),
    ({"allow": "example.com"}, CREATE_SESSION, "allow must be a list of host patterns"),
    ({"frozen": "yes"}, PATCH_SESSION, "frozen must be a boolean"),
    ({"tool": "shell"}, TOOLCALL, "session and tool are required strings"),
    ({"session": "s", "tool": ""}, TOOLCALL, "session and tool are required strings"),
    ({"session": "s", "tool": "x", "step": -1}, TOOLCALL, "step must be an integer from 0 to"),
    ({"session": "s", "tool": "x", "step": True}, TOOLCALL, "step must be an integer from 0 to"),
    ({"texts": ["a", 1]}, SCRUB, "texts must be a list of at most"),
])
def test_wrong_types_keep_their_messages(body, schema, detail):
    status, code, text = refusal(body, schema)
    assert (status, code) == (400, "bad_request") and detail in text


def test_known_fields_pass_and_none_is_absent():
    assert check_body({"labels": None, "workload": "ephemeral"}, CREATE_SESSION)["workload"] == "ephemeral"
    assert check_body({}, CREATE_SESSION) == {}


@given(st.dictionaries(st.text(max_size=8), st.none() | st.booleans() | st.integers() | st.text(), max_size=4))
def test_any_field_outside_the_schema_is_refused(body):
    for schema in BODIES:
        unknown = [k for k in body if k not in schema.fields]
        if unknown:
            assert refusal(body, schema)[1] == "unknown_field"


def test_every_field_has_a_known_type_and_a_meaning():
    for schema in BODIES:
        for name, spec in schema.fields.items():
            assert spec.type in TYPES and spec.meaning.strip(), (schema.path, name)


@pytest.mark.parametrize("body, schema, field", [
    ({"budgets": {"requestz": 1}}, CREATE_SESSION, "budgets.requestz"),
    ({"budgets": {"toolcalls": 1, "toolcall": 1}}, PATCH_SESSION, "budgets.toolcall"),
    ({"session": "s", "tool": "x", "mcp": {"server": "a", "servr": "b"}}, TOOLCALL, "mcp.servr"),
    ({"tools": [{"name": "a"}, {"name": "b", "annotatons": {}}]}, MCP_TOOLS, "tools[1].annotatons"),
    ({"grant": {"methodz": ["GET"]}}, DECIDE, "grant.methodz"),
])
def test_a_misspelt_nested_field_is_refused_by_name(body, schema, field):
    status, code, detail = refusal(body, schema)
    assert (status, code) == (400, "unknown_field") and repr(field) in detail


def test_a_type_is_named_with_its_article():
    assert refusal({"ttl_s": "5"}, CREATE_SESSION)[2] == "ttl_s must be an integer"


def test_the_access_parsers_refuse_unknown_fields_as_unknown_field():
    from gateway.approvals.access import BadAccess, narrow, parse_access_request
    with pytest.raises(BadAccess) as err:       # the sandbox's own path (sandgate.internal) has no check_body
        parse_access_request({"host": "example.com", "reason": "r", "hostt": 1}, max_ttl_s=60, resolve={})
    assert err.value.code == "unknown_field" and "'hostt'" in str(err.value)
    with pytest.raises(BadAccess) as err:
        narrow({"methods": ["GET"], "path_prefix": "/", "ttl_s": 60}, {"ttl": 5}, 60)
    assert err.value.code == "unknown_field"


def test_a_misspelt_query_parameter_or_value_is_refused_by_name():
    from gateway.api.bodies import check_query
    known = {"status": ("active", "expired"), "session": ()}
    check_query({"status": "active", "session": "s"}, known, "GET /x")
    check_query({"status": ""}, known, "GET /x")
    with pytest.raises(ApiError) as err:
        check_query({"sesion": "s"}, known, "GET /x")           # would list every session's rows
    assert (err.value.status, err.value.code) == (400, "unknown_field") and "'sesion'" in err.value.detail
    with pytest.raises(ApiError) as err:
        check_query({"status": "activ"}, known, "GET /x")       # would list nothing, as if there were none
    assert err.value.code == "bad_request" and "status must be one of active, expired" in err.value.detail
