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
from typing import Any, Callable, Iterable

WILD = "*"
LEN = "#len"


class Shared(dict):
    """A part of an input that is built once and shared, never changed afterwards (a tool call's parsed facts,
    gateway/toolcalls/memo.py). The decision cache and the decision log serialise it once per object, and keep
    what they made on the object itself (so it goes when the object goes: no cache to bound or collect)."""

    __slots__ = ("proj_memo", "key_memo", "log_memo")

    def __init__(self, *args: Any, **kwargs: Any):
        dict.__init__(self, *args, **kwargs)
        self.proj_memo = self.key_memo = self.log_memo = None


class Stamped(dict):
    """A Shared dict with one number field set for this use (a history entry and its `age_s`): equal to
    `{**base, field: value}`, key order kept. Never changed afterwards."""

    __slots__ = ("base", "field")

    def __init__(self, base: Shared, field: str, value: int | float):
        dict.__init__(self, base)
        self[field] = value
        self.base, self.field = base, field


_dict_new, _dict_update = dict.__new__, dict.update


def stamp(base: Shared, field: str, value: int | float) -> Stamped:
    """`Stamped(base, field, value)` without a Python-level __init__ (half the cost; 20 per tool call)."""
    entry = _dict_new(Stamped)
    _dict_update(entry, base)
    entry[field] = value
    entry.base = base
    entry.field = field
    return entry

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
    line_start: bool = False        # the first thing on its line, in column 0


def tokenize(text: str) -> list[Token]:
    """Rego tokens without whitespace and comments (strings kept, with their quotes)."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        start = m.start()
        out.append(Token("string" if kind == "raw" else kind, m.group(), start == 0 or text[start - 1] == "\n"))
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
        if lit is None or j + 1 >= len(toks):
            return None
        path.append(lit)
        j += 1
        if toks[j].text == "]":
            break
        if toks[j].text != ",":
            return None
        j += 1
    return path if j + 1 < len(toks) and toks[j + 1].text == "," else None


def _chunk_reads(toks: list[Token]) -> set[tuple] | None:
    """The input paths one piece of a module reads; None: the whole input."""
    paths: set[tuple] = set()
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
    return paths


def _statements(toks: list[Token]) -> list[list[Token]]:
    """A module cut where a line starts in column 0 outside any bracket: one rule (or `package`/`import`) per
    piece, the way every formatted module is written. A piece may hold more (a rule on an indented line):
    `_unused` only ever drops a piece that is provably one complete rule."""
    out: list[list[Token]] = []
    depth = 0
    for tok in toks:
        if not out or (tok.line_start and depth == 0):
            out.append([])
        out[-1].append(tok)
        if tok.text in "([{":
            depth += 1
        elif tok.text in ")]}":
            depth = max(0, depth - 1)
    return out


_RULE_WORDS = frozenset({":=", "=", "if", "contains", "else", "default", "package", "import"})


def _single_value_rule(piece: list[Token]) -> str | None:
    """NAME for a piece that is exactly `NAME := <expression>` (nothing else at bracket depth 0)."""
    if len(piece) < 3 or piece[0].kind != "ident" or piece[1].text != ":=" or piece[0].text in _RULE_WORDS:
        return None
    depth = 0
    for tok in piece[2:]:
        if tok.text in "([{":
            depth += 1
        elif tok.text in ")]}":
            depth -= 1
        elif depth == 0 and tok.text in _RULE_WORDS:
            return None
    return piece[0].text


def _package(toks: list[Token]) -> tuple[str, ...] | None:
    """The module's package path (`package a.b`, `package a["b"]`); None when it is not all literal names."""
    for i, tok in enumerate(toks):
        if tok.text == "package" and tok.line_start:
            if i + 1 >= len(toks) or toks[i + 1].kind != "ident":
                return None
            rest, _ = _chain(toks, i + 2)
            if not all(isinstance(seg, str) and seg != WILD for seg in rest):
                return None
            return (toks[i + 1].text, *rest)
    return ()


