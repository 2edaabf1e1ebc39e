"""What part of `input` a policy can read: a conservative static scan of its Rego source, and the projection of
an input onto it (the decision cache's key). Pure: text in, paths out; a document in, its readable part out.

Every place a module names `input` is classified:
- a reference chain `input.a["b"][0][x]...`: literal segments are keys (or array indices), a variable (or any
  name) in brackets is `*` (every key or index). Whatever the chain ends in reads the whole value there;
- `count(input.a.b)`: only the length (and the type) of the value there (`#len`);
- `object.get(input, "a", d)` / `object.get(input, ["a", "b"], d)` with literal keys: the whole value there;
- anything else (`input` alone, `with input as`, `object.get(input, k, d)` with a computed key, `walk(input)`,
  an `import input`) reads the whole input: no projection, the cache keys on everything.

Comments and string contents never count as references. A policy that reads a field only where this scan
sees it cannot tell two inputs with the same projection apart, so both get the same decision.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

WILD = "*"
LEN = "#len"

_TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<comment>\#[^\n]*) |
    (?P<string>"(?:[^"\\\n]|\\.)*") | (?P<raw>`[^`]*`) |
    (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?) |
    (?P<ident>[A-Za-z_][A-Za-z0-9_]*) |
    (?P<op>:=|==|!=|<=|>=|.)
""", re.X | re.S)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokenize(text: str) -> list[Token]:
    """Rego tokens without whitespace and comments (strings kept, with their quotes)."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        out.append(Token("string" if kind == "raw" else kind, m.group()))
    return out


def _literal(tok: Token) -> str | int | None:
    if tok.kind == "string":
        if tok.text.startswith("`"):
            return tok.text[1:-1]
        import json
        try:
            return json.loads(tok.text)
        except ValueError:
            return None
    if tok.kind == "number" and re.fullmatch(r"\d+", tok.text):
        return int(tok.text)
    return None


def _chain(toks: list[Token], i: int) -> tuple[list, int]:
    """The path of the reference chain that starts after `input` at toks[i]; returns (segments, next index)."""
    path: list = []
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.text == "." and i + 1 < n and toks[i + 1].kind == "ident":
            path.append(toks[i + 1].text)
            i += 2
            continue
        if t.text == "[" and i + 2 < n and toks[i + 2].text == "]":
            inner = toks[i + 1]
            lit = _literal(inner)
            if lit is not None:
                path.append(lit)
            elif inner.kind == "ident":
                path.append(WILD)
            else:
                break
            i += 3
            continue
        break
    return path, i


def _object_get_path(toks: list[Token], i: int) -> list | None:
    """For `object.get(input, PATH, ...)` with `input` at toks[i]: PATH as segments when literal, else None."""
    if i < 4 or [t.text for t in toks[i - 4:i]] != ["object", ".", "get", "("]:
        return None
    if i + 2 >= len(toks) or toks[i + 1].text != ",":
        return None
    j = i + 2
    lit = _literal(toks[j])
    if lit is not None and isinstance(lit, str) and j + 1 < len(toks) and toks[j + 1].text == ",":
        return [lit]
    if toks[j].text != "[":
        return None
    path, j = [], j + 1
    while j < len(toks):
        lit = _literal(toks[j])
        if lit is None:
            return None
        path.append(lit)
        j += 1
        if toks[j].text == "]":
            break
        if toks[j].text != ",":
            return None
        j += 1
    return path if j + 1 < len(toks) and toks[j + 1].text == "," else None


def scan_reads(texts: Iterable[str]) -> frozenset[tuple] | None:
    """The input paths some module reads (tuples of keys, indices, WILD, ending in LEN for a length only), or
    None when one reads `input` in a way this scan does not follow (then the whole input counts)."""
    paths: set[tuple] = set()
    for text in texts:
        toks = tokenize(text)
        for i, tok in enumerate(toks):
            if tok.kind != "ident" or tok.text != "input":
                continue
            if i > 0 and toks[i - 1].text in (".", "with", "import"):
                if toks[i - 1].text == ".":
                    continue                    # a field named `input` of something else (data.x.input)
                return None
            got = _object_get_path(toks, i)
            if got is not None:
                paths.add(tuple(got))
                continue
            path, end = _chain(toks, i + 1)
            if not path:
                return None
            if (i >= 2 and toks[i - 2].text == "count" and toks[i - 1].text == "("
                    and end < len(toks) and toks[end].text == ")"):
                path.append(LEN)
            paths.add(tuple(path))
    return frozenset(paths)


# -- projection ----------------------------------------------------------------------------------------

def build_trie(paths: Iterable[tuple]) -> dict:
    """Paths as a trie; a node that is read whole is {None: True}."""
    root: dict = {}
    for path in paths:
        node = root
        for seg in path:
            if node.get(None):
                break
            node = node.setdefault(seg, {})
        else:
            node.clear()
            node[None] = True
    return root


def _merge(a: dict, b: dict | None) -> dict:
    if not b:
        return a
    if a.get(None) or b.get(None):
        return {None: True}
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if k in out else v
    return out


def _type(value: Any) -> str:
    if isinstance(value, dict):
        return "o"
    if isinstance(value, list):
        return "a"
    if isinstance(value, str):
        return "s"
    if isinstance(value, bool) or value is None:
        return repr(value)
    return "n"


def project(value: Any, trie: dict) -> Any:
    """The part of `value` the trie can read, tagged with types so two different shapes never collide."""
    if trie.get(None):
        return ["v", value]
    out: list = [_type(value)]
    if LEN in trie and isinstance(value, (dict, list, str)):
        out.append(["#len", len(value)])
    wild = trie.get(WILD)
    if isinstance(value, dict):
        keys = sorted(value) if wild is not None else sorted(k for k in trie if isinstance(k, str) and k in value
                                                              and k != LEN)
        for k in keys:
            sub = _merge(wild, trie.get(k)) if wild is not None else trie[k]
            out.append([k, project(value[k], sub)])
    elif isinstance(value, list):
        idx = range(len(value)) if wild is not None else sorted(
            k for k in trie if isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(value))
        if wild is not None:
            out.append(["#len", len(value)])
        for k in idx:
            sub = _merge(wild, trie.get(k)) if wild is not None else trie[k]
            out.append([k, project(value[k], sub)])
    return out
