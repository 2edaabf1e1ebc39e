"""What part of `input` a policy can read, from regorus's own parse of its modules (`Engine.get_ast_as_json()`),
never from the source text. Pure: modules in, paths out. The decision cache keys on these paths
(gateway/policy/cachekey.py holds the key's contract).

A path is a tuple of segments: a key (str), an array index (int), `WILD` (every key or index) or, last, `LEN`
(only the length and the type of the value there). `WILD` and `LEN` are markers of their own type, so no key a
policy names (`input["*"]`, `input.a["#len"]`) can be taken for one.

Every place the parse holds the variable `input` is classified:
- a reference `input.a["b"][0][x]...`: literal segments are keys (or non-negative integer indices), a variable in
  brackets is `WILD` and any other expression in brackets ends the path there (the whole value below is read).
  Whatever the reference ends in reads the whole value there;
- `count(input.a.b)`: only the length (and type) of the value there;
- `object.get(input, "a", d)` / `object.get(input, ["a", "b"], d)` with literal keys: the whole value there;
- anything else (`input` alone, `count(input)`, `with input... as`, `object.get(input, k, d)` with a computed
  key, `walk(input)`, an `import input...`) cannot be proved: the whole input is read (`None`).

A rule that nothing can reach cannot change a decision, so what it reads does not count: a complete or
partial-set rule with a plain name whose name is no variable anywhere else, which no `data` reference (nor an
import, nor an entry point the engine queries) could reach. Its package comes from the parse too: an indented
`package` line, a BOM or bracketed package names read as the engine reads them. A module regorus cannot parse
(for example one for an OPA server only) makes the whole input count.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

import regorus


class Marker:
    """A path segment that is not a key: `WILD` or `LEN` (never equal to any str or int)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __lt__(self, other: Any) -> bool:          # sortable beside keys (tests sort paths): markers first
        return not isinstance(other, Marker) or self.name < other.name


WILD = Marker("WILD")
LEN = Marker("LEN")

Path = tuple
Reads = frozenset | None        # None: the whole input


class WholeInput(Exception):
    """The walk met a read of `input` it cannot bound."""


def parse_modules(modules: Sequence[tuple[str, str]]) -> list[dict] | None:
    """regorus's AST of each module (name, text); None when one does not parse."""
    engine = regorus.Engine()
    try:
        for name, text in modules:
            engine.add_policy(name, text)
        parsed = json.loads(engine.get_ast_as_json())
    except (RuntimeError, ValueError):
        return None
    return parsed if isinstance(parsed, list) else None


def scan_reads(texts: Iterable[str], queried: Iterable[str] = ()) -> Reads:
    """The input paths these module texts can read (see the module's docstring); None: the whole input."""
    parsed = parse_modules([(f"m{i}.rego", text) for i, text in enumerate(texts)])
    return None if parsed is None else ast_reads(parsed, queried)


def ast_reads(modules: list[dict], queried: Iterable[str] = ()) -> Reads:
    """The input paths of parsed modules; `queried`: the rules the engine evaluates (`data.a.b.rule`)."""
    try:
        walks: list[tuple[tuple, str | None, _Walk]] = []      # (package, plain rule name or None, its walk)
        names: dict[str, int] = {}          # every variable, rule heads included
        heads: dict[str, int] = {}          # the rule heads among them
        prefixes: set[tuple] = {tuple(ref.split(".")[1:]) for ref in queried}
        builtins = _BUILTINS - _defined_names(modules)      # count and object.get, where no module redefines them
        for module in modules:
            ast = module["ast"]
            package = _literal_ref(ast["package"]["refr"])
            for imp in ast.get("imports", []):
                w = _Walk(builtins)
                w.visit(imp["refr"])
                if w.whole or w.paths:
                    return None             # `import input...`: an alias this walk does not follow
                prefixes |= w.prefixes
                _count(names, w.names)
            for rule in ast.get("rules", []):
                name = _rule_name(rule)
                if name is not None:
                    heads[name] = heads.get(name, 0) + 1
                w = _Walk(builtins)
                w.visit(rule)
                prefixes |= w.prefixes
                _count(names, w.names)
                walks.append((package, name, w))
        paths: set[tuple] = set()
        for package, name, w in walks:
            if name is not None and package is not None and names.get(name, 0) == heads[name]:
                full = package + (name,)
                if not any(full[:len(p)] == p or p[:len(full)] == full for p in prefixes):
                    continue                    # unreachable: it never reaches a decision
            if w.whole:
                return None
            paths |= w.paths
        return frozenset(paths)
    except (KeyError, TypeError, AttributeError, IndexError, WholeInput):
        return None         # a shape of the parse this walk does not know: nothing is proved


