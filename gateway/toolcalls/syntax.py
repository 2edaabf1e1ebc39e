"""A tree-sitter-bash syntax tree -> commands in the shared parse state (used by `shell.parse_shell`).

`_Walker` reads one script's tree: commands, declarations, redirections, heredocs and the operators between
them; words are read from the original bytes and unquoted (see `words`), never expanded.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tree_sitter import Node

from gateway.toolcalls.words import _ansi_c, _unescape_dq, _unescape_word

if TYPE_CHECKING:
    from gateway.toolcalls.shell import _State

_OPS = {";": ";", "\n": ";", "&": ";", ";;": ";", ";&": ";", ";;&": ";", "&&": "&&", "||": "||", "|": "|", "|&": "|"}
_CONTAINERS = frozenset({
    "program", "list", "pipeline", "compound_statement", "subshell", "do_group", "if_statement", "elif_clause",
    "else_clause", "while_statement", "case_item", "command_substitution", "process_substitution",
    "redirected_statement", "heredoc_redirect", "negated_command", "function_definition", "for_statement",
    "c_style_for_statement",
})
_FD_DUP_OPS = frozenset({">&", "<&", ">&-", "<&-"})


def _has_missing(node: Node) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_missing or current.is_error:
            return True
        if current.has_error:
            stack.extend(current.children)
    return False


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
