"""Shell command lines -> what they really run and touch: the `input.shell` facts (`describe_line`).

Pure: text in, plain dicts out; internal failures surface only as ValueError and are reported as unparsed.
The command line is parsed (shell.py) and walked in order with what is known so far: the working directory
(`cd`, `pushd`, `env -C`, `git -C`), variables assigned earlier (`X=/`, `for d in / ~`), aliases and functions
defined earlier, files written earlier (with their content when it is visible: `echo ... > x.sh`, here-docs,
`tee`, `cp`; and the session's earlier tool calls), and symbolic links made earlier. Whatever a command runs
in turn is described too and flattened into the list right after it, marked with `origin`: wrappers
(sudo, env, timeout, xargs, busybox, ...), shells' `-c` scripts and stdin, `eval`, `source`, `trap`,
`find -exec`, aliases and functions, scripts written earlier and then run, interpreters' inline code
(python -c, perl -e, node -e, ...) and the programs it spawns, programs run through configuration,
environment or options (`git -c core.pager=...`, `PAGER=...`, `rg --pre`), SQL clients' meta-commands.
See policies/README.md for every fact.
"""
from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from gateway.toolcalls import effects as fx
from gateway.toolcalls import implicit as im
from gateway.toolcalls import secretflow as sf
from gateway.toolcalls.carriers import Carried, executor_carried, executor_context, unknown_carried
from gateway.toolcalls.codefacts import CodeFacts
from gateway.toolcalls.expand import expand_braces, expand_word, split_fields, substitute
from gateway.toolcalls.interpreters import analyze, code_source, language_of_script
from gateway.toolcalls.options import parse_options
from gateway.toolcalls.paths import clean_dir, describe_path, dynamic_path, resolve_path
from gateway.toolcalls.programs import git_stored_programs, programs_run
from gateway.toolcalls.shell import parse_shell
from gateway.toolcalls.sqlclients import CLIENTS, sql_client
from gateway.toolcalls.streams import MAX_TEXT, base64_text, echo_text, printf_text
from gateway.toolcalls.tables import Tables, default_tables
from gateway.toolcalls.urls import describe_url
from gateway.toolcalls.wrappers import (ASSIGNMENT, SHELLS, find_exec_groups, parallel_script, shell_script,
                                        shell_script_file, unwrap)

# package manager commands -> the package.json scripts they run
_PACKAGE_LIFECYCLE = {k: ["preinstall", "install", "postinstall", "prepare"] for k in ("install", "i", "ci", "add")}
_PACKAGE_LIFECYCLE.update({"t": ["pretest", "test", "posttest"], "tst": ["pretest", "test", "posttest"]})
# git subcommands that run hooks (.git/hooks/pre-commit, post-checkout, pre-push, ...)
_GIT_HOOK_RUNNERS = frozenset({"commit", "merge", "pull", "checkout", "switch", "rebase", "push", "am", "cherry-pick",
                               "revert", "gc", "worktree", "clone", "apply", "send-email", "reset", "restore"})
