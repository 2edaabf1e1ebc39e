"""A session's tool-call history and what its calls left behind, to and from the store. Pure: rows in, rows out.

`history_entries` turns the session's audit events of kind `toolcall` (and the `sql` rows of wire statements,
which carry their decision's fields: `in_history`) into `input.history` (oldest first, the last HISTORY_SIZE): `{"id", "step", "age_s", "tool", "summary", "decision", "codes", "frozen", "writes"}`.
`audit_facts` is what a decided call adds to its audit row for that (`frozen`, `writes`). `path_rows` /
`paths_from_rows` carry the links a call made and the files it wrote (content when visible) through the
store, so later calls of the session follow those links and read those scripts.
"""
from __future__ import annotations

import operator
from typing import Any, Iterable, Mapping

from gateway.policy.cache import Shared, Stamped
from gateway.toolcalls.describe import Effects, Files

HISTORY_SIZE = 20
SECRET = "secret"          # a file row's target: the call wrote it from sensitive data (secretflow.py)
MAX_WRITES = 20
# The distinct paths (files written, links made) a session's memory keeps; past it a path missing from the
# memory may still have been written or linked, and the session's tool calls are refused (gates/toolcall.py).
MAX_SESSION_PATHS = 5000
# The audit kinds a session's history is read from: a PostgreSQL wire statement's decision has no `toolcall` row,
# its `sql` rows carry it (the call's id as request_id; a prepared statement run again repeats the id)
HISTORY_KINDS = ("toolcall", "sql")


def in_history(row: Mapping[str, Any]) -> bool:
    """Whether an audit row is a history entry: a tool call's row, or a wire statement's row that names the
    decision that let it run (a refusal the gateway made itself, before any decision, names none)."""
    return row.get("kind") == "toolcall" or (row.get("kind") == "sql" and bool(row.get("request_id")))


def history_entries(events: Iterable[Mapping[str, Any]], now: float) -> list[dict]:
    """The last HISTORY_SIZE tool calls of a session, oldest first (duplicates by id dropped: the first kept)."""
    # (static entry, id, ts) of each event: kept on an EventRow (gateway/sessions/memory.py hands the same rows
    # call after call; only the newest has none yet)
    if events.__class__ is not list:
        events = list(events)
    known = [getattr(event, "entry", None) if event.__class__ is EventRow else None for event in events]
    if None in known:
        for i, event in enumerate(events):
            if known[i] is None:
                known[i] = _known(event)
    if len(set(map(_id_of, known))) != len(known):      # duplicates (the store's rows and the queued ones)
        seen: set = set()
        known = [k for k in known if not (k[1] in seen or seen.add(k[1]))]
    out = []
    for static, _, ts in known[-HISTORY_SIZE:]:    # cache.stamp(static, "age_s", age), inlined (20 a tool call)
        age = now - float(ts) if ts else 0.0
        entry = _dict_new(Stamped)
        _dict_update(entry, static)
        entry["age_s"] = round_ms(age) if age > 0.0 else 0.0
        entry.base = static
        entry.field = "age_s"
        out.append(entry)
    return out


def _known(event: Mapping[str, Any]) -> tuple[Shared, Any, Any]:
    known = (_entry(event), event.get("request_id") or id(event), event.get("ts"))
    if event.__class__ is EventRow:          # kept by gateway/sessions/memory.py: its entry is built once
        event.entry = known
    return known


_id_of = operator.itemgetter(1)


def round_ms(x: float) -> float:
    """round(x, 3) for a finite x > 0, without its decimal conversion where x * 1000 is not within 1e-7 of a
    half (then the product's rounding cannot have moved it across one, and i / 1000 is correctly rounded, as
    round()'s result is): 3-4 times cheaper (twenty ages a tool call). Checked against round() in tests."""
    y = x * 1000.0
    if y < 1e9:
        i = int(y)
        f = y - i                       # exact
        if f < 0.4999999:
            return i / 1000.0
        if f > 0.5000001:
            return (i + 1) / 1000.0
    return round(x, 3)


_dict_new, _dict_update = dict.__new__, dict.update


class EventRow(dict):
    """A recorded tool-call event as a session's memory keeps it (gateway/sessions/memory.py). A recorded call
    never changes, so its history entry is built once and kept on it (and goes when the row goes)."""

    __slots__ = ("entry",)


def _entry(event: Mapping[str, Any]) -> Shared:
    detail = event.get("detail") or {}
    return Shared({"id": event.get("request_id") or "", "step": event.get("step"), "age_s": 0.0,
                   "tool": detail.get("tool", ""), "summary": detail.get("summary", ""),
                   "decision": detail.get("decision") or event.get("action", ""), "codes": list(event.get("codes") or []),
                   "frozen": bool(detail.get("frozen", False)), "writes": list(detail.get("writes") or [])})


