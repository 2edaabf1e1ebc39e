"""OSV records read into index entries: ecosystems, names, ranges and versions as published."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.packages.osv import entries_from, entries_of
from gateway.packages.sources import BUILTIN, ReadReport, builtin_records, read_records

SAMPLE = Path("/work/shared/osv-sample")


def test_the_shipped_records_are_the_real_ones():
    records = {r["id"]: r for r in builtin_records()}
    assert set(records) >= {"MAL-2025-47141", "MAL-2024-9934"}
    tiny = entries_of(records["MAL-2025-47141"])
    assert [(e.ecosystem, e.name) for e in tiny] == [("npm", "@ctrl/tinycolor")]
    assert json.loads(tiny[0].affected_json)["r"] == [[["introduced", "0"]],
                                                      [["introduced", "4.1.1"], ["last_affected", "4.1.2"]]]
    web = entries_of(records["MAL-2024-9934"])
    assert [(e.ecosystem, e.name, json.loads(e.affected_json)["v"]) for e in web] == [("PyPI", "3web-py", ["1.0.0"])]


def test_records_keep_pypi_and_npm_only_and_normalise_names():
    record = {"id": "MAL-1", "summary": "  two\n words  ", "affected": [
        {"package": {"ecosystem": "PyPI", "name": "Foo_Bar"}, "versions": ["1.0"]},
        {"package": {"ecosystem": "npm", "name": "@Scope/Pkg"}, "ranges": [
            {"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "1.0.5"}]},
            {"type": "GIT", "repo": "x", "events": [{"introduced": "abc"}]}]},
        {"package": {"ecosystem": "crates.io", "name": "x"}, "versions": ["1"]},
        {"package": {"ecosystem": "Maven", "name": "a:b"}},
        "not an object",
    ]}
    entries = {(e.ecosystem, e.name): e for e in entries_of(record)}
    assert set(entries) == {("PyPI", "foo-bar"), ("npm", "@scope/pkg")}
    assert json.loads(entries[("npm", "@scope/pkg")].affected_json) == {
        "r": [[["introduced", "1.0.0"], ["fixed", "1.0.5"]]], "v": []}
    assert entries[("PyPI", "foo-bar")].summary == "two words"


def test_an_entry_with_neither_ranges_nor_versions_names_every_version():
    (entry,) = entries_of({"id": "MAL-2", "affected": [{"package": {"ecosystem": "npm", "name": "x"}}]})
    assert json.loads(entry.affected_json) == {"r": [[["introduced", "0"]]], "v": []}


def test_withdrawn_records_are_marked():
    (entry,) = entries_of({"id": "MAL-3", "withdrawn": "2025-01-01T00:00:00Z",
                           "affected": [{"package": {"ecosystem": "PyPI", "name": "x"}, "versions": ["1"]}]})
    assert entry.withdrawn


@pytest.mark.parametrize("record", [None, [], {"affected": []}, {"id": ""}, {"id": 5}])
def test_what_is_not_an_osv_record_is_counted(record):
    with pytest.raises(ValueError):
        entries_of(record)
    assert entries_from([record]) == ([], 1)


def test_the_same_package_twice_in_one_record_is_one_entry_with_both():
    record = {"id": "MAL-4", "affected": [
        {"package": {"ecosystem": "PyPI", "name": "x"}, "versions": ["1.0"]},
        {"package": {"ecosystem": "PyPI", "name": "X"}, "versions": ["2.0"]}]}
    (entry,) = entries_of(record)
    assert json.loads(entry.affected_json)["v"] == ["1.0", "2.0"]


def test_sources_read_files_directories_and_zips(tmp_path):
    import zipfile

    one = tmp_path / "one.json"
    one.write_text(json.dumps({"id": "MAL-A"}))
    many = tmp_path / "dir" / "sub"
    many.mkdir(parents=True)
    (many / "b.json").write_text(json.dumps([{"id": "MAL-B"}, {"id": "MAL-C"}]))
    (many / "bad.json").write_text("{not json")
    (many / "notes.txt").write_text("ignored")
    archive = tmp_path / "all.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("osv/malicious/npm/x/MAL-D.json", json.dumps({"id": "MAL-D"}))
        zf.writestr("README.md", "ignored")
    report = ReadReport()
    ids = [r["id"] for r in read_records([str(one), str(tmp_path / "dir"), str(archive)], report)]
    assert ids == ["MAL-A", "MAL-B", "MAL-C", "MAL-D"]
    assert report.files == 4 and len(report.skipped) == 1 and "bad.json: not JSON" in report.skipped[0]
    with pytest.raises(OSError):
        list(read_records([str(tmp_path / "missing")], ReadReport()))


def test_the_shipped_sample_matches_the_shared_one():
    if not SAMPLE.is_dir():
        pytest.skip("the shared sample is not on this machine")
    shared = {p.name: p.read_bytes() for p in SAMPLE.rglob("*.json")}
    shipped = {p.name: p.read_bytes() for p in BUILTIN.rglob("*.json")}
    assert shipped == shared
