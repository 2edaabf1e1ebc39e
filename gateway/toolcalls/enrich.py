"""Tool calls -> the policy input document (`input` of `sandgate.toolcall`). Pure: `now`, the session's history
and what its earlier tool calls left behind (links, written files) are passed in.

`enrich_toolcall(...)` returns the document and the call's effects (links it makes, files it writes, with
their content when visible) for the store; `build_toolcall_input(...)` returns the document alone:
`{"kind": "toolcall", "session", "tool": {"name", "args"}, "step", "history"}` plus

- `shell` for shell-like tools (shell, bash, sh, exec, terminal; `args.command` a string or a list of words):
  `{"parsed", "commands"}` from describe.py (every command with its facts; see policies/README.md);
- `path` for any string `args.path` (read_file, write_file, delete_file, ...), resolved against the workspace
  and the session's links;
- `url` for http_request (or any string `args.url`): `{"parsed", "scheme", "host", "port", "path", "query"}`;
- `sql` for the sql tool: `{"parsed", "kinds", "unbounded", "visible"}`;
- `mcp` for a tool called through the MCP proxy (passed in as given).
Anything that cannot be parsed is reported as such (`parsed: false`) so the policy asks.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gateway.policy.inputs import build_session_input
from gateway.policy.cache import Stamped
from gateway.toolcalls.describe import Effects, Files, describe_line, describe_shell
from gateway.toolcalls.options import parse_options
from gateway.toolcalls.paths import clean_dir, describe_path
from gateway.toolcalls.sqlentry import MAX_SQL_LENGTH, describe_sql, sql_side_effects
from gateway.toolcalls.streams import MAX_TEXT
from gateway.toolcalls.tables import Tables
from gateway.toolcalls.urls import describe_url

__all__ = ["MAX_SQL_LENGTH", "SHELL_TOOLS", "Enriched", "build_toolcall_input", "describe_path", "describe_shell",
           "describe_sql", "describe_url", "enrich_toolcall", "parse_options"]

SHELL_TOOLS = frozenset({"shell", "bash", "sh", "exec", "terminal"})
_PROGRAM_WORD = re.compile(r"\bPROGRAM\b", re.I)


@dataclass
class Enriched:
    doc: dict
    effects: Effects = field(default_factory=Effects)


def enrich_toolcall(*, session: Mapping[str, Any], tool: str, args: Mapping[str, Any] | None, step: int | None,
                    now: float, history: Sequence[Mapping[str, Any]] = (),
                    links: Mapping[str, str | None] | None = None, files: Mapping[str, str | None] | None = None,
                    mcp: Mapping[str, Any] | None = None, tables: Tables | None = None) -> Enriched:
    """The `sandgate.toolcall` policy input for one tool call and what the call leaves behind."""
    doc = toolcall_base(session=session, tool=tool, args=args, step=step, now=now, history=history, mcp=mcp)
    facts, effects = toolcall_facts(doc, links, files, tables)
    doc.update(facts)
    return Enriched(doc, effects)


def toolcall_base(*, session: Mapping[str, Any], tool: str, args: Mapping[str, Any] | None, step: int | None,
                  now: float, history: Sequence[Mapping[str, Any]] = (),
                  mcp: Mapping[str, Any] | None = None, session_input: Mapping[str, Any] | None = None) -> dict:
    """The part of the input that is the call as sent, the session and its history (no parsing).
    `session_input`: build_session_input(session, now), when the caller has it (the gate keeps each session's)."""
    args = dict(args) if isinstance(args, Mapping) else {}
    name = tool if isinstance(tool, str) else ""
    doc: dict[str, Any] = {"kind": "toolcall",
                           "session": build_session_input(session, now) if session_input is None else session_input,
                           "tool": {"name": name, "args": args}, "step": step,
                           "history": _history(history)}
    if mcp is not None:
        doc["mcp"] = dict(mcp)
    return doc


def _history(history: Sequence[Mapping[str, Any]]) -> list:
    """A copy of the entries (Stamped ones are never changed, so kept as they are; any other one copied). The
    gate's history is all Stamped (twenty per tool call): one copy of the list, in C."""
    if history.__class__ is list and {*map(type, history)} <= _STAMPED_ONLY:
        return list(history)
    return [h if h.__class__ is Stamped else dict(h) for h in history]


_STAMPED_ONLY = frozenset({Stamped})


def toolcall_facts(base: Mapping[str, Any], links: Mapping[str, str | None] | None = None,
                   files: Mapping[str, str | None] | None = None, tables: Tables | None = None) -> tuple[dict, Effects]:
    """What parsing adds to `base` (`shell`, `path`, `url`, `sql`: a function of the tool, its arguments, the
    workspace, the session's secret names, what earlier calls left and the policy's tables: `tables_of_policy`
    of the active revision's data, the shipped ones when None) and the call's effects."""
    name, args, mcp = base["tool"]["name"], base["tool"]["args"], base.get("mcp")
    workspace = clean_dir(base["session"]["workspace"])
    links = dict(links or {})
    doc: dict[str, Any] = {}
    effects = Effects()
    command = args.get("command")
    if name in SHELL_TOOLS and mcp is None:
        if isinstance(command, list) and command and all(isinstance(w, str) for w in command):
            command = shlex.join(command)
        if isinstance(command, str):
            doc["shell"], effects = describe_line(command, workspace, links, _written(files),
                                                  _secret_names(base), tables)
        else:
            doc["shell"] = {"parsed": False, "commands": []}
    if isinstance(args.get("path"), str):
        doc["path"] = describe_path(args["path"], workspace, workspace, links)
        if name == "write_file" and not doc["path"]["dynamic"]:
            content = args.get("content")
            visible = isinstance(content, str) and len(content) <= MAX_TEXT
            effects.files[doc["path"]["normalized"]] = content if visible else None
    if name == "http_request" or isinstance(args.get("url"), str):
        url = args.get("url")
        doc["url"] = describe_url(url) if isinstance(url, str) else describe_url("")
    if name == "sql":
        query = args.get("query")
        dialect = args.get("dialect") if isinstance(args.get("dialect"), str) else None
        if base.get("via") == "postgres":      # the PostgreSQL gateway's statements: PostgreSQL's grammar only
            dialect = "postgres"
        sql = describe_sql(query, dialect) if isinstance(query, str) else {"parsed": False, "kinds": [],
                                                                          "unbounded": []}
        doc["sql"] = {**sql, "visible": isinstance(query, str)}
        if isinstance(query, str) and _PROGRAM_WORD.search(query[:MAX_SQL_LENGTH]):
            # COPY ... TO/FROM PROGRAM runs a shell command on the database host: its commands are facts like
            # a shell tool's (`from: "sql"`); a program that is not a literal is not parsed (ask).
            programs, _files = sql_side_effects(query)
            shell, _fx = describe_line("\n".join(programs), workspace, links, _written(files),
                                       _secret_names(base), tables)
            doc["shell"] = {**shell, "parsed": bool(programs) and shell["parsed"], "from": "sql"}
    return doc, effects


def _written(files: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """The session's written files as describe_line takes them (a describe.Files keeps which hold secrets)."""
    return files if isinstance(files, Files) else dict(files or {})


def _secret_names(base: Mapping[str, Any]) -> tuple[str, ...]:
    """The session's secret names: variables named after them are sensitive sources (secretflow.py)."""
    names = base["session"].get("secrets") or []
    return tuple(sorted(n for n in names if isinstance(n, str)))[:64]


def build_toolcall_input(**kwargs: Any) -> dict:
    """enrich_toolcall(...).doc."""
    return enrich_toolcall(**kwargs).doc
