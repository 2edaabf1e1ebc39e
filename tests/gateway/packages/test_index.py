"""The index: which advisories list a version, by OSV's rules (ranges, versions, `introduced: 0`), exceptions,
copy-on-write updates; and a property: the index agrees with a plain reading of the OSV algorithm."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from gateway.packages.index import PackageIndex
from gateway.packages.osv import Entry
from gateway.packages.versions import version_key


def entry(eco: str, name: str, ranges=(), versions=(), advisory: str = "MAL-1", withdrawn: bool = False) -> Entry:
    return Entry(advisory, eco, name, json.dumps({"r": [list(map(list, r)) for r in ranges], "v": list(versions)}),
                 "summary", "", withdrawn)


TINYCOLOR = entry("npm", "@ctrl/tinycolor", ranges=[[("introduced", "0")],
                                                    [("introduced", "4.1.1"), ("last_affected", "4.1.2")]])


@pytest.mark.parametrize("version", ["0.0.1", "3.6.0", "4.1.1", "4.1.2", "4.1.3", "99.0.0", "1.0.0-rc.1"])
def test_introduced_zero_alone_in_a_range_means_every_version(version):
    index = PackageIndex().updated([TINYCOLOR])
    assert [a.id for a in index.advisories("npm", "@ctrl/tinycolor", version)] == ["MAL-1"]


R = [("introduced", "1.0.0"), ("fixed", "1.2.0"), ("introduced", "2.0.0"), ("last_affected", "2.1.0")]


@pytest.mark.parametrize("version, listed", [
    ("0.9.9", False), ("1.0.0-rc.1", False), ("1.0.0", True), ("1.1.9", True), ("1.2.0-beta", True), ("1.2.0", False),
    ("1.9.0", False), ("2.0.0", True), ("2.1.0", True), ("2.1.0+build", True), ("2.1.1", False), ("3.0.0", False),
])
def test_semver_ranges(version, listed):
    index = PackageIndex().updated([entry("npm", "pkg", ranges=[R])])
    assert bool(index.advisories("npm", "pkg", version)) is listed


@pytest.mark.parametrize("version, listed", [
    ("0.9", False), ("1.0", True), ("1.0.0", True), ("1.1.post1", True), ("1.2rc1", True), ("1.2", False),
    ("2.0", True), ("2.1", True), ("2.1.0.0", True), ("2.1.1", False), ("1!0.1", False),
])
def test_pep440_ranges(version, listed):
    ranges = [[("introduced", "1.0"), ("fixed", "1.2"), ("introduced", "2.0"), ("last_affected", "2.1")]]
    index = PackageIndex().updated([entry("PyPI", "pkg", ranges=ranges)])
    assert bool(index.advisories("PyPI", "pkg", version)) is listed


@pytest.mark.parametrize("version, listed", [("1.0.0", True), ("1.0", True), ("v1.0.0", True), ("1.0.1", False),
                                             ("weird-1", True), ("weird-2", False)])
def test_versions_lists(version, listed):
    index = PackageIndex().updated([entry("PyPI", "pkg", versions=["1.0.0", "weird-1"])])
    assert bool(index.advisories("PyPI", "pkg", version)) is listed


def test_what_cannot_be_read_is_listed():
    index = PackageIndex().updated([entry("npm", "a", ranges=[[("introduced", "1.0.0"), ("fixed", "2.0.0")]]),
                                    entry("npm", "b", versions=["1.0.0"])])
    assert index.advisories("npm", "a", "not-semver")            # a range, and a version no range can place
    assert not index.advisories("npm", "b", "not-semver")        # a list that does not name it
    assert index.advisories("npm", "b", None)                    # a tarball of a listed package, version unknown
    assert not index.advisories("npm", "c", None)                # no advisory names the package at all


def test_a_range_whose_end_cannot_be_read_stays_open():
    index = PackageIndex().updated([entry("npm", "a", ranges=[[("introduced", "1.0.0"), ("fixed", "garbage")]])])
    assert index.advisories("npm", "a", "9.0.0") and not index.advisories("npm", "a", "0.9.0")


def test_exceptions_clear_one_version_and_can_be_withdrawn():
    index = PackageIndex().updated([TINYCOLOR], [("npm", "@ctrl/tinycolor", "4.1.0", False)])
    assert not index.advisories("npm", "@ctrl/tinycolor", "4.1.0")
    assert not index.advisories("npm", "@ctrl/tinycolor", "v4.1.0")
    assert index.advisories("npm", "@ctrl/tinycolor", "4.1.1")
    assert index.advisories("npm", "@ctrl/tinycolor", None)        # an unknown version is never excepted
    back = index.updated(exceptions=[("npm", "@ctrl/tinycolor", "4.1.0", True)])
    assert back.advisories("npm", "@ctrl/tinycolor", "4.1.0")
    assert not index.advisories("npm", "@ctrl/tinycolor", "4.1.0")  # copy on write: the old index is unchanged


def test_updates_replace_and_withdraw_advisories():
    index = PackageIndex().updated([entry("PyPI", "x", versions=["1.0"]), entry("PyPI", "x", versions=["2.0"],
                                                                                advisory="MAL-2")])
    assert [a.id for a in index.advisories("PyPI", "x", "1.0")] == ["MAL-1"]
    assert index.advisories("PyPI", "x", "1.0")                     # compiled and cached
    newer = index.updated([entry("PyPI", "x", versions=["3.0"])])   # MAL-1 re-published with other versions
    assert not newer.advisories("PyPI", "x", "1.0") and newer.advisories("PyPI", "x", "3.0")
    gone = newer.updated([entry("PyPI", "x", withdrawn=True), entry("PyPI", "x", advisory="MAL-2", withdrawn=True)])
    assert not gone.listed("PyPI", "x") and len(gone) == 0 and len(newer) == 2


# -- the index against a plain reading of OSV's algorithm --------------------------------------------------------

def osv_affected(version: str, ranges, versions) -> bool:
    """OSV's reference: any range includes it (events in version order), or it is listed."""
    v = version_key("npm", version)
    if any(version_key("npm", x) == v for x in versions):
        return True
    for events in ranges:
        ordered = sorted(events, key=lambda e: (0, 0, 0) if e[1] == "0" else version_key("npm", e[1]).to_tuple()[:3])
        affected = False
        for kind, at in ordered:
            key = None if at == "0" else version_key("npm", at)
            if kind == "introduced" and (key is None or key <= v):
                affected = True
            elif kind == "fixed" and key <= v:
                affected = False
            elif kind == "last_affected" and key < v:
                affected = False
        if affected:
            return True
    return False


semvers = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)).map(lambda t: "%d.%d.%d" % t)


@given(st.lists(st.tuples(semvers, st.one_of(st.none(), st.tuples(st.sampled_from(["fixed", "last_affected"]),
                                                                   semvers))), max_size=3),
       st.lists(semvers, max_size=3), semvers, st.booleans())
def test_the_index_agrees_with_osv(raw_ranges, versions, probe, from_zero):
    ranges = []
    for start, end in raw_ranges:
        events = [("introduced", "0" if from_zero else start)]
        if end is not None and (from_zero or version_key("npm", end[1]) > version_key("npm", start)):
            events.append(end)
        ranges.append(events)
    index = PackageIndex().updated([entry("npm", "p", ranges=ranges, versions=versions)])
    assert bool(index.advisories("npm", "p", probe)) == osv_affected(probe, ranges, versions)
