"""A memo of what parsing a tool call adds to its input (enrich.toolcall_facts), keyed before any parsing.

Those facts are a pure function of the tool, its arguments, the session's workspace and secret names and what the session's
earlier calls left behind (links, written files): the key holds exactly these, so a repeated command (`git
status`, `pytest -q`) is parsed once and its facts reused. Entries are shared, never changed by readers.
Bounded (least recently used out) by entries and by the characters of the strings its keys hold (the arguments'
JSON, up to the gate's MAX_ARGS_BYTES each, and the session's paths and file contents): 4,096 keys of 256 KiB
would otherwise keep a gigabyte. The facts are derived from those strings. MCP calls are never memoised.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping

from gateway.toolcalls.describe import Effects


MAX_CHARS = 32 * 1024 * 1024


def _cost(key: tuple) -> int:
    """The characters of the strings a key holds (the arguments, the workspace, paths, link targets, contents)."""
    n = len(key[1]) + len(key[2])
    for pairs in (key[3], key[4]):
        for path, value in pairs:
            n += len(path) + (len(value) if value.__class__ is str else 0)
    return n


class FactsMemo:
    def __init__(self, size: int = 4096, max_chars: int = MAX_CHARS):
        self.size, self.max_chars = size, max_chars
        self.hits = self.misses = 0
        self.chars = 0                      # what the keys held now hold (_cost)
        self._items: "OrderedDict[tuple, tuple[dict, Effects]]" = OrderedDict()
        self._costs: dict[tuple, int] = {}

    @staticmethod
    def key(tool: str, args_json: str, workspace: str, links: Mapping[str, str | None],
            files: Mapping[str, str | None], mcp: Any, secrets: tuple[str, ...] = (), rev: str = "") -> tuple | None:
        """`args_json` is the arguments' canonical JSON (approval_rules.canonical_json); `secrets` the session's
        secret names (their variables are sensitive sources in the facts); `rev` the policy revision whose tables
        (wrappers, executors, known programs) the facts were built with."""
        if mcp is not None:
            return None
        return (tool, args_json, workspace, tuple(sorted(links.items())), tuple(sorted(files.items())), secrets,
                rev, tuple(sorted(getattr(files, "secret", ()))))

    def get(self, key: tuple | None) -> tuple[dict, Effects] | None:
        if key is None:
            return None
        hit = self._items.get(key)
        if hit is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return hit

    def put(self, key: tuple | None, facts: dict, effects: Effects) -> None:
        if key is None:
            return
        cost = _cost(key)
        if cost > self.max_chars // 8:          # one call's arguments never take more than an eighth of it
            return
        self.chars += cost - self._costs.get(key, 0)
        self._items.pop(key, None)
        self._items[key] = (facts, effects)
        self._costs[key] = cost
        while len(self._items) > self.size or self.chars > self.max_chars:
            self.chars -= self._costs.pop(self._items.popitem(last=False)[0])