_BUILTINS = frozenset({"count", "object"})


def _defined_names(modules: list[dict]) -> set[str]:
    """Every name a module defines or imports: the first segment of each rule head, and each import's alias (or
    last segment). A policy may define its own `count` or import a package as `object`; then `count(...)` and
    `object.get(...)` are not the builtins and read what they read."""
    out: set[str] = set()
    for module in modules:
        ast = module["ast"]
        source = module.get("source", {}).get("contents", "").encode()
        for imp in ast.get("imports", []):
            alias = imp.get("as")
            if isinstance(alias, dict) and "start" in alias:
                out.add(source[alias["start"]:alias["end"]].decode(errors="replace"))
            path = _literal_ref(imp["refr"])
            out.add(str(path[-1]) if path else "")
        for rule in ast.get("rules", []):
            kind, body = _one(rule)
            refr = body["refr"] if kind == "Default" else _one(body["head"])[1]["refr"]
            root, _ = _unroll(refr)
            out.add(_one(root)[1].get("value", "") if _one(root)[0] == "Var" else "")
    return out


def _count(names: dict[str, int], seen: dict[str, int]) -> None:
    for k, v in seen.items():
        names[k] = names.get(k, 0) + v


def _rule_name(rule: dict) -> str | None:
    """The plain name of a complete or partial-set rule (or a default), the only rules ever left out; None for
    functions and rules with a reference head (`a.b := 1`)."""
    kind, body = _one(rule)
    if kind == "Default":
        refr = body["refr"]
    elif kind == "Spec":
        head_kind, head = _one(body["head"])
        if head_kind not in ("Compr", "Set"):
            return None
        refr = head["refr"]
    else:
        return None
    node_kind, node = _one(refr)
    return node["value"] if node_kind == "Var" else None


def _one(node: dict) -> tuple[str, Any]:
    if not isinstance(node, dict) or len(node) != 1:
        raise WholeInput
    return next(iter(node.items()))


def _literal_ref(node: Any) -> tuple | None:
    """A reference of literal names (`a.b["c"]`) as a tuple, its root variable first; None otherwise."""
    segs: list[Any] = []
    while True:
        kind, body = _one(node)
        if kind == "Var":
            return (body["value"], *segs[::-1])
        if kind == "RefDot":
            segs.append(body["field"][1])
            node = body["refr"]
        elif kind == "RefBrack" and isinstance(body["index"], dict) and "String" in body["index"]:
            segs.append(body["index"]["String"]["value"])
            node = body["refr"]
        else:
            return None


def _index(node: Any) -> str | int | None:
    """A literal bracket index: a string, or a non-negative integer; None for anything else."""
    if isinstance(node, dict) and len(node) == 1:
        kind, body = next(iter(node.items()))
        if kind == "String":
            return body["value"]
        if kind == "Number":
            value = body["value"]
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
            if isinstance(value, float) and value.is_integer() and value >= 0:
                return int(value)
    return None


def _unroll(node: dict) -> tuple[dict, list[tuple[str, Any]]]:
    """A reference chain as (its root node, [(kind, field name or index node)...] from the root outwards)."""
    steps: list[tuple[str, Any]] = []
    while True:
        kind, body = _one(node)
        if kind == "RefDot":
            steps.append(("dot", body["field"][1]))
            node = body["refr"]
        elif kind == "RefBrack":
            steps.append(("brack", body["index"]))
            node = body["refr"]
        else:
            return node, steps[::-1]


_NOT_CODE = frozenset({"span", "source", "eidx", "sidx", "qidx"})


