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

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from gateway.egress.hosts import normalise_host
from gateway.policy.inputs import build_session_input, parse_query
from gateway.toolcalls.shell import find_exec_groups, parse_shell, strip_wrappers

SHELL_TOOLS = frozenset({"shell", "bash", "sh", "exec", "terminal"})
MAX_SQL_LENGTH = 100_000
_SAFE_WRITE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"})
_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&"})
_HOME = re.compile(r"(~[A-Za-z0-9._-]*|\$HOME|\$\{HOME\})(?=/|$)")
_CWD = re.compile(r"(\$PWD|\$\{PWD\})(?=/|$)")
_HOME_DIR = re.compile(r"/(root|home/[^/]+|Users/[^/]+)(?=/|$)")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})

# command -> options that take a separate argument (for telling operands from option values)
_ARG_OPTIONS: dict[str, frozenset[str]] = {name: frozenset(text.split()) for name, text in {
    "git": "-C -c --git-dir --work-tree --namespace --exec-path -o --push-option --repo --receive-pack --exec "
           "-m -F --message --file -b -B --branch --author --date --reference --depth",
    "kubectl": "-n --namespace --context --cluster --kubeconfig -s --server --user --token -f --filename "
               "-l --selector -o --output -c --container --field-selector --type -p --patch --replicas",
    "helm": "-n --namespace --kube-context --kubeconfig -f --values --set --set-string --set-file --version "
            "--repo -o --output --timeout",
    "docker": "-H --host --context --config -f --file -t --tag -e --env -v --volume -p --publish -w --workdir "
              "--name --network -u --user --entrypoint --platform -l --label",
    "curl": "-X --request -d --data --data-raw --data-binary --data-urlencode --data-ascii --json -F --form "
            "--form-string -H --header -o --output -u --user -A --user-agent -e --referer -b --cookie -c "
            "--cookie-jar -T --upload-file -x --proxy -U --proxy-user -m --max-time --connect-timeout -w "
            "--write-out -K --config -E --cert --key --cacert --capath -r --range -C --continue-at --resolve "
            "--connect-to --retry --retry-delay --retry-max-time -y -Y --limit-rate --interface --url -z "
            "--time-cond --max-filesize -P --ftp-port --oauth2-bearer --proto --proto-redir -Q --quote "
            "--unix-socket --dns-servers --local-port -t --telnet-option --variable --output-dir",
    "wget": "-O -o -a -P -U -e -t -T -i -B --output-document --output-file --post-data --post-file --method "
            "--body-data --body-file --header --user-agent --directory-prefix --tries --timeout --user "
            "--password --input-file",
    "psql": "-c --command -d --dbname -h --host -p --port -U --username -f --file -v --set --variable -o "
            "--output -L --log-file -P --pset -F -R",
    "mysql": "-e --execute -u --user -h --host -P --port -D --database -S --socket --default-character-set",
    "truncate": "-s --size -r --reference",
    "shred": "-n --iterations -s --size --random-source",
    "gcloud": "--project --region --zone --account --configuration --format --filter --flags-file",
    "aws": "--region --profile --output --endpoint-url --query --cli-input-json",
    "sed": "-e -f --expression --file -l --line-length",
    "cp": "-t --target-directory -S --suffix",
    "mv": "-t --target-directory -S --suffix",
    "tee": "",
}.items()}
_ARG_OPTIONS["mariadb"] = _ARG_OPTIONS["mysql"]
_ARG_OPTIONS["podman"] = _ARG_OPTIONS["docker"]
_SQL_CLIENTS = {"psql": ("-c", "--command"), "mysql": ("-e", "--execute"), "mariadb": ("-e", "--execute")}
_SQLITE = frozenset({"sqlite3", "sqlite", "duckdb"})
_HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "xhs"})

_SQL_KINDS = {
    "Select": "SELECT", "Union": "SELECT", "Intersect": "SELECT", "Except": "SELECT", "Values": "SELECT",
    "Subquery": "SELECT", "Insert": "INSERT", "Update": "UPDATE", "Delete": "DELETE", "Drop": "DROP",
    "TruncateTable": "TRUNCATE", "Alter": "ALTER", "AlterTable": "ALTER", "Create": "CREATE", "Grant": "GRANT",
    "Revoke": "REVOKE", "Merge": "MERGE", "Copy": "COPY", "Set": "SET", "Use": "USE", "Describe": "DESCRIBE",
    "Transaction": "BEGIN", "Commit": "COMMIT", "Rollback": "ROLLBACK", "Pragma": "PRAGMA", "LoadData": "LOAD",
    "Analyze": "ANALYZE", "Comment": "COMMENT", "Show": "SHOW",
}
_SQL_WRITE_NODES = ("Insert", "Update", "Delete", "Drop", "TruncateTable", "Alter", "Create", "Grant", "Revoke",
                    "Merge", "Copy", "Command")
_SQL_DIALECTS = (None, "postgres", "mysql", "sqlite")


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


def parse_options(name: str, words: list[str]) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(flags, operands, option values) of a command's arguments, getopt style, per-command option table."""
    takes = _ARG_OPTIONS.get(name, frozenset())
    flags: list[str] = []
    operands: list[str] = []
    values: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            operands.extend(words[i:])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            continue
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            flags.append(key)
            if eq:
                values.setdefault(key, []).append(value)
            elif key in takes and i < len(words):
                values.setdefault(key, []).append(words[i])
                i += 1
            continue
        flags.append(word.split("=", 1)[0])
        for pos in range(1, len(word)):
            short = "-" + word[pos]
            flags.append(short)
            if short in takes:
                if pos + 1 < len(word):
                    values.setdefault(short, []).append(word[pos + 1:])
                elif i < len(words):
                    values.setdefault(short, []).append(words[i])
                    i += 1
                break
    return list(dict.fromkeys(flags)), operands, values


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