def _data_prefixes(toks: list[Token]) -> set[tuple]:
    """Every `data.a.b` chain, as far as its literal names go: a rule named by one is referred to, and one
    under a chain that stops short of it (`data.a[x]`, `data.a` alone, `import data.a`) may be read whole."""
    out = set()
    for i, tok in enumerate(toks):
        if tok.kind == "ident" and tok.text == "data" and (i == 0 or toks[i - 1].text != "."):
            path, _ = _chain(toks, i + 1)
            literal = []
            for seg in path:                    # up to the first segment that is not a name: `data.a[p].h`
                if not isinstance(seg, str) or seg == WILD:   # reaches every rule under `a`
                    break
                literal.append(seg)
            out.add(tuple(literal))
    return out


def scan_reads(texts: Iterable[str], queried: Iterable[str] = ()) -> frozenset[tuple] | None:
    """The input paths the modules can read (tuples of keys, indices, WILD, ending in LEN for a length only),
    or None when one reads `input` in a way this scan does not follow (then the whole input counts).

    A rule `NAME := ...` that nothing refers to (its name appears nowhere else, no `data` reference could
    reach it, and it is not one of the `queried` rules, `data.a.b.rule` refs the engine evaluates) cannot
    change a decision: what it reads does not count. The shipped `history` helper for site rules is one. A
    module whose package path is not all literal names keeps all its rules. An interpolated string (`$"..."`,
    OPA 1.12) can hide references inside its text: the whole input counts."""
    modules = [tokenize(text) for text in texts]
    if any(tok.text == "$" for toks in modules for tok in toks):
        return None
    pieces = [(_package(toks), piece) for toks in modules for piece in _statements(toks)]
    names: dict[str, int] = {}
    for toks in modules:
        for i, tok in enumerate(toks):
            if tok.kind == "ident" and (i == 0 or toks[i - 1].text != "."):     # a name, not a field
                names[tok.text] = names.get(tok.text, 0) + 1
    prefixes = set().union(*(_data_prefixes(toks) for toks in modules)) if modules else set()
    prefixes |= {tuple(ref.split(".")[1:]) for ref in queried}
    paths: set[tuple] = set()
    for package, piece in pieces:
        name = _single_value_rule(piece)
        if name is not None and package is not None and names.get(name, 0) == 1:
            full = package + (name,)
            if not any(full[:len(p)] == p or p[:len(full)] == full for p in prefixes):
                continue                        # unreferenced: it never reaches a decision
        got = _chunk_reads(piece)
        if got is None:
            return None
        paths |= got
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


def compile_projection(trie: dict) -> Callable[[Any], Any]:
    """`project(value, trie)` as a function built once per revision (the same output; no trie walking, merging
    or sorting of the trie on each call: the decision cache computes a key for every decision)."""
    if trie.get(None):
        return _whole
    keys = sorted(k for k in trie if isinstance(k, str) and k not in (WILD, LEN))
    ints = sorted(k for k in trie if isinstance(k, int) and not isinstance(k, bool))
    has_len = LEN in trie
    wild = trie.get(WILD)
    wild_fn = compile_projection(wild) if wild is not None else None
    sub: dict = {k: compile_projection(trie[k]) for k in keys + ints}
    merged: dict = {}
    if wild is not None:
        merged = {k: compile_projection(_merge(wild, trie[k])) for k in keys + ints}

    def proj(value: Any) -> Any:
        if value.__class__ is Stamped and wild_fn is None and value.field not in sub:
            # Projected as its shared base (the stamped field is not read): once per base object.
            base = value.base
            if base.__class__ is Shared:
                hit = getattr(base, "proj_memo", None)
                if hit is not None and hit[0] is proj:
                    return hit[1]
                out = proj(base)
                base.proj_memo = (proj, out)
                return out
            return proj(base)
        out: list = [_type(value)]
        if has_len and isinstance(value, (dict, list, str)):
            out.append(["#len", len(value)])
        if isinstance(value, dict):
            if wild_fn is not None:
                for k in sorted(value):
                    out.append([k, merged.get(k, wild_fn)(value[k])])
            else:
                for k in keys:
                    if k in value:
                        out.append([k, sub[k](value[k])])
        elif isinstance(value, list):
            if wild_fn is not None:
                out.append(["#len", len(value)])
                for i, v in enumerate(value):
                    out.append([i, merged.get(i, wild_fn)(v)])
            else:
                n = len(value)
                for k in ints:
                    if 0 <= k < n:
                        out.append([k, sub[k](value[k])])
        return out

    return proj


def _whole(value: Any) -> list:
    return ["v", value]

