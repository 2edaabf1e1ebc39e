"""A memo of what parsing a tool call adds to its input (enrich.toolcall_facts), keyed before any parsing.

Those facts are a pure function of the tool, its arguments, the session's workspace and secret names and what the session's
earlier calls left behind (links, written files): the key holds exactly these, so a repeated command (`git
status`, `pytest -q`) is parsed once and its facts reused. Entries are shared, never changed by readers.
Bounded (least recently used out). MCP calls are never memoised.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping

from gateway.toolcalls.describe import Effects


class FactsMemo:
    def __init__(self, size: int = 4096):
        self.size = size
        self.hits = self.misses = 0
        self._items: "OrderedDict[tuple, tuple[dict, Effects]]" = OrderedDict()

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
        self._items[key] = (facts, effects)
        if len(self._items) > self.size:
            self._items.popitem(last=False)