# -- paths ------------------------------------------------------------------------------------------------
def _clean_dir(path: str) -> str:
    path = posixpath.normpath(path or "/")
    return "/" + path.lstrip("/") if path.startswith("/") else path


def _resolve(raw: str, cwd: str | None) -> str | None:
    """raw as an anchored path ("/..." or "~..."), or None when it cannot be known before it runs."""
    match = _HOME.match(raw)
    if match:
        marker = match.group(1)
        raw = ("~" if marker.startswith("$") else marker) + raw[match.end():]
    else:
        cwd_match = _CWD.match(raw)
        if cwd_match:
            if cwd is None:
                return None
            raw = cwd + raw[cwd_match.end():]
    if not raw or "$" in raw or "`" in raw:
        return None
    if raw.startswith(("/", "~")):
        return raw
    return None if cwd is None else cwd.rstrip("/") + "/" + raw


def _normalize(anchored: str) -> str:
    if anchored.startswith("~"):
        head, _, rest = anchored.partition("/")
        rest = posixpath.normpath(rest) if rest else "."
        return head if rest == "." else f"{head}/{rest}"
    return _clean_dir(anchored)


def _resolve_dir(raw: str, cwd: str | None) -> str | None:
    anchored = _resolve(raw, cwd)
    return None if anchored is None else _normalize(anchored)


def describe_path(raw: str, cwd: str | None, workspace: str) -> dict:
    """Facts about one path word: {"raw", "normalized", "in_workspace", "is_root", "is_home",
    "is_workspace_parent", "dynamic", "glob"}. `~`, `$HOME`, `${HOME}` stay a home marker ("~/x");
    home is never assumed to be inside the workspace. A path with other expansions is "dynamic" (unknown)."""
    workspace = _clean_dir(workspace)
    anchored = _resolve(raw, cwd)
    info = {"raw": raw, "normalized": "", "in_workspace": False, "is_root": False, "is_home": False,
            "is_workspace_parent": False, "dynamic": anchored is None, "glob": bool(re.search(r"[*?\[]", raw))}
    if anchored is None:
        return info
    norm = _normalize(anchored)
    info["normalized"] = norm
    if norm.startswith("~"):
        info["is_home"] = "/" not in norm
        # home is unknown: if the workspace lies in a home directory, ~/x may be inside it -> unknown
        info["dynamic"] = not info["is_home"] and bool(_HOME_DIR.match(workspace))
        return info
    info["is_root"] = norm == "/"
    info["is_home"] = bool(_HOME_DIR.fullmatch(norm))
    info["in_workspace"] = norm == workspace or norm.startswith(workspace.rstrip("/") + "/")
    info["is_workspace_parent"] = norm != workspace and (norm == "/" or workspace.startswith(norm + "/"))
    return info


# -- urls and sql -----------------------------------------------------------------------------------------
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


def describe_sql(query: str, dialect: str | None = None) -> dict:
    """{"parsed": bool, "kinds": [...]}: statement kinds (SELECT, INSERT, DROP, ...) plus write kinds nested
    anywhere (a DELETE in a CTE, a DROP COLUMN in an ALTER). Unparseable or empty SQL -> parsed false."""
    if not isinstance(query, str) or len(query) > MAX_SQL_LENGTH:
        return {"parsed": False, "kinds": []}
    for read in ((dialect,) if dialect else ()) + _SQL_DIALECTS:
        try:
            statements = [s for s in sqlglot.parse(query, read=read, error_level=ErrorLevel.RAISE) if s is not None]
            kinds = _sql_kinds(statements)
        except Exception:  # noqa: BLE001 - sqlglot raises several error types (and ValueError for dialects)
            continue
        if statements and kinds is not None:
            return {"parsed": True, "kinds": kinds}
    return {"parsed": False, "kinds": []}


def _sql_kinds(statements: list) -> list[str] | None:
    kinds: list[str] = []
    for stmt in statements:
        root = _sql_kind(stmt)
        if root is None:
            return None
        kinds.append(root)
        if root == "EXPLAIN":
            inner = re.sub(r"^\s*((ANALY[SZ]E|VERBOSE|QUERY\s+PLAN(\s+FOR)?|\([^)]*\))\s+)*", "",
                           _command_rest(stmt), flags=re.I)
            nested = describe_sql(inner) if inner.strip() else {"parsed": True, "kinds": []}
            if not nested["parsed"]:
                return None
            kinds += nested["kinds"]
        for node in stmt.walk():
            if node is not stmt and type(node).__name__ in _SQL_WRITE_NODES:
                kinds.append(_sql_kind(node) or "UNKNOWN")
    return list(dict.fromkeys(kinds))


def _sql_kind(node: Any) -> str | None:
    name = type(node).__name__
    if name == "Command":
        return str(node.this).upper().split()[0] if str(node.this).strip() else None
    return _SQL_KINDS.get(name)


def _command_rest(node: exp.Expression) -> str:
    rest = node.args.get("expression")
    return rest.name if isinstance(rest, exp.Literal) else (str(rest) if rest is not None else "")
