"""Index documents rewritten: PyPI simple HTML (PEP 503/592), PEP 691 JSON, the JSON API, npm packuments (full,
abbreviated) and version manifests; dist-tags moved; what is not listed is left byte for byte."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, strategies as st

from gateway.packages.index import PackageIndex
from gateway.packages.osv import Entry
from gateway.packages.rewrite import rewrite_document
from gateway.packages.versions import normalise_name

INDEX = PackageIndex().updated([
    Entry("MAL-1", "PyPI", "evil-pkg", json.dumps({"r": [], "v": ["1.1"]}), "s", "", False),
    Entry("MAL-2", "npm", "@acme/w", json.dumps({"r": [[["introduced", "1.1.0"], ["fixed", "2.0.0"]]], "v": []}),
          "s", "", False),
])


def lookup(eco):
    return lambda name, version: INDEX.advisories(eco, normalise_name(eco, name), version)


class Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.found.append(dict(attrs))


def anchors(body: bytes) -> list[dict]:
    parser = Anchors()
    parser.feed(body.decode())
    return parser.found


PAGE = b"""<!DOCTYPE html>
<html><body>
<a href="https://files.example/p/evil_pkg-1.0-py3-none-any.whl#sha256=aa">evil_pkg-1.0-py3-none-any.whl</a><br>
<A HREF="../../packages/evil_pkg-1.1-py3-none-any.whl#sha256=bb" data-requires-python="&gt;=3.8">evil_pkg-1.1-py3-none-any.whl</A>
<a data-yanked="" href='/p/Evil.Pkg-1.1.tar.gz'>Evil.Pkg-1.1.tar.gz</a>
<a href="/p/evil-pkg-1.1.zip?x=&quot;y">other text</a>
</body></html>
"""


def test_simple_html_marks_listed_files_yanked_with_the_reason():
    out = rewrite_document("PyPI", "text/html; charset=utf-8", PAGE, lookup("PyPI"))
    found = anchors(out)
    reason = "sandgate: evil-pkg 1.1 is a known malicious package (MAL-1)"    # the name as PEP 503 spells it
    assert [a.get("data-yanked") for a in found] == [None, reason, reason, reason]
    assert found[1]["data-requires-python"] == ">=3.8" and found[1]["href"].endswith("#sha256=bb")
    assert found[3]["href"] == '/p/evil-pkg-1.1.zip?x="y'
    assert out.split(b"\n")[2] == PAGE.split(b"\n")[2]          # an anchor not listed: its bytes unchanged


def test_simple_html_without_listed_files_is_left_alone():
    page = b'<a href="x/evil_pkg-1.0.tar.gz">evil_pkg-1.0.tar.gz</a>'
    assert rewrite_document("PyPI", "text/html", page, lookup("PyPI")) is None
    assert rewrite_document("PyPI", "text/plain", PAGE, lookup("PyPI")) is None


def test_pep691_json_and_the_json_api():
    doc = {"meta": {"api-version": "1.1"}, "name": "evil-pkg", "files": [
        {"filename": "evil_pkg-1.0.tar.gz", "url": "https://f/evil_pkg-1.0.tar.gz", "hashes": {}},
        {"filename": "evil_pkg-1.1.tar.gz", "url": "https://f/evil_pkg-1.1.tar.gz", "hashes": {}, "yanked": False},
        {"filename": "renamed.tar.gz", "url": "https://f/evil_pkg-1.1-py3-none-any.whl", "hashes": {}}]}
    out = json.loads(rewrite_document("PyPI", "application/vnd.pypi.simple.v1+json", json.dumps(doc).encode(),
                                      lookup("PyPI")))
    assert [f.get("yanked") for f in out["files"]] == [
        None, "sandgate: evil-pkg 1.1 is a known malicious package (MAL-1)",
        "sandgate: evil-pkg 1.1 is a known malicious package (MAL-1)"]
    api = {"info": {"name": "evil-pkg", "version": "1.1", "yanked": False},
           "releases": {"1.0": [{"filename": "evil_pkg-1.0.tar.gz"}], "1.1": [{"filename": "evil_pkg-1.1.tar.gz"}]},
           "urls": [{"filename": "evil_pkg-1.1.tar.gz"}]}
    out = json.loads(rewrite_document("PyPI", "application/json", json.dumps(api).encode(), lookup("PyPI")))
    assert out["info"]["yanked"] is True and "MAL-1" in out["info"]["yanked_reason"]
    assert "yanked" not in out["releases"]["1.0"][0] and out["releases"]["1.1"][0]["yanked"] is True
    assert out["urls"][0]["yanked_reason"].endswith("(MAL-1)")


def packument(tags: dict, versions=("1.0.0", "1.1.0", "1.2.0", "2.0.0", "2.1.0-rc.1")) -> bytes:
    return json.dumps({"name": "@acme/w", "dist-tags": tags,
                       "versions": {v: {"name": "@acme/w", "version": v} for v in versions}}).encode()


@pytest.mark.parametrize("tags, versions, moved", [
    ({"latest": "1.2.0"}, None, {"latest": "2.0.0"}),
    ({"latest": "1.2.0", "legacy": "1.0.0"}, ("1.0.0", "1.1.0", "1.2.0"), {"latest": "1.0.0", "legacy": "1.0.0"}),
    ({"latest": "2.0.0", "beta": "1.1.0"}, None, {"latest": "2.0.0", "beta": "2.0.0"}),
    ({"latest": "1.1.0"}, ("1.1.0", "1.2.0"), {}),                          # nothing clean: the tag goes
    ({"next": "1.2.0"}, ("1.0.0", "1.2.0", "2.1.0-rc.1"), {"next": "1.0.0"}),  # a stable tag stays stable
])
def test_npm_dist_tags_move_to_the_newest_clean_version(tags, versions, moved):
    body = packument(tags, versions) if versions else packument(tags)
    out = json.loads(rewrite_document("npm", "application/json", body, lookup("npm")))
    assert out["dist-tags"] == moved
    listed = {v for v, m in out["versions"].items() if "deprecated" in m}
    assert listed == {v for v in out["versions"] if v in ("1.1.0", "1.2.0")}
    assert out["versions"]["1.2.0"]["deprecated"] == "sandgate: @acme/w 1.2.0 is a known malicious package (MAL-2)"


def test_npm_abbreviated_packument_and_version_manifest():
    abbreviated = json.dumps({"name": "@acme/w", "modified": "x", "dist-tags": {"latest": "1.1.0"},
                              "versions": {"1.0.0": {"name": "@acme/w", "version": "1.0.0", "dist": {}},
                                           "1.1.0": {"name": "@acme/w", "version": "1.1.0", "dist": {}}}}).encode()
    out = json.loads(rewrite_document("npm", "application/vnd.npm.install-v1+json", abbreviated, lookup("npm")))
    assert out["dist-tags"] == {"latest": "1.0.0"} and "deprecated" in out["versions"]["1.1.0"]
    manifest = json.dumps({"name": "@acme/w", "version": "1.1.0", "dist": {}}).encode()
    assert "MAL-2" in json.loads(rewrite_document("npm", "application/json", manifest, lookup("npm")))["deprecated"]


def test_npm_documents_of_clean_packages_are_left_alone():
    body = json.dumps({"name": "lodash", "dist-tags": {"latest": "4.0.0"}, "versions": {"4.0.0": {}}}).encode()
    assert rewrite_document("npm", "application/json", body, lookup("npm")) is None
    assert rewrite_document("npm", "application/json", b"{not json", lookup("npm")) is None
    assert rewrite_document("npm", "application/json", b"[1, 2]", lookup("npm")) is None


@given(st.binary(max_size=300), st.sampled_from(["text/html", "application/json", "application/vnd.pypi.simple.v1+json"]),
       st.sampled_from(["PyPI", "npm"]))
def test_any_document_rewrites_without_raising(body, ctype, eco):
    out = rewrite_document(eco, ctype, body, lookup(eco))
    assert out is None or isinstance(out, bytes)


@given(st.lists(st.sampled_from(["evil_pkg-1.0.tar.gz", "evil_pkg-1.1.tar.gz", "x-1.1.tar.gz", "<b>x</b>", "\n",
                                 "&amp;", "<a>", "</a>", "<a href=\"evil_pkg-1.1-py3-none-any.whl\">"]), max_size=8))
def test_html_rewrites_keep_everything_but_the_tags_they_mark(pieces):
    page = "".join(f'<a href="/p/{p}">{p}</a>\n' if p.endswith(".tar.gz") else p for p in pieces).encode()
    out = rewrite_document("PyPI", "text/html", page, lookup("PyPI"))
    if out is None:
        return
    assert re.sub(rb' data-yanked="sandgate: [^"]* is a known malicious package \(MAL-1\)"', b"", out) == page
