"""Registry URL shapes: package downloads (PyPI files, npm tarballs) on public hosts and mirrors, and the names an
index document may be about. Other spellings of the same file (percent-encoding, dot segments, scopes) read the
same."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.packages.urls import candidate_names, download_of, path_segments, registries_for


@pytest.mark.parametrize("path, readings", [
    ("/packages/ab/cd/ef/requests-2.31.0-py3-none-any.whl", [("requests", "2.31.0")]),
    ("/packages/ab/cd/ef/Requests-2.31.0-py3-none-any.whl?x=1#frag", [("requests", "2.31.0")]),
    ("/packages/ab/zope.interface-6.0-cp312-cp312-manylinux_2_17_x86_64.whl", [("zope-interface", "6.0")]),
    ("/packages/x/foo_bar-1.0-1-py3-none-any.whl", [("foo-bar", "1.0")]),             # a build tag
    ("/packages/source/r/requests/requests-2.31.0.tar.gz", [("requests", "2.31.0")]),
    ("/packages/source/p/python-dateutil/python-dateutil-2.8.2.tar.gz", [("python-dateutil", "2.8.2")]),
    ("/packages/x/my_pkg-1.0.zip", [("my-pkg", "1.0")]),
    ("/packages/x/Old-Pkg-0.1.tar.bz2", [("old-pkg", "0.1")]),
    ("/packages/x/foo-1.0-1.tar.gz", [("foo", "1.0-1"), ("foo-1-0", "1")]),           # every reading
    ("/packages/x/thing-0.5-py2.7.egg", [("thing", "0.5")]),
    ("/packages/x/Thing-0.5.TAR.GZ", [("thing", "0.5")]),
    ("/packages/x/%33web_py-1.0.0.tar.gz", [("3web-py", "1.0.0")]),                   # percent-encoded
    ("/packages/x/../y/./3web_py-1.0.0.tar.gz", [("3web-py", "1.0.0")]),
    ("/artifactory/api/pypi/remote/packages/packages/aa/bb/evil-1.0-py3-none-any.whl", [("evil", "1.0")]),
    ("/repository/pypi-proxy/packages/evil/1.0/evil-1.0.tar.gz", [("evil", "1.0")]),
    ("/root/pypi/+f/abc/def/evil-1.0.tar.gz", [("evil", "1.0")]),
    ("/packages/x/noversion.tar.gz", [("noversion", None)]),
    ("/packages/x/name-notaversion.tar.gz", [("name", "notaversion")]),
])
def test_pypi_downloads(path, readings):
    found = download_of("PyPI", path)
    assert found is not None and list(found.readings) == readings


@pytest.mark.parametrize("path", ["/simple/requests/", "/pypi/requests/json", "/packages/x/requests-2.0.whl.metadata",
                                  "/", "", "/packages/x/file.txt"])
def test_pypi_non_downloads(path):
    assert download_of("PyPI", path) is None


@pytest.mark.parametrize("path, readings", [
    ("/@ctrl/tinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/@ctrl%2ftinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/@ctrl%2Ftinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/%40ctrl%2Ftinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/@CTRL/TinyColor/-/TinyColor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/lodash/-/lodash-4.17.21.tgz", [("lodash", "4.17.21")]),
    ("/left-pad/-/left-pad-1.3.0-beta.2+b.tgz", [("left-pad", "1.3.0-beta.2+b")]),
    ("//lodash//-//lodash-4.17.21.tgz", [("lodash", "4.17.21")]),
    ("/x/../lodash/-/lodash-4.17.21.tgz?cache=no", [("lodash", "4.17.21")]),
    ("/artifactory/api/npm/npm-remote/@ctrl/tinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/repository/npm-proxy/@ctrl/tinycolor/-/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/api/v4/projects/7/packages/npm/@ctrl/tinycolor/-/@ctrl/tinycolor-4.1.1.tgz", [("@ctrl/tinycolor", "4.1.1")]),
    ("/lodash/-/other-name-4.17.21.tgz", [("lodash", "4.17.21")]),         # the trailing SemVer
    ("/lodash/-/lodash-latest.tgz", [("lodash", "latest"), ("lodash", None)]),
])
def test_npm_tarballs(path, readings):
    found = download_of("npm", path)
    assert found is not None and list(found.readings) == readings


@pytest.mark.parametrize("path", ["/lodash", "/@ctrl%2ftinycolor", "/-/v1/search", "/-/x.tgz", "/lodash/-/"])
def test_npm_non_tarballs(path):
    assert download_of("npm", path) is None


def test_candidate_names_cover_the_shapes_of_index_documents():
    assert "requests" in candidate_names("PyPI", "/simple/Requests/")
    assert "zope-interface" in candidate_names("PyPI", "/artifactory/api/pypi/remote/simple/zope.interface/")
    assert "@ctrl/tinycolor" in candidate_names("npm", "/@ctrl%2ftinycolor")
    assert "@ctrl/tinycolor" in candidate_names("npm", "/npm-remote/@ctrl/tinycolor/4.1.1")
    assert "lodash" in candidate_names("npm", "/lodash/latest")


def test_registries_merge_defaults_and_mirrors():
    regs = registries_for([{"host": "art.corp", "ecosystem": "PyPI"}, {"host": "art.corp", "ecosystem": "npm"},
                           {"host": "pypi.org", "ecosystem": "PyPI"}])
    assert regs["art.corp"] == ("PyPI", "npm") and regs["pypi.org"] == ("PyPI",)
    assert regs["registry.npmjs.org"] == ("npm",) and regs["files.pythonhosted.org"] == ("PyPI",)


@given(st.text(max_size=80))
def test_any_path_reads_without_raising(path):
    path_segments(path)
    for eco in ("PyPI", "npm"):
        download_of(eco, path)
        candidate_names(eco, path)
