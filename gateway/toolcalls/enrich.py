"""Tool calls -> the policy input document (`input` of `sandgate.toolcall`). Pure: `now` is passed in.

`build_toolcall_input` returns `{"kind": "toolcall", "session", "tool": {"name", "args"}, "step"}` plus facts
the policy reasons about, so the Rego stays free of parsing:

- `shell` (tools shell, bash, sh, exec, terminal with a string `args.command`, or a list of words):
  `parse_shell(...)`, each command extended with `name` (basename of the effective command), `operands`
  (non-option words, option arguments skipped), `flags` (option words without `=value`, short clusters also
  split into single letters), `dynamic` (the command name is computed at run time, or a shell reads its
  script from stdin), `cwd` and `paths` (path facts, see `describe_path`; `cd`/`pushd` earlier in the list
  move the working directory, `git -C` too), `writes` (path facts of files the command writes: redirections
  other than /dev/null & co., tee/touch/mkdir/cp/mv/... targets), and where it applies `sql` (psql -c,
  mysql -e, sqlite3, heredocs into them), `http` (`{"method", "urls"}` for curl, wget, httpie) and
  `exec_names` (for find: the commands its -exec/-ok run). For find, `paths` are its start points; for git,
  the operands after the subcommand.
- `path` for any string `args.path` (read_file, write_file, delete_file, ...), resolved against the workspace.
- `url` for http_request (or any string `args.url`): `{"parsed", "scheme", "host", "port", "path", "query"}`.
- `sql` for the sql tool: `{"parsed": bool, "kinds": [...]}`.
Anything that cannot be parsed is reported as such (`parsed: false`, `dynamic: true`) so the policy asks.
"""
from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any, Mapping
from urllib.parse import urlsplit

from gateway.egress.hosts import normalise_host
from gateway.policy.inputs import build_session_input, parse_query
from gateway.toolcalls.options import parse_options
from gateway.toolcalls.paths import _clean_dir, _resolve_dir, describe_path
from gateway.toolcalls.shell import parse_shell
from gateway.toolcalls.sql import MAX_SQL_LENGTH, describe_sql
from gateway.toolcalls.wrappers import find_exec_groups, strip_wrappers

__all__ = ["MAX_SQL_LENGTH", "SHELL_TOOLS", "build_toolcall_input", "describe_path", "describe_shell",
           "describe_sql", "describe_url", "parse_options"]

SHELL_TOOLS = frozenset({"shell", "bash", "sh", "exec", "terminal"})
_SAFE_WRITE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"})
_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})
_SQL_CLIENTS = {"psql": ("-c", "--command"), "mysql": ("-e", "--execute"), "mariadb": ("-e", "--execute")}
_SQLITE = frozenset({"sqlite3", "sqlite", "duckdb"})
_HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "xhs"})


def build_toolcall_input(*, session: Mapping[str, Any], tool: str, args: Mapping[str, Any] | None,
                         step: int | None, now: float) -> dict:
    """The `sandgate.toolcall` policy input for one tool call (see the module docstring)."""
    session_input = build_session_input(session, now)
    workspace = _clean_dir(session_input["workspace"])
    args = dict(args) if isinstance(args, Mapping) else {}
    doc: dict[str, Any] = {"kind": "toolcall", "session": session_input,
                           "tool": {"name": tool if isinstance(tool, str) else "", "args": args}, "step": step}
    command = args.get("command")
    if tool in SHELL_TOOLS:
        if isinstance(command, list) and command and all(isinstance(w, str) for w in command):
            command = shlex.join(command)
        doc["shell"] = describe_shell(command, workspace) if isinstance(command, str) else \
            {"parsed": False, "commands": []}
    if isinstance(args.get("path"), str):
        doc["path"] = describe_path(args["path"], workspace, workspace)
    if tool == "http_request" or isinstance(args.get("url"), str):
        url = args.get("url")
        doc["url"] = describe_url(url) if isinstance(url, str) else describe_url("")
    if tool == "sql":
        query = args.get("query")
        dialect = args.get("dialect") if isinstance(args.get("dialect"), str) else None
        doc["sql"] = describe_sql(query, dialect) if isinstance(query, str) else {"parsed": False, "kinds": []}
    return doc


# -- shell ------------------------------------------------------------------------------------------------
def describe_shell(command: str, workspace: str) -> dict:
    """parse_shell(command) with per-command facts added (name, operands, flags, paths, writes, ...)."""
    shell = parse_shell(command)
    cwd: str | None = workspace
    for cmd in shell["commands"]:
        cwd = _describe_command(cmd, cwd, workspace)
    return shell


