"""SQL (and redis, mongo) command-line clients -> the statements they run, wherever they come from.

`psql -c`, `mysql -e`, `sqlite3 DB 'SQL'`, `duckdb -c`, `clickhouse-client -q`, `cqlsh -e`, `sqlcmd -Q`, ...;
here-docs, here-strings and known stdin; `-f FILE` (visible only when written earlier in the line or session,
else the SQL is invisible); client meta-commands and options that run programs or write files (`\\!`, `\\o |cmd`,
`psql -o '|cmd'`, `-L FILE`, `mysql --pager`, `.shell`, `.output`, `system`, `COPY ... PROGRAM`); psql's `\\copy`
read as the COPY it runs and its `\\lo_*` as the server's large-object functions. Pure; never raises.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from gateway.toolcalls.sqlentry import CLASSES, describe_sql, sql_side_effects


@dataclass(frozen=True)
class _Client:
    inline: tuple[str, ...] = ()     # options carrying SQL
    files: tuple[str, ...] = ()      # options naming a file of SQL
    info: tuple[str, ...] = ()       # options that run no SQL (--version, --list)
    sql_operands: bool = False       # operands after the first (the database) are SQL (sqlite3 DB 'SQL')
    meta: str = ""                   # meta-command style: "psql", "sqlite", "mysql"
    dialect: str = "sql"
    grammar: str | None = None       # the SQL dialect when the client speaks one only ("postgres" for psql)
    outputs: tuple[str, ...] = ()    # options naming a file it writes, or `|command` it runs (psql -o, -L)
    pagers: tuple[str, ...] = ()     # options naming a program it runs (mysql --pager)


_COMMON_INFO = ("--version", "-V", "--help", "-?", "-version", "-help")
CLIENTS: dict[str, _Client] = {
    "psql": _Client(("-c", "--command"), ("-f", "--file"), _COMMON_INFO + ("-l", "--list"), meta="psql",
                    grammar="postgres", outputs=("-o", "--output", "-L", "--log-file")),
    "usql": _Client(("-c", "--command"), ("-f", "--file"), _COMMON_INFO, meta="psql"),
    "mysql": _Client(("-e", "--execute"), (), _COMMON_INFO, meta="mysql", outputs=("--tee",), pagers=("--pager",)),
    "mariadb": _Client(("-e", "--execute"), (), _COMMON_INFO, meta="mysql", outputs=("--tee",),
                       pagers=("--pager",)),
    "sqlite3": _Client(("-cmd",), ("-init",), _COMMON_INFO, sql_operands=True, meta="sqlite"),
    "sqlite": _Client(("-cmd",), ("-init",), _COMMON_INFO, sql_operands=True, meta="sqlite"),
    "duckdb": _Client(("-c", "-cmd", "-s"), ("-init", "-f"), _COMMON_INFO, sql_operands=True, meta="sqlite"),
    "clickhouse-client": _Client(("-q", "--query"), ("--queries-file",), _COMMON_INFO),
    "cqlsh": _Client(("-e", "--execute"), ("-f", "--file"), _COMMON_INFO),
    "sqlcmd": _Client(("-Q", "-q"), ("-i",), ("-?",)),
    "snowsql": _Client(("-q", "--query"), ("-f", "--filename"), _COMMON_INFO),
    "trino": _Client(("--execute",), ("-f", "--file"), _COMMON_INFO),
    "presto": _Client(("--execute",), ("-f", "--file"), _COMMON_INFO),
    "spark-sql": _Client(("-e",), ("-f",), _COMMON_INFO),
    "beeline": _Client(("-e",), ("-f",), _COMMON_INFO),
    "hive": _Client(("-e",), ("-f",), _COMMON_INFO),
    "impala-shell": _Client(("-q", "--query"), ("-f", "--query_file"), _COMMON_INFO),
    "mongo": _Client(("--eval",), (), _COMMON_INFO, dialect="mongo"),
    "mongosh": _Client(("--eval",), ("-f", "--file"), _COMMON_INFO, dialect="mongo"),
    "redis-cli": _Client((), ("--eval",), _COMMON_INFO + ("--scan", "--bigkeys", "--memkeys", "--stat",
                                                          "--latency"), dialect="redis"),
}


@dataclass
class SqlUse:
    """What a SQL client runs: visible texts, and whether any SQL is invisible; programs and files."""
    dialect: str
    texts: list[str] = field(default_factory=list)
    invisible: bool = False
    spawns: list[str | None] = field(default_factory=list)
    writes: list[str | None] = field(default_factory=list)
    grammar: str | None = None

    def facts(self) -> dict:
        """The `sql` fact: {"parsed", "kinds", "unbounded", "visible"} and, for SQL, what describe_sql adds
        (`kind`: the least safe of all texts', `functions`, `settings`, `unsafe`)."""
        parsed, kinds, unbounded = True, [], []
        extra: dict[str, list] = {"functions": [], "settings": [], "unsafe": []}
        classes: list[str] = []
        for text in self.texts:
            if self.dialect == "redis":
                words = text.split()
                kinds.append(words[0].upper() if words else "")
                continue
            if self.dialect == "mongo":
                got = _mongo_kinds(text)
            else:
                got = describe_sql(text, self.grammar) if text.strip() else {"parsed": True, "kinds": [],
                                                                             "unbounded": []}
                for key, values in extra.items():
                    values += got.get(key, [])
                if "kind" in got:
                    classes.append(got["kind"])
            parsed = parsed and got["parsed"]
            kinds += got["kinds"]
            unbounded += got.get("unbounded", [])
        facts = {"parsed": parsed, "kinds": list(dict.fromkeys(k for k in kinds if k)),
                 "unbounded": list(dict.fromkeys(unbounded)), "visible": not self.invisible}
        if self.dialect == "sql":
            facts["kind"] = max(classes, key=CLASSES.index) if classes else "read"
            facts.update({key: list(dict.fromkeys(values)) for key, values in extra.items()})
        return facts


def sql_client(name: str, values: dict[str, list[str]], operands: list[str], flags: list[str],
               stdin_text: str | None, stdin_given: bool, read_file: Callable[[str], str | None]) -> SqlUse | None:
    """The SqlUse of a client command, or None when `name` is no SQL client or runs no SQL (`psql -l`).
    stdin_text: its known stdin (here-doc, here-string, a literal pipe, a file written earlier), None when
    stdin is unknown or absent; stdin_given: whether anything is fed to its stdin at all."""
    client = CLIENTS.get(name)
    if client is None or any(f in client.info for f in flags):
        return None
    use = SqlUse(client.dialect, grammar=client.grammar)
    for option in client.outputs:                   # `psql -o '|sh'`, `--log-file=/etc/x`
        for target in values.get(option, []):
            if target.startswith("|"):
                use.spawns.append(target[1:].strip() or None)
            elif target:
                use.writes.append(target)
    for option in client.pagers:
        use.spawns += [p or None for p in values.get(option, [])]
    raw: list[str] = []
    for option in client.inline:
        raw += values.get(option, [])
    for option in client.files:
        for path in values.get(option, []):
            content = read_file(path)
            if content is None:
                use.invisible = True
            else:
                raw.append(content)
    if client.sql_operands:
        raw += operands[1:]
    if client.dialect == "redis":
        if operands:
            raw.append(" ".join(operands))
    if not raw and not use.invisible:
        if stdin_text is not None:
            raw.append(stdin_text)
        elif stdin_given or client.dialect != "redis" or not operands:
            use.invisible = True
    for text in raw:
        _split_meta(client.meta, text, use)
    return use


def _split_meta(style: str, text: str, use: SqlUse) -> None:
    """Meta-commands out, SQL in: psql `\\x ...`, sqlite `.x ...`, mysql `system`/`source`/... lines."""
    if use.dialect != "sql":
        use.texts.append(text)
        return
    sql_lines: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        handled = False
        if style in ("psql", "mysql") and "\\" in stripped:
            head, _, meta = stripped.partition("\\")
            if re.match(r"[!a-zA-Z.?]", meta):
                _meta_command("\\" + meta, style, use)
                sql_lines.append(head)
                handled = True
        if not handled and style == "sqlite" and stripped.startswith("."):
            _meta_command(stripped, style, use)
            handled = True
        if not handled and style == "mysql" and re.match(r"(?i)(system|source|tee|pager|edit|nopager|notee)\b",
                                                         stripped):
            _meta_command(stripped, style, use)
            handled = True
        if not handled:
            sql_lines.append(line)
    sql = "\n".join(sql_lines)
    programs, files = sql_side_effects(sql)
    use.spawns += programs
    use.writes += files
    use.texts.append(sql)


def _meta_command(line: str, style: str, use: SqlUse) -> None:
    match = re.match(r"^\\?\.?([!.a-zA-Z_?]+)\s*(.*)$", line.rstrip(";").strip(), re.S)
    if not match:
        return
    name, arg = match.group(1).lower(), match.group(2).strip()
    if name in ("!", "shell", "system"):
        use.spawns.append(arg or None)
    elif name in ("o", "out", "w", "write", "g", "gx", "output", "once", "tee", "t", "save", "backup", "excel"):
        if arg.startswith("|"):
            use.spawns.append(arg[1:].strip() or None)
        elif arg and not arg.startswith("-"):
            use.writes.append(arg.strip("'\""))
    elif name in ("i", "ir", "include", "include_relative", "read", "source", ".", "gexec", "restore", "import",
                  "load", "open"):
        if arg.startswith("|"):
            use.spawns.append(arg[1:].strip() or None)
        else:
            use.invisible = True
    elif name in ("pager", "p") and arg:
        use.spawns.append(arg)
    elif name in ("e", "edit", "ef", "ev", "setenv"):
        use.spawns.append(None)
    elif name in ("lo_unlink", "lo_import", "lo_export"):
        # psql's client-side large-object calls: the server functions of the same names (lo_unlink deletes, the
        # others move a local file); the file lo_export writes is the client's
        use.texts.append(f"SELECT {name}()")
        if name == "lo_export":
            target = arg.split(None, 1)[1:] if arg else []
            use.writes.append(target[0].strip("'\"") if target else None)
    elif name == "copy":
        use.texts.append(_copy_statement(arg))      # the COPY it runs, its file the client's: what it reads or changes
        program = re.search(r"(?i)\bprogram\s+'([^']*)'", arg)
        target = re.search(r"(?i)\bto\s+'?([^'\s]+)", arg)
        if program:
            use.spawns.append(program.group(1))
        elif target and target.group(1).lower() not in ("stdout", "pstdout"):
            use.writes.append(target.group(1))


def _copy_statement(arg: str) -> str:
    """`\\copy SOURCE from|to TARGET ...` as the server's statement (`COPY SOURCE FROM STDIN ...`): what it
    reads or changes (`\\copy (DELETE FROM t RETURNING *) to f` deletes); a text it cannot split is returned as
    it is, and does not parse (asks)."""
    rest = arg.strip()
    if rest.startswith("("):
        depth, end = 0, len(rest)
        for i, ch in enumerate(rest):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                end = i + 1
                break
        source, tail = rest[:end], rest[end:]
    else:
        match = re.match(r"(?is)(.*?)\s+(?=(?:from|to)\b)", rest)
        source, tail = (match.group(1), rest[match.end():]) if match else (rest, "")
    match = re.match(r"(?is)\s*(from|to)\s+('[^']*'|\S+)(.*)$", tail)
    if not match:
        return "\\copy " + arg
    direction = match.group(1).upper()
    options = "" if match.group(2).lower() == "program" else match.group(3)
    return f"COPY {source} {direction} {'STDIN' if direction == 'FROM' else 'STDOUT'}{options}"


_MONGO = [(r"\.dropDatabase\s*\(|\.drop\s*\(|\.dropIndex(?:es)?\s*\(|dropAllUsers|dropUser", "DROP"),
          (r"\.delete(?:Many|One)\s*\(|\.remove\s*\(|findOneAndDelete|findAndModify\([^)]*remove", "DELETE"),
          (r"\.update(?:Many|One)?\s*\(|\.replaceOne\s*\(|findOneAndUpdate|findOneAndReplace", "UPDATE"),
          (r"\.insert(?:Many|One)?\s*\(|\.save\s*\(", "INSERT"), (r"\.renameCollection\s*\(", "ALTER"),
          (r"\.find(?:One)?\s*\(|\.count(?:Documents)?\s*\(|\.aggregate\s*\(|getCollectionNames|show\s+dbs|"
           r"printjson|\.stats\s*\(|\.distinct\s*\(|listCollections|db\.version", "SELECT"),
          (r"\beval\s*\(|\bFunction\s*\(|runCommand|adminCommand", "COMMAND")]


def _mongo_kinds(code: str) -> dict:
    kinds = [kind for pattern, kind in _MONGO if re.search(pattern, code)]
    unbounded = ["DELETE"] if re.search(r"\.(?:deleteMany|remove)\s*\(\s*(?:\{\s*\})?\s*\)", code) else []
    unbounded += ["UPDATE"] if re.search(r"\.updateMany\s*\(\s*\{\s*\}", code) else []
    return {"parsed": bool(kinds) or not code.strip(), "kinds": kinds, "unbounded": unbounded}