def audit_facts(doc: Mapping[str, Any]) -> dict:
    """{"frozen", "writes"} of a decided tool call, for its audit row (and so for later calls' history)."""
    writes: list[str] = []
    shell = doc.get("shell") or {}
    for cmd in shell.get("commands", []) if isinstance(shell, dict) else []:
        for fact in cmd.get("writes", []) + cmd.get("deletes", []) + cmd.get("moves", []):
            if fact.get("normalized"):
                writes.append(fact["normalized"])
    path = doc.get("path")
    if isinstance(path, dict) and path.get("normalized") and doc.get("tool", {}).get("name") in (
            "write_file", "delete_file"):
        writes.append(path["normalized"])
    session = doc.get("session") or {}
    return {"frozen": bool(session.get("frozen")), "writes": list(dict.fromkeys(writes))[:MAX_WRITES]}


DELETE_PROGRAMS = frozenset({"rm", "rmdir", "unlink", "shred", "srm"})
MAX_EFFECTS = 20


def _items(value: Any) -> list:
    return value if isinstance(value, list) else []


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def effect_lines(doc: Mapping[str, Any]) -> list[str]:
    """What a decided tool call would do, for the person asked to approve it: "deletes /workspace/build",
    "writes /workspace/out.txt", "moves ...", "sends POST to HOST", "runs SQL delete". At most MAX_EFFECTS;
    a part of the input of another shape than sandgate builds is skipped."""
    out: list[str] = []

    def paths(verb: str, facts: list) -> None:
        for f in facts:
            where = _obj(f).get("normalized") or _obj(f).get("raw")
            if isinstance(where, str) and where:
                out.append(f"{verb} {where}")

    for cmd in _items(_obj(doc.get("shell")).get("commands")):
        cmd = _obj(cmd)
        deleted = _items(cmd.get("deletes")) + (_items(cmd.get("paths")) if cmd.get("name") in DELETE_PROGRAMS
                                                else [])
        paths("deletes", deleted)
        paths("writes", _items(cmd.get("writes")))
        paths("moves", _items(cmd.get("moves")))
        for http in _items(cmd.get("http")):
            host, method = _obj(http).get("host"), _obj(http).get("method")
            if isinstance(host, str) and host:
                out.append(f"sends {method if isinstance(method, str) and method else 'HTTP'} to {host}")
        host = _obj(cmd.get("remote")).get("host")
        if isinstance(host, str) and host:
            out.append(f"runs on {host}")
    tool = _obj(doc.get("tool"))
    name, path = tool.get("name"), _obj(doc.get("path"))
    if isinstance(path.get("normalized"), str) and path["normalized"] and name in ("write_file", "delete_file"):
        out.append(f"{'writes' if name == 'write_file' else 'deletes'} {path['normalized']}")
    kinds = [k for k in _items(_obj(doc.get("sql")).get("kinds")) if isinstance(k, str)]
    if kinds:
        out.append("runs SQL " + ", ".join(kinds[:5]))
    host, method = _obj(doc.get("url")).get("host"), _obj(tool.get("args")).get("method")
    if name == "http_request" and isinstance(host, str) and host:
        out.append(f"sends {method if isinstance(method, str) and method else 'GET'} to {host}")
    return list(dict.fromkeys(out))[:MAX_EFFECTS]


def path_rows(session: str, effects: Effects, now: float) -> list[dict]:
    """Store rows for the links a call made and the files it wrote."""
    rows = [{"session": session, "path": path, "kind": "link", "target": target, "content": None, "ts": now}
            for path, target in effects.links.items()]
    rows += [{"session": session, "path": path, "kind": "file", "target": SECRET if path in effects.secret else None,
              "content": content, "ts": now} for path, content in effects.files.items()]
    return rows


def paths_from_rows(rows: Iterable[Mapping[str, Any]]) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(links, files) from a session's path rows, oldest first (a later row for a path wins); `files` is a
    describe.Files whose `secret` names the files written from sensitive data (a file row's target "secret")."""
    links: dict[str, str | None] = {}
    files: dict[str, str | None] = {}
    secret: set[str] = set()
    for row in rows:
        if row.get("kind") == "link":
            links[row["path"]] = row.get("target")
            files.pop(row["path"], None)
            secret.discard(row["path"])
        elif row.get("kind") == "file":
            files[row["path"]] = row.get("content")
            links.pop(row["path"], None)
            if row.get("target") == SECRET:
                secret.add(row["path"])
            else:
                secret.discard(row["path"])
    return links, Files(files, secret=frozenset(secret))
