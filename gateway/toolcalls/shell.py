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
from tree_sitter import Language, Node, Parser

MAX_LENGTH = 100_000        # longer command lines are not parsed (fallback only)
MAX_DEPTH = 12              # nesting of bash -c / eval / heredoc scripts
MAX_COMMANDS = 100          # longer lists are cut here and reported unparsed (policy evaluation cost grows per command)

_LANGUAGE = Language(tsb.language())
_LOCAL = threading.local()

_OPS = {";": ";", "\n": ";", "&": ";", ";;": ";", ";&": ";", ";;&": ";", "&&": "&&", "||": "||", "|": "|", "|&": "|"}
_CONTAINERS = frozenset({
    "program", "list", "pipeline", "compound_statement", "subshell", "do_group", "if_statement", "elif_clause",
    "else_clause", "while_statement", "case_item", "command_substitution", "process_substitution",
    "redirected_statement", "heredoc_redirect", "negated_command", "function_definition", "for_statement",
    "c_style_for_statement",
})
_FD_DUP_OPS = frozenset({">&", "<&", ">&-", "<&-"})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")

# wrapper -> (options that take a separate argument, operands to skip before the command)
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sudo": (frozenset("-u -g -h -p -C -D -r -t -T -U --user --group --host --prompt --close-from --chdir "
                       "--role --type --command-timeout --other-user".split()), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "xargs": (frozenset("-I -n -P -d -L -s -E -a --max-args --max-procs --delimiter --max-lines --max-chars "
                        "--eof --arg-file".split()), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "setsid": (frozenset(), 0),
}


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


def strip_wrappers(argv: list[str]) -> list[str]:
    """argv without leading wrapper commands and their options: `sudo -u x nice rm y` -> ["rm", "y"]."""
    words = list(argv)
    for _ in range(16):
        if not words or posixpath.basename(words[0]) not in _WRAPPERS:
            return words
        name = posixpath.basename(words[0])
        if name == "command" and any(w in ("-v", "-V") for w in words[1:2]):
            return words                      # `command -v rm` only looks rm up
        opts, skip = _WRAPPERS[name]
        i, split = 1, None
        while i < len(words):
            word = words[i]
            if word == "--":
                i += 1
                break
            if name == "env" and _ASSIGNMENT.match(word):
                i += 1
                continue
            if not word.startswith("-") or word == "-":
                break
            key, has_value = word.split("=", 1)[0], "=" in word
            if name == "env" and (key in ("-S", "--split-string") or re.match(r"-S.", word)):
                if has_value:
                    value, i = word.split("=", 1)[1], i + 1
                elif len(word) > 2 and not word.startswith("--"):
                    value, i = word[2:], i + 1
                else:
                    value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 2
                split = _split_words(value)
                break
            i += 2 if key in opts and not has_value else 1
        rest = words[i:]
        words = (split + rest) if split is not None else rest[skip:]
    return words


def shell_script(argv: list[str]) -> str | None:
    """For a shell's effective argv: the `-c` script, "" when it runs a script file, None when it reads stdin."""
    i, inline = 1, False
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            break
        if not word.startswith("--") and "c" in word[1:]:
            inline = True
        i += 1
    if inline:
        return argv[i] if i < len(argv) else ""
    return "" if i < len(argv) else None


def _su_command(argv: list[str]) -> str | None:
    for i, word in enumerate(argv[1:], 1):
        if word in ("-c", "--command"):
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("--command="):
            return word.split("=", 1)[1]
        if word.startswith("-c"):
            return word[2:]
    return None


def _split_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


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


def _has_missing(node: Node) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_missing or current.is_error:
            return True
        if current.has_error:
            stack.extend(current.children)
    return False


