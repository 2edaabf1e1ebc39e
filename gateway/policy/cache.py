"""The decision cache and its key: the one place that says when two inputs may share a decision.

THE CONTRACT. A decision is a pure function of (policy revision, the input's projection on what the revision
can read). So a cached decision is served to another input only when
  1. the revision is the same (the cache is cleared on every reload, and an entry holds its revision), and
  2. the policy calls no impure builtin (the clock, randomness, the network: `IMPURE`, checked on the text and
     on regorus's parse; such a policy is never cached), and
  3. the two inputs agree on every path of the read set, `readset.ast_reads`: derived from regorus's own parse of
     every module of the revision, never from its text. Where that walk cannot prove what a rule reads, the read
     set is None and the key is the whole input.
The key is `kind` plus an injective, type-tagged serialisation of that projection (`compile_projection`): two
inputs with different projections never share a key. Keys named in the input never meet the read set's markers
(`readset.WILD`, `readset.LEN` are objects of their own type) and a length is written as a bare number where
every key is written as a [key, value] pair.

What it buys and what it costs: docs/architecture.md ("The decision cache").

Three memo slots make a key cheaper without changing what it tells apart: `Shared` (a part of an input built once
and never changed: its projection and JSON are kept on the object), `Stamped` (a Shared base with one number field
set, projected as its base when that field is not read) and `Patched` (a Shared base with a few fields set, a
session's input with its age and counters: projected as its base when none of them is read). Two inputs get the
same key only when their projections are equal (tests).
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from gateway.policy.readset import LEN, WILD, Reads, ast_reads, impure_calls, parse_modules

if TYPE_CHECKING:
    from gateway.policy.decision import Decision

__all__ = ["DecisionCache", "IMPURE", "LEN", "Patched", "Shared", "Stamped", "WILD", "build_trie",
           "compile_projection", "is_pure", "patch", "project", "read_set", "stamp"]


# Builtins whose result changes between two evaluations of the same input (the clock, randomness, the network;
# io.jwt.decode_verify and x509 verification check expiry against the clock): a policy using any of them is
# never served from the decision cache. Rego allows spaces around the dots of a reference.
IMPURE = re.compile(r"\b(time\s*\.\s*now_ns|rand\s*\.|uuid\s*\.|http\s*\.\s*send|opa\s*\.\s*runtime"
                     r"|net\s*\.\s*lookup_ip_addr|io\s*\.\s*jwt\s*\.\s*decode_verify"
                     r"|crypto\s*\.\s*x509\s*\.\s*parse_and_verify)")


_key_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode     # json.dumps(..., sort_keys, compact)


class DecisionCache:
    """Decisions by key (the module's contract), least recently used first out past `size`. Fields no rule can
    read (`step`, `session.age_s`, `session.stats`, the ids and ages of `history` entries when only
    `input.history[i].decision` and the like are read) stay out of the key. Cleared on every reload. Bounded by
    entries and by the characters of its keys (`max_chars`): a key holds what the policy reads, a tool call's
    arguments (up to 256 KiB) among it, so 4,096 of them would otherwise keep a gigabyte."""

    def __init__(self, size: int = 4096, max_chars: int = 32 * 1024 * 1024):
        self.size, self.max_chars = size, max_chars
        self.chars = 0                               # the characters of the keys held
        self.enabled = False
        self.reads: frozenset | None = None          # None: the whole input
        self._trie: dict = {None: True}
        self._project = compile_projection(self._trie)
        self.hits = self.misses = 0
        self._items: "OrderedDict[str, Decision]" = OrderedDict()
        self._top: dict | None = None                # top-level key -> its projection (None: no shortcut)

    def configure(self, modules: Sequence[tuple[str, str]], queried: Iterable[str]) -> None:
        """Key on what these modules (name, text) read; `queried`: the rules the engine evaluates."""
        self.enabled, reads = read_set(modules, tuple(queried))
        self.set_reads(reads)

    def set_reads(self, reads: frozenset | None) -> None:
        """Key on these paths of the input (None: the whole input); forget every cached decision."""
        self.reads = reads
        self._trie = build_trie(self.reads) if self.reads is not None else {None: True}
        self._project = compile_projection(self._trie)
        trie = self._trie
        self._top = (None if trie.get(None) or WILD in trie else
                     {k: compile_projection(v) for k, v in trie.items() if isinstance(k, str) and k != LEN})
        # Per top-level key read as a list of like elements (`input.k[_]...` only): the keys read of an element
        # and the element's projection.
        self._elements = {k: (keys, compile_projection(v[WILD])) for k, v in trie.items()
                          if isinstance(k, str) and k != LEN and isinstance(v, dict)
                          and (keys := _element_keys(v)) is not None}
        # Per top-level key: the keys read of the object there (for Patched values); absent: none read; None:
        # every key (a wildcard, or the whole object)
        self._read_keys = {k: (None if not isinstance(v, dict) or v.get(None) or WILD in v else
                               frozenset(x for x in v if isinstance(x, str)))
                           for k, v in trie.items() if isinstance(k, str) and k != LEN}
        self._items.clear()
        self.chars = 0

    def key(self, kind: str, doc: dict) -> str | None:
        if not self.enabled:
            return None
        try:
            top = self._top
            if top is None or not isinstance(doc, dict):
                return kind + _key_json(self._project(doc))
            # Top-level values kept apart, each one's projection serialised once per object (it never changes):
            # Shared values, Patched ones whose changed fields are not read (as their base), lists of Stamped
            # entries whose stamped field is not read (each as its base). The rest of the input as usual; the
            # key names which keys were kept apart (for `#len`).
            shared: list = []
            for k, v in doc.items():
                cls = v.__class__
                if cls is Shared:
                    proj = top.get(k)
                    shared.append((k, None if proj is None else _key_text(v, proj)))
                elif cls is Patched:
                    if self._patched_unread(k, v):
                        proj = top.get(k)
                        shared.append((k, None if proj is None else _key_text(v.base, proj)))
                elif cls is list and v and v[0].__class__ is Stamped:
                    text = self._stamped_text(k, v)
                    if text is not None:
                        shared.append((k, text))
            if not shared:
                return kind + _key_json(self._project(doc))
            names = {k for k, _ in shared}
            parts = [kind, _key_json(self._project({k: v for k, v in doc.items() if k not in names}))]
            for k, text in shared:
                parts.append(k)
                if text is not None:
                    parts.append(text)
            return "\x00".join(parts)
        except (TypeError, ValueError):
            return None

    def _stamped_text(self, key: str, value: list) -> str | None:
        """The key's text of a list of Stamped entries (history) whose stamped field no rule reads of its
        elements: a JSON array of the projections of their shared bases, each made once per base. None for any
        other list."""
        elements = self._elements.get(key)
        if elements is None:
            return None
        read, element = elements
        texts = []
        for entry in value:
            if entry.__class__ is not Stamped or entry.field in read:
                return None
            base = entry.base
            hit = getattr(base, "key_memo", None) if base.__class__ is Shared else None
            texts.append(hit[1] if hit is not None and hit[0] is element else _key_text(base, element))
        return "[" + ",".join(texts) + "]"

    def _patched_unread(self, key: str, value: Patched) -> bool:
        """A Patched value (a session's input) whose changed fields no rule reads: it projects as its base."""
        read = self._read_keys.get(key, frozenset())
        return (read is not None and value.fields.isdisjoint(read) and value.base.__class__ is Shared
                and len(value) == len(value.base))

    def get(self, key: str | None) -> "Decision | None":
        if key is None:
            return None
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
        return hit

    def put(self, key: str | None, decision: "Decision") -> None:
        if key is None or len(key) > self.max_chars // 8:      # one key never takes more than an eighth of it
            return
        if self._items.pop(key, None) is not None:
            self.chars -= len(key)
        self._items[key] = decision
        self.chars += len(key)
        while len(self._items) > self.size or self.chars > self.max_chars:
            self.chars -= len(self._items.popitem(last=False)[0])


def _key_text(value: Any, proj: Any) -> str:
    """The JSON of `proj(value)`, kept on a Shared value (it never changes; a new revision's projection
    replaces it)."""
    if value.__class__ is Shared:
        hit = getattr(value, "key_memo", None)
        if hit is not None and hit[0] is proj:
            return hit[1]
        text = _key_json(proj(value))
        value.key_memo = (proj, text)
        return text
    return _key_json(proj(value))


def _element_keys(node: dict) -> frozenset | None:
    """The keys read of a list's elements under this trie node when every element is read alike (`k[_].a`,
    `count(k)`); None when some element is read whole, by index, or in every key."""
    if node.get(None) or WILD not in node:
        return None
    if any(k != WILD and k != LEN for k in node):
        return None
    sub = node[WILD]
    if not isinstance(sub, dict) or sub.get(None) or WILD in sub:
        return None
    return frozenset(x for x in sub if isinstance(x, str))




_IMPURE_CALLS = ("time.now_ns", "rand.", "uuid.", "http.send", "opa.runtime", "net.lookup_ip_addr",
                 "io.jwt.decode_verify", "crypto.x509.parse_and_verify")      # IMPURE, on the parse: name prefixes


def is_pure(texts: Sequence[str], parsed: list[dict]) -> bool:
    """Whether modules (their texts, and regorus's parse of them) call no impure builtin: evaluating them twice on
    the same input and data gives the same result."""
    return IMPURE.search("\n".join(texts)) is None and not impure_calls(parsed, _IMPURE_CALLS)


_READS_LOCK = threading.Lock()
_READS: "OrderedDict[tuple, tuple[bool, Reads]]" = OrderedDict()


def read_set(modules: Sequence[tuple[str, str]], queried: tuple[str, ...]) -> tuple[bool, Reads]:
    """(whether the modules may be cached at all, what they read of `input`; None: all of it). Parsing costs a few
    milliseconds: engines call this off the event loop when they load a revision, and `configure` finds it here
    (the last few are kept)."""
    memo_key = (tuple(modules), queried)
    with _READS_LOCK:
        hit = _READS.get(memo_key)
    if hit is not None:
        return hit
    parsed = parse_modules(modules)
    if parsed is None:
        result: tuple[bool, Reads] = (IMPURE.search("\n".join(t for _, t in modules)) is None, None)
    else:
        result = (is_pure([t for _, t in modules], parsed), ast_reads(parsed, queried))
    with _READS_LOCK:
        _READS[memo_key] = result
        while len(_READS) > 4:
            _READS.popitem(last=False)
    return result



# -- the projection: the part of an input the read set can see ----------------------------------------

class Shared(dict):
    """A part of an input that is built once and shared, never changed afterwards (a tool call's parsed facts,
    gateway/toolcalls/memo.py). The decision cache and the decision log serialise it once per object, and keep
    what they made on the object itself (so it goes when the object goes: no cache to bound or collect)."""

    __slots__ = ("proj_memo", "key_memo", "log_memo", "log_ref")

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


class Patched(dict):
    """A Shared dict with some of its fields set for this use (a session's input: `age_s` and `stats`, which
    change call by call while the rest is the session's as long as it does not change): equal to
    `{**base, **changes}`, key order kept, the changed fields among the base's keys. Never changed afterwards."""

    __slots__ = ("base", "fields")


def patch(base: Shared, changes: dict, fields: frozenset) -> Patched:
    """`{**base, **changes}` as a Patched of `base`; `fields`: frozenset(changes), every one a key of `base`."""
    entry = _dict_new(Patched)
    _dict_update(entry, base)
    _dict_update(entry, changes)
    entry.base = base
    entry.fields = fields
    return entry


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
        out.append(len(value))                  # a bare number: every key is written as a [key, value] pair
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
            out.append(len(value))
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
        if value.__class__ is Patched and wild_fn is None and value.fields.isdisjoint(sub) \
                and len(value) == len(value.base):
            return proj(value.base)              # its changed fields are not read: projected as its base
        out: list = [_type(value)]
        if has_len and isinstance(value, (dict, list, str)):
            out.append(len(value))
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
                out.append(len(value))
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