def _describe_command(cmd: dict, cwd: str | None, workspace: str) -> str | None:
    """Adds facts to cmd; returns the working directory for the next command."""
    eff = cmd["effective"]
    name = posixpath.basename(eff[0]) if eff else ""
    flags, operands, values = parse_options(name, eff[1:])
    here = cwd
    if name == "git" and values.get("-C"):
        here = _resolve_dir(values["-C"][-1], cwd)
    cmd.update(name=name, operands=operands, flags=flags)
    cmd["dynamic"] = bool(eff and re.search(r"[$`*?]", eff[0])) or bool(cmd.get("stdin_script"))
    cmd["cwd"] = describe_path(".", here, workspace)
    cmd["paths"] = [describe_path(w, here, workspace) for w in _path_words(name, eff, operands)]
    cmd["writes"] = [describe_path(t, here, workspace) for t in _write_targets(cmd, name, operands, values)
                     if t not in _SAFE_WRITE_TARGETS]
    sql = _shell_sql(cmd, name, operands, values)
    if sql is not None:
        cmd["sql"] = sql
    if name in _HTTP_CLIENTS:
        cmd["http"] = _shell_http(name, flags, operands, values)
    if name == "find":
        runs = [strip_wrappers(group) for group in find_exec_groups(eff)]
        cmd["exec_names"] = [posixpath.basename(run[0]) for run in runs if run]
    if name in ("cd", "pushd"):
        target = operands[0] if operands else "~"
        return None if target == "-" else _resolve_dir(target, cwd)
    if name == "popd":
        return None
    return cwd


def _path_words(name: str, eff: list[str], operands: list[str]) -> list[str]:
    if name == "find":
        starts = []
        for word in eff[1:]:
            if word.startswith(("-", "(", "!")) and word not in ("-", "-H", "-L", "-P"):
                break
            if word not in ("-H", "-L", "-P"):
                starts.append(word)
        return starts or ["."]
    if name == "git":
        return operands[1:]
    return operands


def _write_targets(cmd: dict, name: str, operands: list[str], values: dict) -> list[str]:
    targets = [r["target"] for r in cmd["redirects"] if r["op"] in _WRITE_OPS and r["target"]]
    if name in ("tee", "touch", "mkdir", "mv", "rsync"):
        targets += operands
    elif name in ("cp", "ln", "install", "scp") and operands:
        explicit = values.get("-t", []) + values.get("--target-directory", [])
        targets += explicit or operands[-1:]
    elif name in ("chmod", "chown", "chgrp"):
        targets += operands[1:]
    elif name == "sed" and any(f in cmd["flags"] for f in ("-i", "--in-place")):
        targets += operands if (values.get("-e") or values.get("--expression")) else operands[1:]
    elif name == "dd":
        targets += [w[3:] for w in operands if w.startswith("of=")]
    return targets


def _shell_sql(cmd: dict, name: str, operands: list[str], values: dict) -> dict | None:
    texts: list[str] = []
    if name in _SQL_CLIENTS:
        for opt in _SQL_CLIENTS[name]:
            texts += values.get(opt, [])
    elif name in _SQLITE and len(operands) > 1:
        texts += operands[1:]
    else:
        return None
    texts += [r["body"] for r in cmd["redirects"] if "body" in r]
    if not texts:
        return None
    parts = [describe_sql(t) for t in texts]
    return {"parsed": all(p["parsed"] for p in parts),
            "kinds": list(dict.fromkeys(k for p in parts for k in p["kinds"]))}


def _shell_http(name: str, flags: list[str], operands: list[str], values: dict) -> dict:
    def given(*opts: str) -> bool:
        return any(o in values or o in flags for o in opts)

    urls = list(operands)
    if name == "curl":
        urls += values.get("--url", [])
        explicit = (values.get("-X") or values.get("--request") or [""])[-1].upper()
        if explicit:
            method = explicit
        elif given("-I", "--head"):
            method = "HEAD"
        elif given("-T", "--upload-file"):
            method = "PUT"
        elif given("-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "--data-ascii", "--json",
                   "-F", "--form", "--form-string") and not given("-G", "--get"):
            method = "POST"
        else:
            method = "GET"
    elif name == "wget":
        method = (values.get("--method") or [""])[-1].upper() or \
            ("POST" if given("--post-data", "--post-file", "--body-data", "--body-file") else "GET")
    else:
        method = "GET"
        if urls and urls[0].upper() in _METHODS:
            method, urls = urls[0].upper(), urls[1:]
        elif any(re.match(r"[^=:]+(:=|=|@)", w) for w in urls[1:]):
            method = "POST"
        urls = urls[:1]
    return {"method": method, "urls": [describe_url(u if "://" in u else "http://" + u) for u in urls]}


# -- urls ------------------------------------------------------------------------------------------------
def describe_url(url: str) -> dict:
    """{"parsed", "scheme", "host", "port", "path", "query"}; host canonical (lower-case, IDNA, no brackets)."""
    out = {"parsed": False, "scheme": "", "host": "", "port": 0, "path": "", "query": {}}
    try:
        parts = urlsplit(url)
        if re.search(r"[\s\\]", parts.netloc) or not parts.hostname:
            return out
        scheme = parts.scheme.lower()
        port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
        host = normalise_host(parts.hostname)
    except ValueError:
        return out
    return {"parsed": True, "scheme": scheme, "host": host, "port": port, "path": parts.path or "/",
            "query": parse_query(parts.query)}
