"""Shell text -> the flat list of simple commands it holds, in execution order (syntax only).

Public interface: `parse_shell(text) -> {"parsed": bool, "commands": [...]}`. Pure; never raises. Parsing uses
tree-sitter-bash. Sequences (`;`, newlines, `&`), `&&`, `||` and pipes split commands; subshells, `{ ...; }`
groups, loop/if/case bodies, function bodies, command and process substitutions (before the command that
contains them) are flattened into the one list. Words are unquoted but never expanded: `~`, `$HOME`,
`${HOME}`, `..`, braces and globs stay visible. What a command runs in turn (`bash -c`, wrappers, interpreters'
code, aliases, ...) is the describer's business (describe.py), which calls this again for nested scripts.

Each entry is::

    {"argv": [...],            # the words as written (quotes removed), leading env assignments dropped
     "op": ";"|"&&"|"||"|"|"|"",  # the operator joining it to the PREVIOUS entry ("" for the first); `&` is ";"
     "redirects": [{"op": ">", "target": "f"}, ...],  # heredocs / herestrings: op "<<" / "<<<", plus "body"
     "env": {"NAME": "value"}, # only when leading assignments exist
     "quoting": ["none"|"single"|"double", ...]}  # per argv word, only when some word is quoted

plus two kinds of records with an empty argv: `{"assign": {"X": ["v", ...]}}` (with `"literal": [names]` for values
that were all single-quoted) for a bare assignment or a
`for X in v ...` loop (`"loop": true`: its words are brace-expanded), and `{"function": "name", "body": "text"}` for a function definition (its body's
commands also follow, flattened, as written).

Any syntax error (tree-sitter ERROR or MISSING node) or an internal failure yields `"parsed": false` with a
best-effort shlex split of the text as `commands` (same shape). Longer than MAX_LENGTH: not parsed.
"""
from __future__ import annotations

import re
import shlex
import threading
from typing import Any

import tree_sitter_bash as tsb
from tree_sitter import Language, Node, Parser

from gateway.toolcalls.words import ansi_c, unescape_dq, unescape_word

__all__ = ["MAX_LENGTH", "parse_shell"]

MAX_LENGTH = 100_000        # longer command lines are not parsed (fallback only)

_LANGUAGE = Language(tsb.language())
_LOCAL = threading.local()
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_BACKTICKS = re.compile(r"`([^`]+)`")
_OPS = {";": ";", "\n": ";", "&": ";", ";;": ";", ";&": ";", ";;&": ";", "&&": "&&", "||": "||", "|": "|", "|&": "|"}
_CONTAINERS = frozenset({
    "program", "list", "pipeline", "compound_statement", "subshell", "do_group", "if_statement", "elif_clause",
    "else_clause", "while_statement", "case_item", "command_substitution", "process_substitution",
    "redirected_statement", "heredoc_redirect", "negated_command", "function_definition", "for_statement",
    "c_style_for_statement",
})
_FD_DUP_OPS = frozenset({">&", "<&", ">&-", "<&-"})
_REDIRECTS = ("file_redirect", "heredoc_redirect", "herestring_redirect")


def parse_shell(text: str) -> dict:
    """Parse `text` into {"parsed": bool, "commands": [...]} (see the module docstring). Never raises."""
    out = _Out()
    try:
        if not isinstance(text, str) or len(text) > MAX_LENGTH:
            out.ok = False
            out.fallback(text if isinstance(text, str) else "")
        else:
            out.script(text)
    except Exception:  # noqa: BLE001 - a parser failure must never escape; it is reported as unparsed
        out = _Out()
        out.ok = False
        try:
            out.fallback(text if isinstance(text, str) else "")
        except Exception:  # noqa: BLE001
            out.commands = []
    return {"parsed": out.ok, "commands": out.commands}


def _parser() -> Parser:
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = Parser(_LANGUAGE)
    return parser


def _has_missing(node: Node) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_missing or current.is_error:
            return True
        if current.has_error:
            stack.extend(current.children)
    return False


def _ascii_shadow(text: str) -> bytes:
    """The UTF-8 bytes of text with every non-ASCII character replaced by as many "a" as it has bytes.

    tree-sitter-bash 0.25.1 can crash the process (SIGSEGV) on some code points (e.g. "{" + U+F0000). Bash
    treats non-ASCII characters as word characters, so the shadow tokenises the same way and has the same
    byte offsets; words are then read from the original bytes.
    """
    return _NON_ASCII.sub(lambda m: "a" * len(m.group().encode("utf-8")), text).encode("ascii")


_EXPANDS = re.compile(r"[$`]")                 # what a shell would expand in a word's text
_EXPANDS_UNQUOTED = re.compile(r"[$`~{]")      # ... and in an unquoted part (tilde, braces)