def find_exec_groups(argv: list[str]) -> list[list[str]]:
    """The commands a `find` argv runs with -exec/-execdir/-ok/-okdir (up to `;` or `+`)."""
    groups, i = [], 1
    while i < len(argv):
        if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(argv) and argv[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                groups.append(argv[i + 1:j])
            i = j
        i += 1
    return groups


class _Walker:
    """Walks one tree-sitter tree (one script text) into the shared state."""

    def __init__(self, state: _State, data: bytes, depth: int):
        self.state, self.data, self.depth = state, data, depth

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
        elif kind == "comment":
            return
        else:
            container = kind in _CONTAINERS
            for child in node.children:
                if not child.is_named:
                    if container and child.type in _OPS and kind != "case_item":
                        self.state.pending = _OPS[child.type]
                    continue
                self.walk(child)

    def command(self, node: Node, extra_redirects: list[dict]) -> None:
        env: dict[str, str] = {}
        words: list[Node] = []
        redirects: list[dict] = []
        follow: list[Node] = []
        for i, child in enumerate(node.children):
            field = node.field_name_for_child(i)
            if child.type == "variable_assignment" and not words:
                self.walk(child)
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                env[self.raw(name) if name else ""] = self.text(value) if value else ""
            elif child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.redirect(child, redirects, follow)
            elif field in ("name", "argument") or (child.is_named and child.type != "comment"):
                self.walk(child)
                words.append(child)
        argv = [self.text(w) for w in words]
        self.state.emit(argv, env, redirects + extra_redirects, self.depth)
        for node_after in follow:
            self.walk_token(node_after)

    def declaration(self, node: Node) -> None:
        argv = []
        for child in node.children:
            if not child.is_named:
                if child.type not in _OPS:
                    argv.append(child.type)
                continue
            self.walk(child)
            if child.type == "variable_assignment":
                name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                argv.append(f"{self.raw(name) if name else ''}={self.text(value) if value else ''}")
            else:
                argv.append(self.text(child))
        self.state.emit(argv, {}, [], self.depth)

    def redirected(self, node: Node) -> None:
        redirects: list[dict] = []
        follow: list[Node] = []
        body = node.child_by_field_name("body")
        for child in node.children:
            if child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.redirect(child, redirects, follow)
        self.with_redirects(body, redirects)
        for node_after in follow:
            self.walk_token(node_after)

    def with_redirects(self, body: Node | None, redirects: list[dict]) -> None:
        """Walk body; redirects bind to its last command (tree-sitter hangs `a && b > f` and `a | b > f` on
        the whole list, bash on b alone), or to every command of a group/subshell/loop."""
        if body is None:
            self.state.emit([], {}, redirects, self.depth)
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
            start = len(self.state.commands)
            self.walk(body)
            for cmd in self.state.commands[start:]:
                cmd["redirects"].extend(redirects)

    def walk_token(self, node: Node) -> None:
        if not node.is_named:
            if node.type in _OPS:
                self.state.pending = _OPS[node.type]
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
    def text(self, node: Node) -> str:
        kind = node.type
        if kind == "word":
            return _unescape_word(self.raw(node))
        if kind == "raw_string":
            return self.raw(node)[1:-1]
        if kind == "ansi_c_string":
            return _ansi_c(self.raw(node)[2:-1])
        if kind in ("string", "translated_string"):
            return self.joined(node, quoted=True)
        if kind in ("concatenation", "command_name"):
            return self.joined(node, quoted=False)
        return self.raw(node)

    def joined(self, node: Node, quoted: bool) -> str:
        out, pos = [], node.start_byte
        unescape = _unescape_dq if quoted else _unescape_word
        for child in node.children:
            if child.start_byte > pos:
                out.append(unescape(self.data[pos:child.start_byte].decode("utf-8", "replace")))
            if child.type == "string_content":
                out.append(_unescape_dq(self.raw(child)))
            elif not (quoted and child.type in ('"', '$"')):
                out.append(self.text(child) if child.is_named else self.raw(child))
            pos = child.end_byte
        if pos < node.end_byte:
            out.append(unescape(self.data[pos:node.end_byte].decode("utf-8", "replace")))
        return "".join(out)


def _unescape_word(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text, flags=re.S)


def _unescape_dq(text: str) -> str:
    return re.sub(r'\\([\\"$`])', r"\1", text)


_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "v": "\v"}


def _ansi_c(text: str) -> str:
    def repl(match: re.Match) -> str:
        esc = match.group(1)
        try:
            if esc[0] in "xuU" and len(esc) > 1:
                return chr(int(esc[1:], 16))
            if esc[0] in "01234567":
                return chr(int(esc, 8))
        except (ValueError, OverflowError):
            return ""
        return _ANSI.get(esc, esc)

    return re.sub(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|.)", repl, text, flags=re.S)
