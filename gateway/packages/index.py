"""The in-memory index of malicious-package entries: which advisories list a package version. Pure, no I/O.

Keyed by (ecosystem, normalised name); an entry keeps its compact JSON until the first lookup of its package, which
compiles it (versions parsed once) and caches the result: most packages are never asked for, and a package that is
not listed costs one dict lookup. Updates are copy-on-write (`updated` returns a new index), so a replica builds
the next index on a worker thread while the event loop keeps reading the current one.

A version is affected when OSV says so: listed in `versions` (compared by version key, so PEP 440's `1.0` is
`1.0.0`), or inside a range (events sorted by version; `introduced` opens, `fixed` closes before, `last_affected`
closes after; `introduced: "0"` is the first version). What cannot be read is affected: a version that does not
parse, of a package that has a range, or an unknown version (None) of a package with any advisory. Site
exceptions (`packages allow`) clear one exact version.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from gateway.packages.osv import EVERY_VERSION, Entry
from gateway.packages.versions import version_key

ALL = "0"


@dataclass(frozen=True)
class Advisory:
    id: str
    summary: str


@dataclass(frozen=True)
class _Compiled:
    advisory: Advisory
    ranges: tuple[tuple[tuple[str, Any], ...], ...]   # per range: events sorted, (kind, key); key None = first
    everything: bool                                  # a range open from the first version and never closed
    version_keys: frozenset                           # parsed listed versions
    version_texts: frozenset[str]                     # listed versions that do not parse

    def affects(self, version: str | None, key: Any) -> bool:
        if version is None or self.everything:
            return True
        if key is None:
            return version.strip() in self.version_texts or bool(self.ranges)
        if key in self.version_keys:
            return True
        return any(_in_range(key, events) for events in self.ranges)


def _in_range(key: Any, events: tuple[tuple[str, Any], ...]) -> bool:
    affected = False
    for kind, at in events:
        if kind == "introduced":
            if at is None or at <= key:
                affected = True
        elif kind == "fixed":
            if at <= key:
                affected = False
        elif at < key:                       # last_affected
            affected = False
    return affected


def _compile(ecosystem: str, advisory: Advisory, affected_json: str) -> _Compiled:
    doc = json.loads(affected_json)
    ranges = []
    everything = False
    for raw in doc.get("r", []):
        events = []
        for kind, text in raw:
            key = None if (kind == "introduced" and text == ALL) else version_key(ecosystem, text)
            if key is None and kind != "introduced":
                continue                     # an end we cannot read: the range stays open (affected)
            events.append((kind, key))
        # Sorted by version, the first version (None) first; at one version "introduced" goes before the ends.
        events.sort(key=lambda e: (e[1] is not None, e[1] if e[1] is not None else 0, e[0] != "introduced"))
        if events and events[0] == ("introduced", None) and not any(k != "introduced" for k, _ in events):
            everything = True
        ranges.append(tuple(events))
    keys, texts = set(), set()
    for text in doc.get("v", []):
        key = version_key(ecosystem, text)
        if key is None:
            texts.add(text)
        else:
            keys.add(key)
    return _Compiled(advisory, tuple(ranges), everything, frozenset(keys), frozenset(texts))


def _key(ecosystem: str, name: str) -> str:
    return f"{ecosystem}\x00{name}"


@dataclass(frozen=True)
class PackageIndex:
    """"ECOSYSTEM\\0name" -> ((advisory id, summary, affected_json), ...); exceptions (ecosystem, name) -> versions
    (keys and texts). Compact on purpose: 200k entries of the public set's shape take about 60 MiB."""

    entries: Mapping[str, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)
    exceptions: Mapping[tuple[str, str], frozenset] = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return sum(len(v) for v in self.entries.values())

    def listed(self, ecosystem: str, name: str) -> bool:
        """Whether any advisory names this package (any version)."""
        return _key(ecosystem, name) in self.entries

    def advisories(self, ecosystem: str, name: str, version: str | None) -> tuple[Advisory, ...]:
        """The advisories listing this version of the package (`name` normalised); None = a version that could
        not be read. Empty when none does, or a site exception clears it."""
        key = _key(ecosystem, name)
        raw = self.entries.get(key)
        if not raw:
            return ()
        vkey = version_key(ecosystem, version.strip()) if version is not None else None
        allowed = self.exceptions.get((ecosystem, name))
        if allowed and version is not None and ((vkey is not None and vkey in allowed) or version.strip() in allowed):
            return ()
        compiled = self._cache.get(key)
        if compiled is None or compiled[0] is not raw:
            compiled = (raw, tuple(_compile(ecosystem, Advisory(aid, summary), affected)
                                   for aid, summary, affected in sorted(raw)))
            if len(self._cache) > 65536:
                self._cache.clear()
            self._cache[key] = compiled
        return tuple(c.advisory for c in compiled[1] if c.affects(version, vkey))

    def updated(self, entries: Iterable[Entry] = (), exceptions: Iterable[tuple[str, str, str, bool]] = ()
                ) -> "PackageIndex":
        """A new index with `entries` put in (withdrawn ones taken out) and `exceptions` (ecosystem, name, version,
        removed) applied. The compile cache carries over: a package whose entries did not change keeps its own."""
        table = dict(self.entries)
        for e in entries:
            k = _key(e.ecosystem, e.name)
            kept = tuple(t for t in table.get(k, ()) if t[0] != e.advisory)
            if not e.withdrawn:
                affected = EVERY_VERSION if e.affected_json == EVERY_VERSION else e.affected_json
                kept += ((e.advisory, e.summary, affected),)
            if kept:
                table[k] = kept
            else:
                table.pop(k, None)
        allowed = dict(self.exceptions)
        for eco, name, version, removed in exceptions:
            k2 = (eco, name)
            vkey = version_key(eco, version)
            marks = set(allowed.get(k2, frozenset()))
            for mark in ({vkey} if vkey is not None else set()) | {version}:
                (marks.discard if removed else marks.add)(mark)
            if marks:
                allowed[k2] = frozenset(marks)
            else:
                allowed.pop(k2, None)
        return PackageIndex(table, allowed, dict(self._cache))