class _Out:
    """The flat command list being built."""

    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []
        self.pending = ""
        self.ok = True

    def script(self, text: str) -> None:
        text = text.replace("\\\n", "")      # line continuations (tree-sitter splits words on them)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            self.ok = False
            self.fallback(text)
            return
        root = _parser().parse(_ascii_shadow(text)).root_node
        if root.has_error or _has_missing(root):
            self.ok = False
            self.fallback(text)
            return
        _Walker(self, data).walk(root)

    def emit(self, argv: list[str], env: dict[str, str], redirects: list[dict], **extra: Any) -> None:
        if not argv and not redirects and not extra:
            return
        cmd: dict[str, Any] = {"argv": argv, "op": self.pending if self.commands else "", "redirects": redirects}
        if env:
            cmd["env"] = env
        cmd.update(extra)
        self.commands.append(cmd)
        self.pending = ";"

    def fallback(self, text: str) -> None:
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
                self._flush(argv, env, redirects)
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
        self._flush(argv, env, redirects)

    def _flush(self, argv: list[str], env: dict[str, str], redirects: list[dict]) -> None:
        if not argv and not redirects and env:
            self.emit([], {}, [], assign={k: [v] for k, v in env.items()})
        else:
            self.emit(argv, env, redirects)


class _Walker:
    """Walks one tree-sitter tree (one script text) into the output list."""

    def __init__(self, out: _Out, data: bytes):
        self.out, self.data = out, data

    def raw(self, node: Node) -> str:
        return self.data[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def walk(self, node: Node) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, [])
        elif kind in ("declaration_command", "unset_command"):
            self.declaration(node)
        elif kind == "redirected_statement":
            self.redirected(node)
        elif kind in ("variable_assignment", "variable_assignments"):
            self.assignment(node)
        elif kind == "comment":
            return
        else:
            if kind == "expansion":             # tree-sitter leaves `...` inside ${x:=`cmd`} a plain word
                for child in node.children:
                    if child.type == "word":
                        for match in _BACKTICKS.finditer(self.raw(child)):
                            self.out.script(match.group(1))
            if kind == "for_statement":
                self.loop_variable(node)
            elif kind == "function_definition":
                self.function(node)
            container = kind in _CONTAINERS
            for child in node.children:
                if not child.is_named:
                    if container and child.type in _OPS and kind != "case_item":
                        self.out.pending = _OPS[child.type]
                    continue
                self.walk(child)

    def walk_inside(self, node: Node) -> None:
        """The command substitutions etc. inside an assignment's value."""
        for child in node.children:
            if child.is_named:
                self.walk(child)

    def command(self, node: Node, extra_redirects: list[dict]) -> None:
        env: dict[str, str] = {}
        words: list[Node] = []
        redirects: list[dict] = []
        follow: list[Node] = []
        for i, child in enumerate(node.children):
            field = node.field_name_for_child(i)
            if child.type == "variable_assignment" and not words:
                self.walk_inside(child)
                name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                env[self.raw(name) if name else ""] = self.text(value) if value else ""
            elif child.type in _REDIRECTS:
                self.redirect(child, redirects, follow)
            elif field in ("name", "argument") or (child.is_named and child.type != "comment"):
                self.walk(child)
                words.append(child)
        argv = [self.text(w) for w in words]
        quoting = [self.quoting(w) for w in words]
        self.out.emit(argv, env, redirects + extra_redirects,
                      **({"quoting": quoting} if any(q != "none" for q in quoting) else {}))
        for node_after in follow:
            self.walk_token(node_after)

    def assignment(self, node: Node) -> None:
        values: dict[str, list[str]] = {}
        literal: list[str] = []                 # names whose value is all single-quoted: never expanded
        for item in ([node] if node.type == "variable_assignment" else node.named_children):
            if item.type != "variable_assignment":
                continue
            self.walk_inside(item)
            name, value = item.child_by_field_name("name"), item.child_by_field_name("value")
            values[self.raw(name) if name else ""] = [self.text(value) if value else ""]
            if value is not None and self.quoting(value) == "single":
                literal.append(self.raw(name) if name else "")
        if values:
            self.out.emit([], {}, [], assign=values, **({"literal": literal} if literal else {}))

    def loop_variable(self, node: Node) -> None:
        var = node.child_by_field_name("variable")
        if var is None:
            return
        values = [self.text(child) for i, child in enumerate(node.children)
                  if node.field_name_for_child(i) == "value"]
        has_in = any(child.type == "in" for child in node.children)
        # `for x; do` iterates over "$@": unknown
        self.out.emit([], {}, [], assign={self.raw(var): values if has_in else ["$@"]}, loop=True)

    def function(self, node: Node) -> None:
        name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
        if name is not None and body is not None:
            text = self.raw(body)
            if body.type == "compound_statement" and text.startswith("{") and text.endswith("}"):
                text = text[1:-1]
            self.out.emit([], {}, [], function=self.text(name), body=text)

    def declaration(self, node: Node) -> None:
        argv = []
        for child in node.children:
            if not child.is_named:
                if child.type not in _OPS:
                    argv.append(child.type)
                continue
            if child.type == "variable_assignment":
                self.walk_inside(child)
                name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                argv.append(f"{self.raw(name) if name else ''}={self.text(value) if value else ''}")
            else:
                self.walk(child)
                argv.append(self.text(child))
        self.out.emit(argv, {}, [])

    def redirected(self, node: Node) -> None:
        redirects: list[dict] = []
        follow: list[Node] = []
        body = node.child_by_field_name("body")
        for child in node.children:
            if child.type in _REDIRECTS:
                self.redirect(child, redirects, follow)
        self.with_redirects(body, redirects)
        for node_after in follow:
            self.walk_token(node_after)

    def with_redirects(self, body: Node | None, redirects: list[dict]) -> None:
        """Walk body; redirects bind to its last command (tree-sitter hangs `a && b > f` and `a | b > f` on
        the whole list, bash on b alone), or to every command of a group/subshell/loop."""
        if body is None:
            self.out.emit([], {}, redirects)
        elif body.type == "command":
            self.command(body, redirects)
        elif body.type in ("list", "pipeline") and body.named_child_count:
            last = body.named_children[-1]
            for child in body.children:
                if child.start_byte >= last.start_byte and child.is_named:
                    break
                self.walk_token(child)
            self.with_redirects(last, redirects)
        else:
            start = len(self.out.commands)
            self.walk(body)
            for cmd in self.out.commands[start:]:
                if cmd["argv"] or cmd["redirects"]:
                    cmd["redirects"].extend(redirects)

    def walk_token(self, node: Node) -> None:
        if not node.is_named:
            if node.type in _OPS:
                self.out.pending = _OPS[node.type]
        else:
            self.walk(node)

    def redirect(self, node: Node, out: list[dict], follow: list[Node]) -> None:
        if node.type == "file_redirect":
            op = next((c.type for c in node.children if not c.is_named), "")
            dest = node.child_by_field_name("destination")
            for child in node.children:
                if child.is_named:
                    self.walk(child)
            target = self.text(dest) if dest is not None else ""
            if not (op in _FD_DUP_OPS and (target.isdigit() or target in ("", "-"))):
                out.append({"op": op, "target": target})
        elif node.type == "herestring_redirect":
            value = next((c for c in node.children if c.is_named), None)
            if value is not None:
                self.walk(value)
            out.append({"op": "<<<", "target": "", "body": self.text(value) if value is not None else ""})
        else:
            body = ""
            for child in node.children:
                if child.type == "heredoc_body":
                    self.walk(child)
                    body = self.raw(child)
                elif child.type == "file_redirect":
                    self.redirect(child, out, follow)
                elif child.type not in ("heredoc_start", "heredoc_end", "<<", "<<-"):
                    follow.append(child)
            out.append({"op": "<<", "target": "", "body": body})

    # -- words -------------------------------------------------------------------------------------
    def quoting(self, node: Node) -> str:
        """How a word is quoted: "none", "single" (only single-quoted or $'...' parts: no expansion at all),
        "double" (some quoting: no brace expansion or word splitting, variables still expand)."""
        kind = node.type
        if kind in ("raw_string", "ansi_c_string"):
            return "single"
        if kind in ("string", "translated_string"):
            return "double"
        if kind in ("concatenation", "command_name"):
            quoted = [(child, self.quoting(child)) for child in node.named_children]
            parts = {how for _child, how in quoted}
            if parts <= {"single"} and parts:
                return "single"
            if "single" in parts and any(how == "single" and _EXPANDS.search(self.raw(child))
                                         for child, how in quoted):
                # `'$(echo x)'"'"'...'`: a `$` or backquote inside single quotes stays literal, but expanding the
                # joined word would run it. When no other part expands, the whole word is literal ("single");
                # else the word would need expanding part by part, which the facts do not do: unparsed (asks).
                if not any(how != "single" and _EXPANDS_UNQUOTED.search(self.raw(child)) for child, how in quoted):
                    return "single"
                self.out.ok = False
            return "double" if parts - {"none"} else "none"
        return "none"

    def text(self, node: Node) -> str:
        kind = node.type
        if kind == "word":
            return unescape_word(self.raw(node))
        if kind == "raw_string":
            return self.raw(node)[1:-1]
        if kind == "ansi_c_string":
            return ansi_c(self.raw(node)[2:-1])
        if kind in ("string", "translated_string"):
            return self.joined(node, quoted=True)
        if kind in ("concatenation", "command_name"):
            return self.joined(node, quoted=False)
        return self.raw(node)

    def joined(self, node: Node, quoted: bool) -> str:
        out, pos = [], node.start_byte
        unescape = unescape_dq if quoted else unescape_word
        for child in node.children:
            if child.start_byte > pos:
                out.append(unescape(self.data[pos:child.start_byte].decode("utf-8", "replace")))
            if child.type == "string_content":
                out.append(unescape_dq(self.raw(child)))
            elif not (quoted and child.type in ('"', '$"')):
                out.append(self.text(child) if child.is_named else self.raw(child))
            pos = child.end_byte
        if pos < node.end_byte:
            out.append(unescape(self.data[pos:node.end_byte].decode("utf-8", "replace")))
        return "".join(out)