class _Walk:
    """What one rule (or import) reads of `input`, and the names and `data` paths it refers to."""

    def __init__(self, builtins: frozenset[str] | set[str] = frozenset()) -> None:
        self.builtins = builtins            # of "count", "object": those that are the builtins here
        self.paths: set[tuple] = set()
        self.whole = False                  # reads `input` in a way no path bounds
        self.names: dict[str, int] = {}
        self.prefixes: set[tuple] = set()

    def visit(self, node: Any) -> None:
        stack: list[Any] = [node]
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
                continue
            if not isinstance(node, dict):
                continue
            if len(node) != 1:
                if "refr" in node and "as" in node and _root_var(node["refr"]) in ("input", "count", "object"):
                    self.whole = True       # `with input... as`, or `with count as f`: a builtin replaced
                stack.extend(v for k, v in node.items() if k not in _NOT_CODE)
                continue
            kind, body = next(iter(node.items()))
            if kind in ("RefDot", "RefBrack"):
                stack.extend(self._reference(node)[0])
            elif kind == "Call" and (rest := self._call(body)) is not None:
                stack.extend(rest)
            elif kind == "Var":
                self._var(body["value"])
            elif isinstance(body, (dict, list)):
                stack.append(body)

    def _var(self, name: str) -> None:
        if name == "input":
            self.whole = True               # `input` alone: nothing bounds what is read
        elif name == "data":
            self.prefixes.add(())           # `data` alone reaches every rule
        else:
            self.names[name] = self.names.get(name, 0) + 1

    def _reference(self, node: dict) -> tuple[list, bool]:
        """Record a reference. Returns the nodes in it still to visit (its brackets' contents), and whether an
        `input` reference's path reached its last segment."""
        root, steps = _unroll(node)
        brackets = [index for how, index in steps if how == "brack"]
        kind, body = _one(root)
        if kind != "Var":
            return [root, *brackets], False
        name = body["value"]
        if name not in ("input", "data"):
            self._var(name)
            return brackets, False
        path: list[Any] = []
        complete = True
        for how, step in steps:
            seg = step if how == "dot" else _index(step)
            if seg is None and name == "input" and isinstance(step, dict) and "Var" in step:
                seg = WILD                  # input.a[x]: every key or index
            if seg is None or (name == "data" and not isinstance(seg, str)):
                complete = False            # input: the whole value here; data: the rules under the names so far
                break
            path.append(seg)
        (self.paths if name == "input" else self.prefixes).add(tuple(path))
        return brackets, complete

    def _call(self, call: dict) -> list | None:
        """`count(input...)` and `object.get(input, literal, d)`: their own paths (returns what is left to
        visit); None: visit the call as any other node."""
        fcn, params = call["fcn"], call["params"]
        name = _literal_ref(fcn)
        if name == ("count",) and "count" in self.builtins and len(params) == 1 and _root_var(params[0]) == "input" and "Var" not in params[0]:
            probe = _Walk(self.builtins)
            rest, complete = probe._reference(params[0])
            (path,) = probe.paths
            self.paths.add(path + (LEN,) if complete else path)
            return [fcn, *rest]
        if name == ("object", "get") and "object" in self.builtins and len(params) == 3 and params[0].get("Var", {}).get("value") == "input":
            path = _literal_path(params[1])
            if path is not None:
                self.paths.add(path)
                return [fcn, params[2]]
        return None


def _root_var(node: Any) -> str | None:
    """The variable a reference starts from (the variable itself for a plain one); None for anything else."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    kind, _ = next(iter(node.items()))
    if kind not in ("Var", "RefDot", "RefBrack"):
        return None
    root, _ = _unroll(node)
    var = root.get("Var") if isinstance(root, dict) else None
    return var.get("value") if isinstance(var, dict) else None


def _literal_path(node: Any) -> tuple | None:
    """`"a"` or `["a", "b", 0]` with literal items, as a path; None otherwise."""
    one = _index(node)
    if isinstance(one, str):
        return (one,)
    if isinstance(node, dict) and "Array" in node:
        items = [_index(item) for item in node["Array"]["items"]]
        if all(i is not None for i in items):
            return tuple(items)
    return None


def impure_calls(modules: list[dict], prefixes: tuple[str, ...]) -> bool:
    """Whether any module calls a function whose name starts with one of `prefixes` (`time.now_ns`, `rand.`)."""
    return any(name.startswith(prefixes) for name in _call_names(modules))


def _call_names(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            call = node.get("Call")
            if isinstance(call, dict) and len(node) == 1:
                path = _literal_ref(call.get("fcn")) if isinstance(call.get("fcn"), dict) else None
                if path is not None:
                    yield ".".join(str(p) for p in path)
            stack.extend(v for k, v in node.items() if k != "source")
