"""The generated parts of docs/reference.md: the configuration (gateway/config.py SCHEMA, the `[secrets.NAME]`
and `[databases.NAME]` keys), the command line (the CLI's own parser) and the API (gateway/api/bodies.py), each
from what validates or parses it, so the reference cannot miss a key, a command or a field.

    .venv/bin/python -m gateway.cli.reference --write      # rewrite the generated blocks of docs/reference.md

tests/test_reference.py fails while the file differs from what this renders.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from gateway.api.bodies import BODIES, OTHER_ENDPOINTS
from gateway.config import DATABASE_DOC, SCHEMA, Key

# The keys of a `[secrets.NAME]` table (broker/specs.py validates them; tests/test_reference.py checks this
# table names every key it accepts): key -> (default, meaning).
SECRET_DOC: dict[str, tuple[str, str]] = {
    "kind": ('"token"', "`token`: `source` is the value swapped in; `oauth2`: sandgate mints access tokens; "
                        "`github_app`: installation tokens of a GitHub App; `aws`: AWS keys, requests signed again"),
    "source": ("required (`token`)", "where the value is read: `vault:MOUNT/PATH#KEY`, `local:NAME`, `env:VAR`"),
    "hosts": ("required", "hosts (`host`, `*.host`) the real value may be sent to"),
    "env": ("NAME upper-cased", "the sandbox variable holding the placeholder"),
    "format": ('""', "the placeholder's shape, `PREFIX:LENGTH` (`ghp_:40`), so a client's own checks accept it"),
    "inject_in": ('["header", "query"]', "where the placeholder is replaced by the value: `header`, `query`, "
                                         "`body`"),
    "allow_plaintext": ("false", "replace over cleartext http too (default: TLS only)"),
    "ports": ("[] (any)", "only towards these destination ports"),
    "token_url": ("required (`oauth2`)", "the token endpoint (`https://` only)"),
    "grant": ('"client_credentials"', "`client_credentials` or `refresh_token` (`oauth2`)"),
    "client_id": ('""', "a secret source; required for `client_credentials`"),
    "client_secret": ('""', "a secret source; required for `client_credentials`"),
    "refresh_token": ('""', "a secret source; required for `refresh_token`"),
    "scope": ('""', "space-separated scopes asked for (`oauth2`)"),
    "app_id": ("required (`github_app`)", "the GitHub App's id (a positive integer; anything else refuses to start)"),
    "installation_id": ("required (`github_app`)", "the installation whose tokens are minted (its id, a positive integer)"),
    "private_key": ("required (`github_app`)", "a secret source holding the app's private key (PEM)"),
    "api_url": ('"https://api.github.com"', "the GitHub API (`github_app`)"),
    "access_key_id": ("required (`aws`)", "a secret source: the real access key id"),
    "secret_access_key": ("required (`aws`)", "a secret source: the real secret access key"),
    "session_token": ('""', "a secret source: a session token (`aws`)"),
}


REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
_BLOCK = re.compile(r"(<!-- BEGIN generated: (\w+) -->\n)(.*?)(<!-- END generated: \2 -->)", re.S)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _keys(schema: Mapping[str, Any], where: str = "") -> Iterator[tuple[str, Key]]:
    for name, entry in schema.items():
        path = f"{where}.{name}" if where else name
        if isinstance(entry, Mapping):
            yield from _keys(entry, path)
        else:
            yield path, entry


def render_config() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for path, key in _keys(SCHEMA):
        default = json.dumps(key.default)
        lines.append(f"| `{path}` | {key.type} | `{_cell(default)}` | {_cell(key.meaning)} |")
    for table, doc in (("secrets", SECRET_DOC), ("databases", DATABASE_DOC)):
        for name, (default, meaning) in doc.items():
            lines.append(f"| `{table}.NAME.{name}` | | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def _commands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:                      # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name, ""), sub
                yield from _commands(sub, f"{prefix} {name}")


COMMON = {"--config", "--data-dir", "--api-url", "--token"}        # named once, above the table


def _options(parser: argparse.ArgumentParser) -> str:
    out = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction,
                                                                   argparse._SubParsersAction)):
            continue
        if set(action.option_strings) & COMMON:
            continue
        name = ", ".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)
        out.append(f"`{name}`" + (f": {action.help}" if action.help else ""))
    return "; ".join(str(o) for o in out)


def render_cli() -> str:
    from gateway.cli.commands import build_parser          # the CLI's own parser, as `sandgate` builds it
    lines = ["| command | what it does | arguments |", "|---|---|---|"]
    for name, text, sub in _commands(build_parser(), "sandgate"):
        lines.append(f"| `{name}` | {_cell(text)} | {_cell(_options(sub))} |")
    return "\n".join(lines) + "\n"


def render_api() -> str:
    lines = []
    for body in BODIES:
        lines += [f"### `{body.method} {body.path}` ({body.role})", "", body.meaning[:1].upper() + body.meaning[1:]
                  + ". Body fields (any other field: 400 `unknown_field`):", "",
                  "| field | type | required | meaning |", "|---|---|---|---|"]
        for name, spec in body.fields.items():
            meaning = spec.meaning + ("; keys: " + ", ".join(f"`{k}`" for k in spec.keys) if spec.keys else "")
            lines.append(f"| `{name}` | {spec.type} | {'yes' if spec.required else ''} | {_cell(meaning)} |")
        lines.append("")
    lines += ["### Endpoints without a body", "", "| endpoint | role | meaning |", "|---|---|---|"]
    for method, path, role, meaning in OTHER_ENDPOINTS:
        lines.append(f"| `{method} {path}` | {role} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


RENDER = {"config": render_config, "cli": render_cli, "api": render_api}


def rendered(text: str) -> str:
    """`text` (docs/reference.md) with every generated block rendered afresh. KeyError for an unknown block."""
    return _BLOCK.sub(lambda m: m.group(1) + RENDER[m.group(2)]() + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="render docs/reference.md's generated blocks")
    parser.add_argument("--write", action="store_true", help="rewrite the file (default: print it)")
    args = parser.parse_args(argv)
    text = rendered(REFERENCE.read_text())
    if args.write:
        REFERENCE.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
