"""OSV records (the format of ossf/malicious-packages) read into index entries, as pure functions.

One record names its packages in `affected[]` (`package.ecosystem`, `package.name`) with `ranges` (types SEMVER and
ECOSYSTEM; events `introduced`, `fixed`, `last_affected`) and `versions`. Only PyPI and npm entries are kept; GIT
ranges name commits, not versions, and are left out. An entry is stored in a compact form (`affected_json`): a list
of ranges, each a list of [event, version] pairs, and the version list. A withdrawn record (`withdrawn` set) takes
its entries out of the index.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from gateway.packages.versions import ECOSYSTEMS, normalise_name

EVENTS = ("introduced", "fixed", "last_affected")
SUMMARY_MAX = 200
EVERY_VERSION = '{"r":[[["introduced","0"]]],"v":[]}'      # most records of the public set: one shared string


@dataclass(frozen=True)
class Entry:
    """One (advisory, package) pair of a record."""

    advisory: str
    ecosystem: str
    name: str                  # normalised (versions.normalise_name)
    affected_json: str         # {"r": [[[event, version], ...], ...], "v": [version, ...]}
    summary: str
    modified: str
    withdrawn: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.advisory, self.ecosystem, self.name)

    def row(self) -> tuple[str, str, str, str, str, str, bool]:
        return (self.advisory, self.ecosystem, self.name, self.affected_json, self.summary, self.modified,
                self.withdrawn)


def _ranges(raw: Any) -> list[list[list[str]]]:
    out = []
    for rng in raw if isinstance(raw, list) else []:
        if not isinstance(rng, dict) or str(rng.get("type", "")).upper() not in ("SEMVER", "ECOSYSTEM"):
            continue
        events = []
        for event in rng.get("events") or []:
            if not isinstance(event, dict):
                continue
            for kind in EVENTS:
                if isinstance(event.get(kind), str) and event[kind].strip():
                    events.append([kind, event[kind].strip()])
        if any(kind == "introduced" for kind, _ in events):
            out.append(events)
    return out


def entries_of(record: Any) -> list[Entry]:
    """The PyPI and npm entries of one OSV record (ValueError when it is not an OSV record at all)."""
    if not isinstance(record, dict) or not isinstance(record.get("id"), str) or not record["id"].strip():
        raise ValueError("not an OSV record (no id)")
    advisory = record["id"].strip()
    summary = " ".join(str(record.get("summary") or "").split())[:SUMMARY_MAX]
    modified = str(record.get("modified") or "")
    withdrawn = bool(record.get("withdrawn"))
    found: dict[tuple[str, str, str], Entry] = {}
    for item in record.get("affected") or []:
        if not isinstance(item, dict) or not isinstance(item.get("package"), dict):
            continue
        eco_raw = str(item["package"].get("ecosystem") or "").strip()
        eco = next((e for e in ECOSYSTEMS if e.lower() == eco_raw.lower()), None)
        if eco is None:
            continue
        try:
            name = normalise_name(eco, str(item["package"].get("name") or ""))
        except ValueError:
            continue
        versions = [v.strip() for v in item.get("versions") or [] if isinstance(v, str) and v.strip()]
        ranges = _ranges(item.get("ranges"))
        key = (advisory, eco, name)
        if key in found:                  # the same package twice in one record: one entry with both
            prev = json.loads(found[key].affected_json)
            ranges, versions = prev["r"] + ranges, prev["v"] + versions
        if not ranges and not versions:
            # OSV: an entry with neither affects no version we can name; a malicious-package record without them
            # still means the package. Read as every version (the data as published names the package).
            ranges = [[["introduced", "0"]]]
        affected = EVERY_VERSION if ranges == [[["introduced", "0"]]] and not versions else \
            json.dumps({"r": ranges, "v": versions}, separators=(",", ":"))
        found[key] = Entry(advisory, eco, name, affected, summary, modified, withdrawn)
    return list(found.values())


def entries_from(records: Iterable[Any]) -> tuple[list[Entry], int]:
    """Entries of many records (the last one of a key wins) and how many records were not OSV records."""
    out: dict[tuple[str, str, str], Entry] = {}
    bad = 0
    for record in records:
        try:
            for entry in entries_of(record):
                out[entry.key] = entry
        except ValueError:
            bad += 1
    return list(out.values()), bad
