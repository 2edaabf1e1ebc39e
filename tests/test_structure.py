"""The adapters read typed records, not dict rows: string-key subscripts (`row["id"]`) in gateway/api,
gateway/web and gateway/egress may not creep back.

The store returns frozen records (gateway/store/records.py) and request bodies have typed schemas
(gateway/api/bodies.py); JSON is handled as JSON only at the edges. Each package's count may only go down: when
a change lowers one, lower its ceiling here too.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBSCRIPT = re.compile(r'\w\["[A-Za-z_]\w*"\]')

# package -> the most string-key subscripts it may hold (154 across the three when this was first counted)
CEILINGS = {"gateway/api": 0, "gateway/web": 0, "gateway/egress": 0}


def subscripts(package: str) -> dict[str, int]:
    """path -> how many string-key subscripts it holds (files that hold any)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        n = len(SUBSCRIPT.findall(path.read_text(encoding="utf-8")))
        if n:
            out[str(path.relative_to(ROOT))] = n
    return out


def test_the_adapters_hold_no_more_string_key_subscripts_than_their_ceiling():
    over = {}
    for package, ceiling in CEILINGS.items():
        found = subscripts(package)
        if sum(found.values()) > ceiling:
            over[package] = (sum(found.values()), ceiling, found)
    assert not over, "string-key subscripts past the ceiling (use the records' attributes): " + "; ".join(
        f"{p}: {n} > {c} ({', '.join(f'{f} {k}' for f, k in found.items())})" for p, (n, c, found) in over.items())


def test_the_count_finds_what_it_is_meant_to():
    text = 'row["id"] + request.match_info["sid"] + x[name] + y["not a name"] + f(a)["k"] + z[\'q\']'
    assert SUBSCRIPT.findall(text) == ['w["id"]', 'o["sid"]']
