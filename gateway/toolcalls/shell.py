"""Shell command lines -> the flat command list the tool-call policy reads (`input.shell`).

Pure: text in, plain dict out; never raises. Parsing uses tree-sitter-bash. Sequences (`;`, newlines, `&`),
`&&`, `||` and pipes split commands; subshells, `{ ...; }` groups, loop/if/case bodies, function bodies,
command and process substitutions, `bash -c '...'` / `sh -c` / `su -c` / `eval '...'` scripts, here-documents
fed to a shell, and `find -exec ... ;` commands are all flattened into the one list, in execution order
(substitutions before the command that contains them). Words are unquoted but never expanded: `~`, `$HOME`,
`${HOME}`, `..` and globs stay visible for the policy.

Each command is::

    {"argv": [...],            # the words as written (quotes removed), env assignments dropped
     "op": ";"|"&&"|"||"|"|"|"",  # the operator joining this command to the PREVIOUS one ("" for the first);
                               # `&` counts as ";"; a nested script's first command is joined with ";"
     "effective": [...],       # argv without wrappers (sudo, env, nice, nohup, time, timeout, xargs, ...)
     "redirects": [{"op": ">", "target": "f"}, ...],  # heredocs / herestrings: op "<<" / "<<<", plus "body"
     "env": {"NAME": "value"}, # only when leading assignments exist
     "stdin_script": true}     # only for a shell reading its script from stdin (`curl ... | sh`, `sudo -i`)

Any syntax error (tree-sitter ERROR or MISSING node), an over-deep nesting, or an internal failure yields
`"parsed": false` with a best-effort shlex split of the text as `commands` (same command shape). More than
MAX_COMMANDS commands are cut to that many and reported `"parsed": false` too.
"""
from __future__ import annotations

import posixpath
import re
import shlex
import threading
from typing import Any

import tree_sitter_bash as tsb
from tree_sitter import Language, Parser

from gateway.toolcalls.syntax import _FD_DUP_OPS, _OPS, _Walker, _has_missing
from gateway.toolcalls.wrappers import SHELLS, _ASSIGNMENT, _su_command, find_exec_groups, shell_script, strip_wrappers

__all__ = ["MAX_COMMANDS", "MAX_DEPTH", "MAX_LENGTH", "SHELLS", "find_exec_groups", "parse_shell", "shell_script",
           "strip_wrappers"]

MAX_LENGTH = 100_000        # longer command lines are not parsed (fallback only)
MAX_DEPTH = 12              # nesting of bash -c / eval / heredoc scripts
MAX_COMMANDS = 100          # longer lists are cut here and reported unparsed (policy evaluation cost grows per command)

_LANGUAGE = Language(tsb.language())
_LOCAL = threading.local()
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def parse_shell(command: str) -> dict:
    """Parse `command` into {"parsed": bool, "commands": [...]} (see the module docstring). Never raises."""
    state = _State()
    try:
        if not isinstance(command, str) or len(command) > MAX_LENGTH:
            state.ok = False
            state.fallback(command if isinstance(command, str) else "", 0)
        else:
            state.script(command, 0)
    except Exception:  # noqa: BLE001 - a parser failure must never escape; it is reported as unparsed
        state = _State()
        state.ok = False
        try:
            state.fallback(command if isinstance(command, str) else "", MAX_DEPTH)
        except Exception:  # noqa: BLE001
            state.commands = []
    if len(state.commands) > MAX_COMMANDS:
        state.ok, state.commands = False, state.commands[:MAX_COMMANDS]
    return {"parsed": state.ok, "commands": state.commands}


def _parser() -> Parser:
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = Parser(_LANGUAGE)
    return parser


class _State:
    """The flat command list being built, shared by nested scripts."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []
        self.pending = ""
        self.ok = True

    def script(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.ok = False
            return
        text = text.replace("\\\n", "")      # line continuations (tree-sitter splits words on them)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            self.ok = False
            self.fallback(text, depth)
            return
        tree = _parser().parse(_ascii_shadow(text))
        root = tree.root_node
        if root.has_error or _has_missing(root):
            self.ok = False
            self.fallback(text, depth)
            return
        _Walker(self, data, depth).walk(root)

    def emit(self, argv: list[str], env: dict[str, str], redirects: list[dict], depth: int) -> None:
        if not argv and not redirects:
            return
        cmd: dict[str, Any] = {"argv": argv, "op": self.pending if self.commands else "",
                               "effective": strip_wrappers(argv), "redirects": redirects}
        if env:
            cmd["env"] = env
        self.commands.append(cmd)
        self.pending = ";"
        self._nested(cmd, depth)

    def _nested(self, cmd: dict, depth: int) -> None:
        eff = cmd["effective"]
        name = posixpath.basename(eff[0]) if eff else ""
        if name in SHELLS:
            script = shell_script(eff)
            bodies = [r["body"] for r in cmd["redirects"] if "body" in r]
            if script:
                self.script(script, depth + 1)
            elif script is None and bodies:
                for body in bodies:
                    self.script(body, depth + 1)
            elif script is None:
                cmd["stdin_script"] = True
        elif name == "eval" and len(eff) > 1:
            self.script(" ".join(eff[1:]), depth + 1)
        elif name in ("su", "runuser"):
            script = _su_command(eff)
            if script:
                self.script(script, depth + 1)
            else:
                cmd["stdin_script"] = True    # an interactive shell as another user
        elif not eff and cmd["argv"] and posixpath.basename(cmd["argv"][0]) in ("sudo", "doas"):
            cmd["stdin_script"] = True        # `sudo -s`, `sudo -i`: an interactive root shell
        elif name == "find":
            for group in find_exec_groups(eff):
                if depth >= MAX_DEPTH:
                    self.ok = False
                    return
                self.emit(group, {}, [], depth + 1)

    def fallback(self, text: str, depth: int) -> None:
        """Best effort when the text does not parse: shlex tokens split on operators."""
        try:
            lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            tokens = re.findall(r"[;&|()<>]+|[^\s;&|()<>]+", text)
        argv: list[str] = []
        env: dict[str, str] = {}
        redirects: list[dict] = []
        redirect_op = None
        for tok in tokens:
            if tok in _OPS or set(tok) <= set("()"):
                self.emit(argv, env, redirects, depth + 1)
                argv, env, redirects, redirect_op = [], {}, [], None
                if tok in _OPS:
                    self.pending = _OPS[tok]
            elif set(tok) <= set("<>&|"):
                redirect_op = tok
            elif redirect_op is not None:
                if not (redirect_op in _FD_DUP_OPS and (tok.isdigit() or tok == "-")):
                    redirects.append({"op": redirect_op, "target": tok})
                redirect_op = None
            elif not argv and _ASSIGNMENT.match(tok):
                name, value = tok.split("=", 1)
                env[name] = value
            else:
                argv.append(tok)
        self.emit(argv, env, redirects, depth + 1)


def _ascii_shadow(text: str) -> bytes:
    """The UTF-8 bytes of text with every non-ASCII character replaced by as many "a" as it has bytes.

    tree-sitter-bash 0.25.1 can crash the process (SIGSEGV) on some code points (e.g. "{" + U+F0000). Bash
    treats non-ASCII characters as word characters, so the shadow tokenises the same way and has the same
    byte offsets; words are then read from the original bytes.
    """
    return _NON_ASCII.sub(lambda m: "a" * len(m.group().encode("utf-8")), text).encode("ascii")