MAX_DEPTH = 12             # nesting of scripts run by scripts
MAX_COMMANDS = 100         # longer lists are cut here and reported unparsed
MAX_WORK = 300_000         # characters parsed in all (nested scripts, code) per tool call
SAFE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "/dev/fd/1", "/dev/fd/2"})
WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>", ">&"})
_STDIN_FILES = frozenset({"/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "-"})
_DYNAMIC_NAME = re.compile(r"[$`*?\[]|^[<>]\(")
_NO_CONTENT_TRACKING = frozenset({"chmod", "chown", "chgrp", "touch", "mkdir", "ln", "install"})
_DIR_WRITERS = frozenset({"tar", "gtar", "bsdtar", "unzip", "git", "wget"})
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
_READS_VARS = frozenset({"read", "mapfile", "readarray", "getopts"})
_RESERVED = frozenset({"then", "else", "elif", "fi", "do", "done", "esac", "in", "}", "{", "if", "while", "until",
                       "for", "case", "select", "function"})
ELSEWHERE = "/\u2400elsewhere"    # where commands run on another host or in a container start: no path of ours
_SCRIPT_EXTENSIONS = frozenset({".sh", ".bash", ".zsh", ".ksh", ".py", ".js", ".mjs", ".cjs", ".ts", ".pl", ".rb",
                                ".php", ".lua", ".r", ".jl", ".tcl", ".ps1", ".awk", ".sed"})
_WHOLE_VAR = re.compile(r"\$(?:\{\w+\}|\w+)")


@dataclass
class Effects:
    """What a tool call leaves behind for later ones: links made, files written (content or None), and which of
    those files it wrote from sensitive data (a key file, the environment: secretflow.py)."""
    links: dict[str, str | None] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    secret: set[str] = field(default_factory=set)


class Files(dict):
    """A session's written files (path -> content or None) and, in `secret`, those written from sensitive data."""

    __slots__ = ("secret",)

    def __init__(self, *args, secret: frozenset[str] = frozenset(), **kwargs):
        super().__init__(*args, **kwargs)
        self.secret = secret


@dataclass
class _Out:
    text: str | None = None          # its stdout, when known
    items: list[str] | None = None   # path words it lists (find, ls), when known
    sources: list[dict] | None = None  # the sensitive data its output carries (secretflow)


@dataclass
class _Stdin:
    given: bool = False              # something is fed to its stdin
    text: str | None = None          # what, when known
    word: str | None = None          # `< FILE`: the file word


def describe_line(command: str, workspace: str, links: dict[str, str | None] | None = None,
                  files: dict[str, str | None] | None = None, secrets: tuple[str, ...] = (),
                  tables: Tables | None = None) -> tuple[dict, Effects]:
    """({"parsed", "commands"}, Effects) for a command line; `links` and `files` come from the session's
    earlier tool calls (normalised path -> target / content or None); `secrets` are the session's secret names
    (their variables are sensitive sources); `tables` from the policy's data (the shipped ones when None)."""
    line = _Line(clean_dir(workspace), links or {}, files or {}, tables or default_tables())
    line.secrets = tuple(secrets)
    for path in sorted(getattr(files, "secret", ()))[:256]:
        line.tainted_files[path] = path           # written from sensitive data by an earlier call
    try:
        line.run_script(command if isinstance(command, str) else "", 0, "")
    except ValueError:
        line.ok = False
    if len(line.out) > MAX_COMMANDS:
        line.ok, line.out = False, line.out[:MAX_COMMANDS]
    return {"parsed": line.ok and isinstance(command, str), "commands": line.out}, line.effects


def describe_shell(command: str, workspace: str) -> dict:
    return describe_line(command, workspace)[0]


def _split_items(text: str, separator: str | None) -> list[str]:
    """xargs's items: separated by the separator (-0, -d, lines for -I/-L), else by blanks."""
    if separator is None:
        return text.split()
    return [item for item in text.rstrip("\n").split(separator) if item]


def _substitution_output(word: str) -> str | None:
    """The output of a process substitution `<(echo ...)` / `<(printf ...)` when it is literal."""
    if not (word.startswith("<(") and word.endswith(")")):
        return None
    commands = [c for c in parse_shell(word[2:-1])["commands"] if c["argv"]]
    if len(commands) != 1 or len(word) > MAX_TEXT:
        return None
    argv = commands[0]["argv"]
    if argv[0] == "echo":
        return echo_text(argv)
    if argv[0] == "printf":
        return printf_text(argv)
    return None


def _names_known(text: str, tables: Tables) -> bool:
    words = text.split()
    return bool(words) and tables.known(posixpath.basename(words[0]))


class _Line:
    """One tool call's command line being described (shared by every nesting level)."""

    def __init__(self, workspace: str, links: dict[str, str | None], files: dict[str, str | None],
                 tables: Tables):
        self.workspace = workspace
        self.tables = tables
        self.site = sf.Site(tables.sensitive_files, tables.secret_variables) if (
            tables.sensitive_files or tables.secret_variables) else sf.NO_SITE
        self.cwd: str | None = workspace
        self.links = dict(links)
        self.files = dict(files)
        self.copies: dict[str, str] = {}               # a copy of an existing file (cp /bin/rm x): x -> /bin/rm
        self.env_path: str | None = None               # PATH given to the command being described (`PATH=. cmd`)
        self.variables: dict[str, list[str]] = {}
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, str] = {}
        self.expanding: set[tuple[str, str]] = set()     # (name, definition) being expanded
        self.programs_seen: set[tuple[str, str]] = set()
        self.out: list[dict] = []
        self.ok = True
        self.work = 0
        self.effects = Effects()
        self.secrets: tuple[str, ...] = ()
        self.tainted_files: dict[str, str] = {}         # written from sensitive data in this line
        self.tainted_vars: set[str] = set()             # read from sensitive data (`read K < ~/.ssh/id_rsa`)
        self.stdin_sources: list[dict] = []             # a nested script's input carries these
        self.sockets: list[str] = []                    # `exec 3>/dev/tcp/HOST/PORT`: open for the rest of the line
        self.implicit_seen: set[tuple[str, str]] = set()  # files already run implicitly in this line
        self._by_name: dict[str, list[str]] = {}
        self._by_name_key: tuple | None = None

    # -- scripts ------------------------------------------------------------------------------------
    def run_script(self, text: str, depth: int, origin: str) -> None:
        if depth > MAX_DEPTH or self.work + len(text) > MAX_WORK:
            self.ok = False
            return
        self.work += len(text) + 1
        parsed = parse_shell(text)
        if not parsed["parsed"]:
            self.ok = False
        self.run_commands(parsed["commands"], depth, origin)

    def run_commands(self, commands: list[dict], depth: int, origin: str) -> None:
        previous: _Out | None = None
        for cmd in commands:
            if len(self.out) >= MAX_COMMANDS:
                self.ok = False
                return
            if "assign" in cmd:
                self.assign(cmd["assign"], braces=bool(cmd.get("loop")), literal=cmd.get("literal", ()))
                continue
            if "function" in cmd:
                self.functions[cmd["function"]] = cmd["body"]
                continue
            piped = (previous or _Out()) if cmd["op"] == "|" else None
            op = cmd["op"] or (";" if self.out else "")
            previous = self.command(cmd, depth, origin, op, piped)

    def assign(self, values: dict[str, list[str]], braces: bool = False, literal: Any = ()) -> None:
        """Variables from `X=v` (substituted, not brace-expanded or split; kept as written when `v` was all
        single-quoted) or `for X in words` (expanded)."""
        for name, raw in values.items():
            if name in literal:
                self.variables[name] = list(raw)[:16]
                continue
            if any("$@" in v or "$*" in v for v in raw):
                self.variables.pop(name, None)
                continue
            expanded = [c for v in raw for c in (expand_word(v, self.variables, self.cwd) if braces
                                                 else substitute(v, self.variables, self.cwd))]
            self.variables[name] = expanded[:16]

    def expand(self, key: tuple[str, str], text: str, depth: int, origin: str) -> None:
        self.expanding.add(key)
        try:
            self.run_script(text, depth + 1, origin)
        finally:
            self.expanding.discard(key)

    # -- one command --------------------------------------------------------------------------------
    def command(self, cmd: dict, depth: int, origin: str, op: str, piped: _Out | None) -> _Out | None:
        if depth > MAX_DEPTH:                 # `find -exec find -exec ...` nests commands without a script
            self.ok = False
            return None
        argv = cmd["argv"]
        while argv and argv[0] in _RESERVED:      # `x; then rm ...`: bash refuses it, tree-sitter does not
            self.ok = False
            argv = argv[1:]
            cmd = {**cmd, "argv": argv, **({"quoting": cmd["quoting"][1:]} if cmd.get("quoting") else {})}
        if argv and argv[0] in self.aliases and (argv[0], self.aliases[argv[0]]) not in self.expanding:
            self.expand((argv[0], self.aliases[argv[0]]), self.aliases[argv[0]] + " " + shlex.join(argv[1:]), depth,
                        f"alias {argv[0]}")
            return None
        if argv and argv[0] in self.functions:
            if (argv[0], self.functions[argv[0]]) in self.expanding:
                self.ok = False                   # a function calling itself: not followed further
            else:
                self.call_function(argv, depth)
                return None
        quoting = cmd.get("quoting") or ["none"] * len(argv)
        single = bool(quoting) and quoting[0] == "single"
        names = substitute(argv[0], self.variables, self.cwd) if argv and not cmd.get("fixed") and not single \
            else argv[:1]
        if len(names) > 1:                    # a loop variable: each value is a command of its own
            for alternative in names[:8]:
                self.command({**cmd, "argv": [alternative] + argv[1:], "fixed": True}, depth, origin, op, piped)
            return None
        if names and names[0] != argv[0] and _WHOLE_VAR.fullmatch(argv[0]) and quoting[0] == "none" \
                and len(split_fields(names[0], self.variables)) > 1:
            names = split_fields(names[0], self.variables)     # unquoted `$X` splits into words (on IFS)
        elif names and quoting[0] == "none":
            names = expand_braces(names[0])
        words = names + [w for word, how in zip(argv[1:], quoting[1:])
                         for w in expand_word(word, self.variables, self.cwd, how)]
        self.env_path = (cmd.get("env") or {}).get("PATH")
        unwrapped = unwrap(words, self.program_behind, self.tables.wrappers)   # a renamed program: what it is
        self.env_path = None
        rec: dict[str, Any] = {"argv": argv, "op": op, "effective": unwrapped.argv, "redirects": cmd["redirects"]}
        if cmd.get("env"):
            rec["env"] = cmd["env"]
        if origin:
            rec["origin"] = origin
        self.out.append(rec)
        return _Command(self, rec, cmd, unwrapped, depth, piped).describe()

    def call_function(self, argv: list[str], depth: int) -> None:
        words = [w for word in argv[1:] for w in expand_word(word, self.variables, self.cwd)]
        key = (argv[0], self.functions[argv[0]])
        self.with_positional(words, None, lambda: self.expand(key, key[1], depth, f"function {argv[0]}"))

    def with_positional(self, words: list[str], zero: list[str] | None, run: Any) -> None:
        """run() with $1..$9, $@, $*, $# (and $0 when given) set to words."""
        keys = [str(i) for i in range(10)] + ["@", "*", "#"]
        saved = {k: self.variables.get(k) for k in keys}
        for i in range(9):
            self.variables[str(i + 1)] = [words[i]] if i < len(words) else [""]
        self.variables.update({"@": words or [""], "*": [" ".join(words)], "#": [str(len(words))]})
        if zero:
            self.variables["0"] = zero
        try:
            run()
        finally:
            for key, value in saved.items():
                if value is None:
                    self.variables.pop(key, None)
                else:
                    self.variables[key] = value

    # -- paths and files -----------------------------------------------------------------------------
    def path(self, raw: str, here: str | None) -> dict:
        return describe_path(raw, here, self.workspace, self.links)

    def resolve(self, raw: str, here: str | None) -> str | None:
        return resolve_path(raw, here, self.links)

    def content(self, raw: str, here: str | None) -> tuple[bool, str | None]:
        """(written earlier?, its content when known) for a file word."""
        norm = self.resolve(raw, here)
        if norm is None:
            return False, None
        if norm in self.files:
            return True, self.files[norm]
        for written in self.files:
            if written.endswith("/") and norm.startswith(written):
                return True, None             # inside a directory filled from elsewhere (clone, unpack)
        return False, None

    def authored(self, want: Any, bases: list[str], python_path: list[str]) -> list[tuple[str, str | None]]:
        """(path, content or None) of the files the session wrote itself (not a directory filled from elsewhere:
        a clone, an unpacked archive) that a want (implicit.Want) finds from `bases`."""
        out: list[tuple[str, str | None]] = []
        files = self.files
        if want.where == "home":
            norm = self.resolve(want.pattern, self.cwd)
            return [(norm, files[norm])] if norm in files else []
        dirs = list(bases)
        if want.where == "site":
            dirs += python_path + [self.workspace]
        if want.where == "up":               # the directory and its parents
            for base in bases:
                parent = base
                for _ in range(64):
                    dirs.append(parent)
                    if parent in ("/", "", "~"):
                        break
                    parent = posixpath.dirname(parent)
        glob = any(c in want.pattern for c in "*?[")
        candidates: list[str] = []
        if want.where == "below" or glob:
            by_name = self.files_by_name()
            name = posixpath.basename(want.pattern)
            names = fnmatch.filter(by_name, name) if glob else [name] if name in by_name else []
            candidates = [p for n in names for p in by_name[n]]
            if not candidates:
                return []
        for directory in dict.fromkeys(dirs):
            if want.where == "below" or glob:
                prefix = directory.rstrip("/") + "/"
                for path in candidates:
                    if not path.startswith(prefix):
                        continue
                    rel = path[len(prefix):]
                    if want.where == "below" or fnmatch.fnmatchcase(rel, want.pattern):
                        out.append((path, files[path]))
            else:
                path = posixpath.normpath(posixpath.join(directory, want.pattern))
                if path in files:
                    out.append((path, files[path]))
            if len(out) > 16:
                break
        return list(dict.fromkeys(out))[:16]

    def files_by_name(self) -> dict[str, list[str]]:
        """The files written (not directories filled from elsewhere) by base name, rebuilt when files change."""
        key = (len(self.files), next(reversed(self.files), None))
        if self._by_name_key != key:
            index: dict[str, list[str]] = {}
            for path in self.files:
                if not path.endswith("/"):
                    index.setdefault(posixpath.basename(path), []).append(path)
            self._by_name, self._by_name_key = index, key
        return self._by_name

    def wrote(self, raw: str, here: str | None, content: str | None, append: bool = False) -> None:
        norm = self.resolve(raw, here)
        if norm is None or raw in SAFE_TARGETS:
            return
        if append:
            old = self.files.get(norm)
            content = (old or "") + content if content is not None and (old is not None or norm not in
                                                                        self.files) else None
        content = content[:MAX_TEXT] if content is not None else None
        self.files[norm] = content
        self.effects.files[norm] = content
        self.copies.pop(norm, None)

    def untrack(self, raw: str, here: str | None) -> None:
        norm = self.resolve(raw, here)
        if norm is not None:
            self.files.pop(norm, None)
            self.effects.files.pop(norm, None)
            self.copies.pop(norm, None)

    def path_dirs(self) -> list[str]:
        """The known directories of a PATH set in this line (`PATH=.:$PATH cmd`, `export PATH=...`)."""
        texts = ([self.env_path] if self.env_path is not None else []) + self.variables.get("PATH", [])
        if self.cwd is not None:
            texts = [re.sub(r"\$\{?PWD\}?(?![A-Za-z0-9_])", self.cwd, t) for t in texts]      # $PWD/bin
        texts = [c for t in texts[:4] for c in substitute(t, self.variables, self.cwd)[:4]]
        return [d or "." for t in texts for d in t.split(":") if "$" not in d][:16]

    def copied(self, source: str, dest: str, here: str | None) -> None:
        """dest is now a copy of an existing file: running it runs that program."""
        src, norm = self.resolve(source, here), self.resolve(dest, here)
        if src is not None and norm is not None and not norm.endswith("/"):
            self.copies[norm] = self.copies.get(src, src)

    def program_behind(self, word: str) -> str | None:
        """The program a path runs when it is a link to, or a copy of, a program with another name
        (`ln -s /bin/rm zap; ./zap`, `cp /bin/rm zap; ./zap`, or `zap` found through a PATH set in the line),
        else None."""
        if "/" not in word:
            for directory in self.path_dirs():
                candidate = posixpath.join(directory, word)
                plain = resolve_path(candidate, self.cwd)
                if plain is not None and (plain in self.copies or self.resolve(candidate, self.cwd) != plain):
                    return self.program_behind(candidate)
            return None
        real = self.resolve(word, self.cwd)
        real = self.copies.get(real, real) if real is not None else None
        if real is None or posixpath.basename(real) == posixpath.basename(word) or not posixpath.basename(real):
            return None
        return real

    def link(self, target: str, link: str, here: str | None) -> None:
        norm = self.resolve(link, here)
        if norm is None:
            return
        if target.startswith(("/", "~", "$")) or here is None:
            target_norm = self.resolve(target, here)
        else:                                  # a relative target is relative to the link's directory
            target_norm = self.resolve(target, posixpath.dirname(norm) or "/")
        self.links[norm] = target_norm
        self.effects.links[norm] = target_norm


class _Command:
    """The facts of one simple command (a record already in the line's output)."""

    def __init__(self, line: _Line, rec: dict, cmd: dict, unwrapped: Any, depth: int, piped: _Out | None):
        self.line, self.rec, self.cmd, self.u, self.depth, self.piped = line, rec, cmd, unwrapped, depth, piped
        self.eff: list[str] = list(unwrapped.argv)
        self.name = posixpath.basename(self.eff[0]) if self.eff else ""
        self.here = line.cwd
        self.writes: list[dict] = []
        self.deletes: list[dict] = []
        self.moves: list[dict] = []
        self.source_files: list[str] = []
        self.env = {**cmd.get("env", {}), **unwrapped.env}
        self.code_texts: list[str] = []
        self.stdin_sources: list[dict] = []

    def nested(self, text: str | None, origin: str) -> None:
        if text is None:
            self.rec["dynamic"] = True
        else:
            saved = self.line.stdin_sources
            self.line.stdin_sources = self.stdin_sources or saved
            try:
                self.line.run_script(text, self.depth + 1, origin)
            finally:
                self.line.stdin_sources = saved

    def describe(self) -> _Out | None:
        line, rec, u = self.line, self.rec, self.u
        if u.chdir is not None:
            self.here = line.resolve(u.chdir, line.cwd)
        self.stdin = self.read_stdin()
        if u.stdin_operands:
            self.xargs_operands()
        flags, operands, values = parse_options(self.name, self.eff[1:]) if self.eff else ([], [], {})
        self.flags, self.operands, self.values = flags, operands, values
        if self.name in ("git", "make") and values.get("-C"):
            self.here = line.resolve(values["-C"][-1], self.here)
        if not self.eff and u.wrappers and (u.script is not None or u.interactive):
            self.name = u.wrappers[-1].split()[0]
        rec.update(name=self.name, operands=operands, flags=flags, options=values, cwd=line.path(".", self.here),
                   dynamic=rec.get("dynamic", False) or bool(self.eff and _DYNAMIC_NAME.search(self.eff[0])))
        if u.wrappers:
            rec["wrappers"] = u.wrappers
        if u.interactive:
            rec["stdin_script"] = rec["dynamic"] = True
        if u.remote:
            rec["remote"] = {"host": u.remote}
        out = self.output()
        self.semantics()
        self.file_effects()
        rec["paths"] = [line.path(w, self.here) for w in self.path_words()]
        rec["writes"] = self.writes
        rec["deletes"] = self.deletes
        rec["moves"] = self.moves
        sources = self.secret_flow()
        if u.script is not None:
            self.nested(u.script, self.u.wrappers[-1] if u.wrappers else "wrapper")
        self.after_effects()
        if sources and out is not None:
            out.sources = sources
        return out

    def secret_flow(self) -> list[dict]:
        """The `sources` and `sinks` facts (secretflow.py); what it reads of sensitive data, for its output."""
        line, rec = self.line, self.rec
        words = self.eff[1:] if self.eff else []
        tables = line.tables
        sources = sf.command_sources(self.name, words, self.values, rec["paths"], line.secrets, line.tainted_vars,
                                     line.tainted_files, line.site)
        if line.tainted_files:
            for word in words[:64]:
                norm = line.resolve(sf.payload(word), self.here) if "$" not in word else None
                if norm is not None and norm in line.tainted_files:
                    sources.append({"kind": "file", "name": word, "via": "written from a secret"})
        if sf.environment_dump(self.name, self.operands, self.flags, self.u.wrappers, self.eff):
            sources.append({"kind": "environment", "name": self.name or "env", "via": "output"})
        sources += self.stdin_sources
        for text in self.code_texts:
            sources += sf.code_sources(text, line.secrets)
        sinks = sf.command_sinks(self.name, words, self.operands, self.values, self.cmd["redirects"],
                                 (rec.get("http") or {}).get("urls", []), (rec.get("remote") or {}).get("host"),
                                 "\n".join(self.code_texts) if self.code_texts else None,
                                 tables.stream_programs, tables.dns_programs, tables.cli_programs)
        if not self.eff and self.u.wrappers and self.u.wrappers[-1].split()[0] == "exec":
            line.sockets += [r["target"] for r in self.cmd["redirects"] if re.match(r"/dev/(?:tcp|udp)/", r["target"])]
        elif line.sockets:
            sinks += [{"kind": "dev_tcp", "host": t.split("/")[3] if t.count("/") >= 3 else "", "port": 0}
                      for t in line.sockets[:4]]
        sources = sf.dedupe(sources)
        if sources:
            rec["sources"] = sources
            if self.name in _READS_VARS:
                line.tainted_vars.update(o for o in self.operands if re.fullmatch(r"[A-Za-z_]\w*", o))
        if sinks:
            rec["sinks"] = sinks
        return sources

    # -- stdin and stdout ---------------------------------------------------------------------------
    def read_stdin(self) -> _Stdin:
        stdin = _Stdin()
        line = self.line
        for redirect in self.cmd["redirects"]:
            if "body" in redirect:
                stdin = _Stdin(True, redirect["body"])
                self.stdin_sources = [{**s, "via": "stdin"} for s in sf.word_sources(
                    redirect["body"], line.secrets, line.tainted_vars, line.site)]
            elif redirect["op"] == "<":
                norm = line.resolve(redirect["target"], self.here)
                if sf.sensitive_path(redirect["target"], line.site.files) or (norm is not None and (
                        sf.sensitive_path(norm, line.site.files) or norm in line.tainted_files)):
                    self.stdin_sources = [{"kind": "file", "name": redirect["target"], "via": "stdin"}]
                produced = _substitution_output(redirect["target"])
                content = produced if produced is not None else self.line.content(redirect["target"], self.here)[1]
                stdin = _Stdin(True, content, redirect["target"])
        if self.piped is not None and not stdin.given:
            stdin = _Stdin(True, self.piped.text)
            self.stdin_sources = [{**s, "via": "stdin"} for s in self.piped.sources or []]
        if not stdin.given and line.stdin_sources:
            self.stdin_sources = line.stdin_sources
        return stdin

    def xargs_operands(self) -> None:
        items = self.piped.items if self.piped is not None else None
        text = self.piped.text if self.piped is not None and self.piped.text is not None else self.stdin.text
        if text is not None and (items is None or self.u.separator is not None):
            items = _split_items(text, self.u.separator)
        if items is None or not self.eff:
            self.rec["stdin_operands"] = True
            if self.code_from_operands():
                self.rec["dynamic"] = True     # its code is among the operands it reads
            return
        items = items[:32]
        if self.u.replace and any(self.u.replace in w for w in self.eff[1:]):
            self.eff = self.eff[:1] + [w.replace(self.u.replace, item) for item in items for w in self.eff[1:]]
        else:
            self.eff = self.eff + items
        self.rec["effective"] = self.eff

    def code_from_operands(self) -> bool:
        """Whether the code this command runs would come from operands read at run time (xargs)."""
        name = posixpath.basename(self.eff[0]) if self.eff else ""
        if name == "eval" or (self.u.replace and any(self.u.replace in w for w in self.eff)):
            return name == "eval" or name in SHELLS or code_source(name, self.eff) is not None
        if name in SHELLS:
            return not shell_script(self.eff)          # no -c script: the script (or its file) is an operand
        source = code_source(name, self.eff)
        return source is not None and source.inline is None

    def output(self) -> _Out | None:
        name, stdin = self.name, self.stdin
        text: str | None = None
        items: list[str] | None = None
        if name == "echo":
            text = echo_text(self.eff)
        elif name == "printf":
            text = printf_text(self.eff)
        elif name in ("cat", "tee") and not (name == "cat" and [o for o in self.operands if o != "-"]):
            text = stdin.text
        elif name == "cat":
            parts = [self.line.content(o, self.here)[1] for o in self.operands]
            text = None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
        elif name == "base64" and any(f in self.flags for f in ("-d", "--decode", "-D")) and stdin.text:
            text = base64_text(stdin.text)
        elif name == "find":
            items = self.find_starts()
        elif name == "ls":
            items = self.operands or ["*"]
        if any(r["op"] in WRITE_OPS and r["target"] not in ("/dev/stderr", "/dev/tty") for r in self.cmd["redirects"]):
            self.redirected_text = text
            return _Out("")
        self.redirected_text = text
        if items is None and text is not None:
            items = text.split()
        return _Out(text, items)

    # -- what it runs -------------------------------------------------------------------------------
    def semantics(self) -> None:
        name, eff, rec, line = self.name, self.eff, self.rec, self.line
        if name in SHELLS:
            self.shell()
        elif name in ("at", "batch"):
            file = self.values.get("-f")
            self.runs(file[-1], "shell") if file else self.stdin_code("shell")
        elif name == "eval" and len(eff) > 1:
            self.eval_text()
        elif name in ("source", ".") and self.operands:
            word = self.operands[0]
            self.stdin_code("shell") if word in _STDIN_FILES else self.runs(word, "shell")
        elif name == "trap" and self.operands and not ({"-p", "-l"} & set(self.flags)) \
                and self.operands[0] not in ("-", ""):
            self.nested(self.operands[0], "trap")
        elif name == "alias":
            for word in self.cmd["argv"][1:]:       # as written: quoted braces expand only when it is used
                key, eq, value = word.partition("=")
                if eq and not key.startswith("-"):
                    line.aliases[key] = value
        elif name == "hash" and "-p" in eff[1:-2]:  # `hash -p /bin/rm ls`: ls now runs /bin/rm
            line.aliases[eff[-1]] = shlex.quote(eff[eff.index("-p") + 1])
        elif name in _DECLARE:
            for word in eff[1:]:
                if ASSIGNMENT.match(word):
                    key, value = word.split("=", 1)
                    line.assign({key: [value]})
        elif name in _READS_VARS or (name == "printf" and "-v" in eff):
            for word in self.operands:
                line.variables.pop(word, None)
        elif name in ("cd", "pushd", "popd"):
            self.change_directory()
        elif name == "find":
            rec["exec_names"] = []
            starts = self.find_starts()
            if find_exec_groups(eff):
                rec.setdefault("executes", []).append({"via": "find -exec", "known": True})
            for group in find_exec_groups(eff):
                group = [w for g in group for w in ([*starts] if g == "{}" else [g.replace("{}", starts[0])])]
                inner = unwrap(group, table=line.tables.wrappers).argv
                rec["exec_names"].append(posixpath.basename(inner[0]) if inner else "")
                line.command({"argv": group, "op": ";", "redirects": []}, self.depth + 1, "find -exec", ";", None)
        elif name == "parallel":
            text, from_stdin, remote = parallel_script(eff)
            items = (self.piped.items if self.piped is not None else None) if from_stdin else None
            if from_stdin and items is None:
                rec["stdin_operands"] = True
            line.variables["PARALLEL_ITEM"] = [shlex.quote(i) for i in items[:32]] if items else ["$PARALLEL_ITEM"]
            if remote:
                rec["remote"] = {"host": remote}
            self.nested(text, "parallel")
        if name in ("make", "gmake"):
            self.runs((self.values.get("-f") or self.values.get("--file") or ["Makefile"])[-1], "make")
        if name == "git" and self.operands and self.operands[0] in _GIT_HOOK_RUNNERS:
            self.git_hooks()
        if name in ("npm", "pnpm", "yarn", "bun") and self.operands:
            self.package_scripts()
        if "/" in (eff[0] if eff else "") and name not in SHELLS:
            self.runs(eff[0], None)
        elif eff and "PATH" in line.variables and "/" not in eff[0]:
            self.path_lookup()
        source = code_source(name, eff) if eff else None
        if source is not None:
            self.interpreter(source)
        self.programs()
        self.sql()
        self.network()
        self.implicit()
        self.carried()

    # -- commands carried in the arguments of unknown programs and of remote or container runners ----------
    def carried(self) -> None:
        eff, tables, rec = self.eff, self.line.tables, self.rec
        if not eff or rec.get("dynamic") and _DYNAMIC_NAME.search(eff[0]):
            return
        words = [w for w in eff[1:tables.depth] if not w.startswith("-")]
        hit = tables.executor(self.name, words)
        if hit is not None:
            spec, used = hit
            target, carried = executor_carried(spec, eff, used)
            if spec.here:                       # it runs the command here after all (`nix shell PKG -c CMD`)
                if carried:
                    self.run_carried(carried, spec.name, {}, elsewhere=False)
                return
            if spec.join and not carried and self.stdin.given:      # `ssh HOST < cmds.sh`: its shell reads stdin
                if self.stdin.text is not None:
                    carried = [Carried("script", script=self.stdin.text)]
                else:
                    rec["stdin_script"] = rec["dynamic"] = True
            mark = {"remote": {"host": target or "?", "via": spec.name}} if spec.remote else \
                {"container": {"name": target or "?", "via": spec.name}}
            if spec.remote:                     # it runs on another host: like ssh, the runner itself asks
                rec.setdefault("remote", mark["remote"])
            origin = f"{spec.name} {target}".strip()
            mounts, workdir = executor_context(spec, eff, used) if not spec.remote else ([], None)
            self.run_carried(carried, origin, mark, elsewhere=True, mounts=mounts, workdir=workdir)
            return
        if tables.known(self.name) or "code" in rec or rec.get("name") in SHELLS:
            return
        carried = unknown_carried(eff, tables, self.written_script)
        if carried:
            self.run_carried(carried, self.name, {"via_unknown": self.name}, elsewhere=False)

    def written_script(self, word: str) -> bool:
        """Whether `word` names a script the session wrote (`echo ... > x.sh; hyperfine ./x.sh`): a script's
        extension, or content seen to start with `#!`."""
        if not word or word.startswith("-") or _DYNAMIC_NAME.search(word):
            return False
        written, content = self.line.content(word, self.here)
        if not written:
            return False
        return (content or "").startswith("#!") or posixpath.splitext(word)[1].lower() in _SCRIPT_EXTENSIONS

    def run_carried(self, carried: list[Carried], origin: str, mark: dict, elsewhere: bool,
                    mounts: list[tuple[str, str]] = (), workdir: str | None = None) -> None:  # type: ignore[assignment]
        """Describe the carried commands as if they ran (on another machine: working directory unknown, and
        nothing they write is a file of this session; in a container, the host directories it mounts are links
        to where they are here), each marked with `mark`."""
        line = self.line
        start = len(line.out)
        saved = (line.cwd, dict(line.files), dict(line.links), dict(line.copies), dict(line.effects.files),
                 dict(line.effects.links), line.workspace) if elsewhere else None
        if elsewhere:                          # no workspace, no links, no files of this session over there
            links: dict[str, str | None] = {}
            for source, inside in mounts:
                dest = resolve_path(inside, "/")
                if dest is not None and dest != "/":
                    links[dest] = line.resolve(source, self.here)     # None when only known at run time
            line.cwd, line.workspace, line.links, line.files = ELSEWHERE, ELSEWHERE, links, {}
            if workdir is not None:
                line.cwd = resolve_path(workdir, ELSEWHERE)
        try:
            for item in carried:
                if item.kind == "argv":
                    argv = list(item.argv)
                    if "/" not in argv[0] and self.written_script(argv[0]) and not line.tables.known(argv[0]):
                        argv[0] = "./" + argv[0]               # a script the session wrote, run from here
                    piped = _Out(self.stdin.text) if self.stdin.given else None     # what it reads comes along
                    line.command({"argv": argv, "op": ";", "redirects": [],
                                  "quoting": ["single"] * len(argv)}, self.depth + 1, origin, ";", piped)
                elif parse_shell(item.script)["parsed"]:
                    self.nested(item.script, origin)
                elif _names_known(item.script, line.tables):
                    line.ok = False            # a command line that does not parse, naming a known program
        finally:
            if saved is not None:
                line.cwd = saved[0]
                line.files, line.links, line.copies = saved[1], saved[2], saved[3]
                line.effects.files, line.effects.links, line.workspace = saved[4], saved[5], saved[6]
        for rec in line.out[start:]:
            for key, value in mark.items():
                rec.setdefault(key, value)

    def eval_text(self) -> None:
        """eval's words joined: variables substituted but not split (quoted "$X" is the common form)."""
        raw = posixpath.basename(self.cmd["argv"][0]) == "eval"
        words = self.cmd["argv"][1:] if raw else self.eff[1:]
        quoting = (self.cmd.get("quoting") or ["none"] * len(self.cmd["argv"]))[1:] if raw else ["none"] * len(words)
        options = [[w] if how == "single" else substitute(w, self.line.variables, self.line.cwd)[:4]
                   for w, how in zip(words, quoting)]
        texts = [""]
        for choices in options:
            texts = [f"{t} {c}".strip() for t in texts for c in choices][:8]
        for text in texts:
            self.nested(text, "eval")

    def shell(self) -> None:
        script = shell_script(self.eff)
        if script:
            rest = self.eff[self.eff.index(script) + 1:] if script in self.eff else []
            self.line.with_positional(rest[1:], rest[:1], lambda: self.nested(script, f"{self.name} -c"))
        elif script == "":
            file = shell_script_file(self.eff)
            if file is not None:
                self.runs(file, "shell")
        else:
            self.stdin_code("shell")

    def stdin_code(self, language: str) -> None:
        stdin = self.stdin
        if stdin.text is not None:
            if language == "shell":
                self.nested(stdin.text, f"{self.name} stdin")
            else:
                self.code(language, stdin.text)
        elif stdin.word is not None and stdin.word not in _STDIN_FILES and not stdin.word.startswith(("/dev/",
                                                                                                      "/proc/")):
            self.runs(stdin.word, language)
        else:
            self.rec["stdin_script"] = self.rec["dynamic"] = True

    def package_scripts(self) -> None:
        """`npm test`, `npm run x`, `npm install`...: the package.json scripts they run, when the session wrote
        that package.json (content seen: its scripts are nested; not seen: a written file run, ask)."""
        written, content = self.line.content("package.json", self.here)
        if not written:
            return
        if content is None:
            self.runs("package.json", None)
            return
        try:
            scripts = json.loads(content).get("scripts") or {}
        except (ValueError, AttributeError):
            self.rec["dynamic"] = True
            return
        first = self.operands[0]
        target = self.operands[1] if first in ("run", "run-script", "exec") and len(self.operands) > 1 else first
        names = _PACKAGE_LIFECYCLE.get(target, [f"pre{target}", target, f"post{target}"])
        for key in names:
            if isinstance(scripts, dict) and isinstance(scripts.get(key), str):
                self.nested(scripts[key], f"{self.name} script {key}")

    def git_hooks(self) -> None:
        """Hooks written earlier in the line or the session (`.git/hooks/pre-commit`) run with this git command."""
        top = self.line.resolve(".git/hooks", self.here)
        if top is None:
            return
        for path in sorted(p for p in self.line.files if p.startswith(top + "/"))[:8]:
            self.runs(path, None)

    def runs(self, word: str, language: str | None) -> None:
        produced = _substitution_output(word)
        if produced is not None:                 # `bash <(echo ...)`: the script is that output
            self.rec["runs"] = {"path": dynamic_path(word), "written": False, "known": True}
            if (language or "shell") == "shell":
                self.nested(produced, f"{self.name} <(...)")
            else:
                self.code(language or "shell", produced)
            return
        if word in _STDIN_FILES:                # `bash /dev/stdin <<< ...`: the script is its stdin
            self.stdin_code(language or "shell")
            return
        info = self.line.path(word, self.here)
        entry = {"path": info, "written": False, "known": False}
        self.rec["runs"] = entry
        if info["dynamic"]:
            self.rec["dynamic"] = True
            return
        written, content = self.line.content(word, self.here)
        entry["written"] = written
        if content is None:
            return
        entry["known"] = True
        lang = language_of_script(info["normalized"], content, language or "shell")
        if language == "make":                  # its recipes are shell lines
            recipes = "\n".join(line[1:].lstrip("@-+") for line in content.split("\n") if line.startswith("\t"))
            self.nested(recipes, f"make recipes in {word}")
        elif lang == "shell":
            self.nested(content, f"script {word}")
        else:
            self.code(lang, content)

    # -- files run implicitly (implicit.py) -------------------------------------------------------------
    def implicit(self) -> None:
        """Files the session wrote that this command runs without naming them (conftest.py for pytest, setup.py
        for pip install ., build.rs for cargo, .envrc for direnv, .git/config for git, ...): each is listed in
        `implicit_runs` and, when its content was seen, decided as the script it is."""
        if not self.eff or not self.line.files:
            return
        wants = im.wanted(self.name, self.eff, self.operands, self.values, self.flags)
        python = im.is_python(self.name) or any(w.language == "python" for w in wants)
        if not wants and not python:
            return
        bases = self.project_dirs()
        found: list[tuple[str, str | None, im.Want]] = []
        for want in wants:
            for norm, content in self.line.authored(want, bases, self.python_path()):
                found.append((norm, content, want))
        if python:
            found += self.imported_modules(bases)
        seen = self.line.implicit_seen
        for norm, content, want in found[:32]:
            if (norm, want.language) in seen or len(seen) > 64:
                continue
            seen.add((norm, want.language))
            self.rec.setdefault("implicit_runs", []).append(
                {"path": self.line.path(norm, self.here), "via": want.via, "known": content is not None})
            if content is not None:
                self.run_implicit(want, norm, content, bases)

    def project_dirs(self) -> list[str]:
        """Where the tool looks for its files: the working directory, local directories it is given (`pip
        install ./x`, `pytest tests/`, `cargo --manifest-path x/Cargo.toml`, `gradle -p x`, ...)."""
        here = self.here
        bases = [here] if here is not None else []
        words: list[str] = []
        module = im.python_module(self.eff)
        if self.name in ("pip", "pip3") or (self.name == "uv" and self.operands[:1] == ["pip"]) or (
                module is not None and module[0] == "pip"):
            bases = []                          # pip builds only the local projects it is given (`.`, `-e ./x`)
            rest = module[1][1:] if module is not None and self.name not in ("pip", "pip3", "uv") else self.operands
            words += [o for o in rest if o.startswith((".", "/", "~"))]
            words += self.values.get("-e", []) + self.values.get("--editable", [])
            words += [rest[i + 1] for i, w in enumerate(rest[:-1]) if w in ("-e", "--editable")]
        elif self.name in ("pytest", "py.test"):
            words += [o.split("::")[0] for o in self.operands]
        for option in ("--manifest-path", "-p", "--project-dir", "-d", "--dir", "--rootdir", "--working-directory"):
            words += self.values.get(option, [])
        for word in words[:8]:
            norm = self.line.resolve(word, here)
            if norm is None:
                continue
            if norm.endswith((".py", ".toml", ".json", ".yml", ".yaml")) or norm in self.line.files:
                norm = posixpath.dirname(norm) or "/"
            if norm not in bases:
                bases.append(norm)
        return bases

    def python_path(self) -> list[str]:
        value = self.env.get("PYTHONPATH") or (self.line.variables.get("PYTHONPATH") or [""])[0]
        dirs = [d for d in value.split(":") if d and "$" not in d][:8]
        return [n for n in (self.line.resolve(d, self.here) for d in dirs) if n is not None]

    def imported_modules(self, bases: list[str]) -> list[tuple[str, str | None, im.Want]]:
        """Modules the session wrote that this command's Python code imports, in turn (bounded)."""
        out: list[tuple[str, str | None, im.Want]] = []
        texts = list(self.code_texts)
        dirs = bases + self.python_path()
        if self.rec.get("runs") and not self.rec["runs"]["path"].get("dynamic"):
            dirs.insert(0, posixpath.dirname(self.rec["runs"]["path"]["normalized"]) or "/")
        seen: set[str] = set()
        while texts and len(out) < 16:
            text = texts.pop(0)
            for module in im.python_imports(text):
                stem = module.replace(".", "/")
                for directory in dirs:
                    for candidate in (f"{directory}/{stem}.py", f"{directory}/{stem}/__init__.py",
                                      f"{directory}/{stem.split('/')[0]}/__init__.py"):
                        candidate = posixpath.normpath(candidate)
                        if candidate in seen or candidate not in self.line.files:
                            continue
                        seen.add(candidate)
                        content = self.line.files[candidate]
                        out.append((candidate, content, im.Want(stem + ".py", "python", f"python import {module}")))
                        if content is not None:
                            texts.append(content)
        return out

    def run_implicit(self, want: im.Want, norm: str, content: str, bases: list[str]) -> None:
        origin, language = f"{want.via} {norm}", want.language
        if language in ("python", "nox", "pth"):
            self.code("python", im.pth_lines(content) if language == "pth" else content)
            if language == "nox":
                self.nested(im.nox_runs(content), origin)
        elif language == "pyproject":
            directory = posixpath.dirname(norm) or "/"
            for module in im.pyproject_backend(content):
                path = posixpath.normpath(posixpath.join(directory, module))
                if module == "<unreadable>":
                    self.rec["dynamic"] = True
                elif path in self.line.files:
                    self.rec.setdefault("implicit_runs", []).append(
                        {"path": self.line.path(path, self.here), "via": "build backend",
                         "known": self.line.files[path] is not None})
                    if self.line.files[path] is not None:
                        self.code("python", self.line.files[path] or "")
        elif language == "shell":
            self.nested(content, origin)
        elif language == "make":
            self.nested(im.make_recipes(content), origin)
        elif language == "just":
            self.nested(im.just_recipes(content), origin)
        elif language in ("task", "pre-commit"):
            self.nested(im.taskfile_commands(content) if language == "task" else im.pre_commit_entries(content),
                        origin)
        elif language == "tox":
            self.nested(im.tox_commands(content), origin)
        elif language == "rake":
            shell, ruby = im.rake_shell(content)
            self.code("ruby", ruby)
            self.nested(shell, origin)
        elif language == "go-generate":
            self.nested(im.go_generate_lines(content), origin)
        elif language == "cargo-config":
            self.nested(im.cargo_runners(content), origin)
        elif language in ("js", "php", "ruby"):
            self.code(language, content)
        elif language == "composer":
            self.nested(im.composer_scripts(content), origin)
        elif language in ("cmake", "terraform", "msbuild"):
            self.nested(im.config_commands(language, content), origin)
        elif language == "vagrant":
            self.code("ruby", content)
            self.nested(im.config_commands(language, content), origin)
        elif language == "git-config":
            sub = self.operands[0] if self.operands else ""
            for via, text in git_stored_programs(im.git_config_pairs(content), sub):
                self.nested(text, via)
        else:                                   # rust, go, gradle, maven: scanned
            self.apply_code(im.native_facts(language, content))

    def path_lookup(self) -> None:
        for value in self.line.variables["PATH"]:
            for directory in value.split(":"):
                if directory and "$" not in directory and self.line.content(f"{directory}/{self.eff[0]}",
                                                                           self.here)[0]:
                    self.runs(f"{directory}/{self.eff[0]}", None)
                    return

    def interpreter(self, source: Any) -> None:
        self.source_files = [source.script] if source.script and not source.remote else []
        self.source_files += list(source.files)
        self.rec["code"] = {"language": source.language, "parsed": True, "opaque": False}
        if source.remote:
            self.rec["runs"] = {"path": dynamic_path(source.script or ""), "written": False, "known": False}
            self.rec["dynamic"] = True
        elif source.inline is not None:
            self.code(source.language, source.inline)
        elif source.script is not None:
            self.runs(source.script, source.language)
        elif source.stdin:
            self.stdin_code(source.language)
        if source.in_place or source.language == "vim":
            self.writes += [self.line.path(f, self.here) for f in source.files]

    def code(self, language: str, text: str) -> None:
        """Interpreter code run by this command: its facts, and its text for the secret-flow facts."""
        if len(self.code_texts) < 8:
            self.code_texts.append(text)
        self.apply_code(analyze(language, text))

    def apply_code(self, facts: CodeFacts) -> None:
        code = self.rec.setdefault("code", facts.summary())
        code["parsed"] = code["parsed"] and facts.parsed
        code["opaque"] = code["opaque"] or facts.opaque
        path = self.code_path
        self.deletes += [path(p) for p in facts.deletes]
        self.writes += [path(p) for p in facts.writes]
        self.moves += [path(p) for p in facts.moves]
        for target, link in facts.links:
            if target is not None and link is not None:
                self.writes.append(path(link))
                self.line.link(target, link, self.here)
            else:
                self.writes.append(dynamic_path("<computed link>"))
        for method, url in facts.http:
            if method not in ("GET", "HEAD", "OPTIONS") or "http" not in self.rec:
                self.rec["http"] = {"method": method, "urls": [describe_url(url or "")]}
        for text in facts.spawns[:16]:
            self.nested(text, f"{self.name} code")

    def code_path(self, raw: str | None) -> dict:
        return dynamic_path("<computed>") if raw is None else self.line.path(raw, self.here)

    def programs(self) -> None:
        env = dict(self.env)
        for key, values in self.line.variables.items():
            if len(values) == 1 and key not in env:
                env[key] = values[0]
        sub = self.operands[0] if self.name == "git" and self.operands else ""
        runs = programs_run(self.name, self.eff, env, sub) if self.eff else []
        if runs:
            self.rec["executes"] = [{"via": via, "known": text is not None} for via, text in runs]
        for via, text in runs[:16]:
            if text is None:
                self.rec["dynamic"] = True
            elif (via, text) not in self.line.programs_seen:
                self.line.programs_seen.add((via, text))
                self.nested(text, via)

    def sql(self) -> None:
        if self.name not in CLIENTS:
            return
        stdin = self.stdin
        use = sql_client(self.name, self.values, self.operands, self.flags, stdin.text, stdin.given,
                         lambda word: self.line.content(word, self.here)[1])
        if use is None:
            return
        self.rec["sql"] = use.facts()
        self.writes += [self.code_path(w) for w in use.writes]
        for text in use.spawns[:16]:
            self.nested(text, f"{self.name} meta-command")

    def network(self) -> None:
        name, rec = self.name, self.rec
        if name in fx.HTTP_CLIENTS:
            http = fx.http_facts(name, self.flags, self.operands, self.values)
            rec["http"] = {"method": http["method"], "urls": [describe_url(u) for u in http["urls"]]}
        api = fx.forge_api(name, self.operands, self.values)
        if api is not None:
            rec["http"] = {"method": api["method"], "urls": [describe_url(u) for u in api["urls"]]}
        host = fx.remote_target(name, self.operands)
        if host is not None:
            rec["remote"] = {"host": host}

    # -- files ----------------------------------------------------------------------------------------
    def find_starts(self) -> list[str]:
        starts = []
        for word in self.eff[1:]:
            if word.startswith(("-", "(", "!")) and word not in ("-", "-H", "-L", "-P"):
                break
            if word not in ("-H", "-L", "-P"):
                starts.append(word)
        return starts or ["."]

    def path_words(self) -> list[str]:
        if self.name == "find":
            return self.find_starts()
        if self.name == "git":
            return self.operands[1:]
        if self.name in ("echo", "printf", "alias", "trap", "eval", "parallel", "watch") or self.name in _DECLARE:
            return []
        if self.name in SHELLS:
            script = shell_script_file(self.eff) if shell_script(self.eff) == "" else None
            return [script] if script else []
        if self.name in CLIENTS:
            return self.operands[:1] if self.name in ("sqlite3", "sqlite", "duckdb") else []
        if "code" in self.rec:
            return self.source_files
        return [o for o in self.operands if "://" not in o]

    def file_effects(self) -> None:
        name, line, here = self.name, self.line, self.here
        for redirect in self.cmd["redirects"]:
            if redirect["op"] in WRITE_OPS and redirect["target"] and redirect["target"] not in SAFE_TARGETS:
                self.writes.append(line.path(redirect["target"], here))
        targets = fx.write_targets(name, self.flags, self.operands, self.values, self.eff) + self.u.writes
        self.writes += [line.path(t, here) for t in targets]
        self.deletes += [line.path(t, here) for t in fx.option_deletes(name, self.flags, self.operands, self.eff)]
        self.moves += [line.path(t, here) for t in fx.move_sources(name, self.flags, self.operands, self.values)]
        self.moves += [line.path(t, here) for t in fx.consumed(name, self.flags, self.operands)]
        pairs = fx.link_pairs(name, self.flags, self.operands, self.values)
        if pairs:
            self.rec["links"] = [{"target": line.path(t, here), "link": line.path(k, here)} for t, k in pairs]

    def after_effects(self) -> None:
        """Record what later commands will find: links made, files written (with their content if known)."""
        name, line, here = self.name, self.line, self.here
        if self.rec.get("sources"):
            for fact in self.writes:
                if fact.get("normalized") and len(line.tainted_files) < 256:
                    line.tainted_files[fact["normalized"]] = fact["raw"]
                    line.effects.secret.add(fact["normalized"])
        for target, link in fx.link_pairs(name, self.flags, self.operands, self.values):
            line.link(target, link, here)
        for source, dest in fx.copy_pairs(name, self.operands, self.values):
            written, content = (True, self.stdin.text) if source in _STDIN_FILES else line.content(source, here)
            if written:
                line.wrote(dest, here, content)
            else:
                line.untrack(dest, here)
                line.copied(source, dest, here)
            if name == "mv":
                line.untrack(source, here)
        for redirect in self.cmd["redirects"]:
            if redirect["op"] in WRITE_OPS and redirect["target"]:
                line.wrote(redirect["target"], here, self.redirected_text, append=redirect["op"] in (">>", "&>>"))
        if name == "tee":
            for word in self.operands:
                line.wrote(word, here, self.stdin.text, append="-a" in self.flags or "--append" in self.flags)
        elif name not in _NO_CONTENT_TRACKING and name not in ("cp", "mv"):
            for fact in self.writes:
                if fact["raw"] in [r["target"] for r in self.cmd["redirects"]]:
                    continue
                if not fact["dynamic"] and fact["raw"] not in (".", "./") and fact["normalized"] not in line.links:
                    suffix = "/" if name in _DIR_WRITERS and name != "wget" or (
                        name == "wget" and any(f in self.flags for f in ("-r", "--recursive", "-m"))) else ""
                    line.files[fact["normalized"].rstrip("/") + suffix] = None
                    line.effects.files[fact["normalized"].rstrip("/") + suffix] = None
        for path in [p for p in line.effects.secret if p not in line.effects.files][:64]:
            line.effects.files[path] = None     # a copy of a key (`cp ~/.ssh/id_rsa /tmp/k`): remembered as secret

    def change_directory(self) -> None:
        line = self.line
        if self.name == "popd":
            line.cwd = None
            return
        target = self.operands[0] if self.operands else "~"
        line.cwd = None if target == "-" else line.resolve(target, line.cwd)
