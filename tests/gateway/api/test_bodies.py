"""The API's body schemas (gateway/api/bodies.py): unknown fields are refused by name, types are checked with
each field's own message, and None counts as absent."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.api.bodies import BODIES, CREATE_SESSION, PATCH_SESSION, SCRUB, TOOLCALL, TYPES, check_body
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
