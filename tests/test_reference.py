"""docs/reference.md is complete: its generated tables (configuration, command line, API) are what
gateway/cli/reference.py renders from the code that validates them, and every route the server serves and every
field of the policy input is in it."""
from __future__ import annotations

import re

from aiohttp import web

from broker.oauth2 import GITHUB_APP_KEYS, OAUTH2_KEYS
from broker.specs import AWS_KEYS, SPEC_KEYS
from gateway.api.bodies import BODIES, OTHER_ENDPOINTS
from gateway.cli.reference import REFERENCE, SECRET_DOC, rendered
from gateway.config import DATABASE_DOC, DATABASE_KEYS
from gateway.policy.inputs import build_egress_input


def test_the_generated_tables_are_up_to_date():
    text = REFERENCE.read_text()
    assert text.count("<!-- BEGIN generated:") == 3
    assert rendered(text) == text, ("docs/reference.md is stale or misses a key, command or field: run "
                                    "`.venv/bin/python -m gateway.cli.reference --write`")


def test_every_key_of_a_secret_and_a_database_table_is_documented():
    assert set(SECRET_DOC) == SPEC_KEYS | OAUTH2_KEYS | GITHUB_APP_KEYS | AWS_KEYS     # every kind's keys, as broker/ accepts them
    assert set(DATABASE_DOC) == DATABASE_KEYS


def _shape(method: str, path: str) -> tuple[str, str]:
    return method, re.sub(r"\{\w+\}", "{}", path)


def test_every_route_the_server_serves_is_documented():
    app = web.Application()
    from gateway import server                               # the module that adds the API's routes
    for module in server.__dict__.values():
        if isinstance(getattr(module, "routes", None), web.RouteTableDef):
            app.add_routes(module.routes)
    served = {_shape(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    documented = {_shape(b.method, b.path) for b in BODIES} | {_shape(m, p) for m, p, _, _ in OTHER_ENDPOINTS}
    assert served and served == documented


def test_every_field_of_the_egress_and_session_input_is_named():
    text = REFERENCE.read_text().split("## Policy input", 1)[1].split("\n## ", 1)[0]
    doc = build_egress_input(session={"id": "s", "workload": "ephemeral", "created_at": 0}, now=1, method="GET",
                             scheme="https", host="h", port=443, path="/", package={}, tunnel=True, aws={})
    assert all(f"`input.{key}" in text for key in doc)
    for part in ("session", "request"):
        for key in doc[part]:
            assert re.search(rf"`input\.{part}[`.][^\n]*\b{key}\b", text), (part, key)


def test_every_environment_variable_sandgate_reads_is_documented():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    read = set()
    for package in ("gateway", "sandgate", "broker"):
        for path in (root / package).rglob("*.py"):
            read |= set(re.findall(r"""(?:environ(?:\.get)?|getenv)\(?\[?\s*["'](SANDGATE_[A-Z_]+)["']""",
                                   path.read_text()))
    text = REFERENCE.read_text()
    assert read and not {name for name in read if f"`{name}`" not in text}


def test_every_command_and_flag_of_the_cli_is_documented():
    import argparse
    from gateway.cli.commands import build_parser
    from gateway.cli.reference import _commands
    text = REFERENCE.read_text()
    for name, _, parser in [("sandgate", "", build_parser()), *_commands(build_parser(), "sandgate")]:
        assert name == "sandgate" or f"`{name}`" in text, name
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:            # internal (serve --worker-index, set for workers)
                continue
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (name, flag)


def test_every_nested_body_key_is_documented():
    text = REFERENCE.read_text().split("## API", 1)[1]
    for body in BODIES:
        for name, spec in body.fields.items():
            for key in spec.keys:
                assert f"`{key}`" in text, (body.path, name, key)
