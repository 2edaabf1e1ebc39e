"""Versions and names per ecosystem: PEP 440 / PEP 503 for PyPI, SemVer / npm scopes for npm."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gateway.packages.versions import canonical_version, normalise_name, parse_ecosystem, version_key


@pytest.mark.parametrize("text, eco", [("pypi", "PyPI"), ("PyPI", "PyPI"), (" PYPI ", "PyPI"), ("npm", "npm"),
                                       ("NPM", "npm")])
def test_ecosystems(text, eco):
    assert parse_ecosystem(text) == eco


@pytest.mark.parametrize("text", ["", "maven", "crates.io", "pypi2", "Go"])
def test_unknown_ecosystems_are_refused(text):
    with pytest.raises(ValueError):
        parse_ecosystem(text)


@pytest.mark.parametrize("eco, raw, norm", [
    ("PyPI", "Django", "django"), ("PyPI", "zope.interface", "zope-interface"), ("PyPI", "Foo__Bar-.baz", "foo-bar-baz"),
    ("PyPI", "3web_py", "3web-py"), ("PyPI", " requests ", "requests"),
    ("npm", "@CTRL/TinyColor", "@ctrl/tinycolor"), ("npm", "@ctrl%2ftinycolor", "@ctrl/tinycolor"),
    ("npm", "%40ctrl%2Ftinycolor", "@ctrl/tinycolor"), ("npm", "JSONStream", "jsonstream"),
])
def test_names_are_normalised(eco, raw, norm):
    assert normalise_name(eco, raw) == norm


@pytest.mark.parametrize("eco, raw", [("PyPI", ""), ("npm", "  "), ("npm", "a b")])
def test_names_that_are_not_names(eco, raw):
    with pytest.raises(ValueError):
        normalise_name(eco, raw)


@pytest.mark.parametrize("eco, a, b", [
    ("PyPI", "1.0", "1.0.0"), ("PyPI", "1.0.0", "1.0.0.0"), ("PyPI", "1.0-1", "1.0.post1"), ("PyPI", "1.0RC1", "1.0rc1"),
    ("PyPI", "v2.0", "2.0"), ("npm", "1.2.3", "v1.2.3"), ("npm", "1.2.3", "=1.2.3"), ("npm", "1.2.3+build.7", "1.2.3"),
])
def test_equal_versions(eco, a, b):
    assert version_key(eco, a) == version_key(eco, b)
    assert hash(version_key(eco, a)) == hash(version_key(eco, b))     # a set of keys finds either spelling
    if "1.0.0" not in (a, b):                                           # PEP 440 keeps trailing zeros in its text
        assert canonical_version(eco, a) == canonical_version(eco, b)


@pytest.mark.parametrize("eco, lower, higher", [
    ("PyPI", "1.0rc1", "1.0"), ("PyPI", "1.0", "1.0.post1"), ("PyPI", "1.0.dev1", "1.0a1"), ("PyPI", "2.0", "1!0.1"),
    ("npm", "1.0.0-rc.1", "1.0.0"), ("npm", "1.0.0-alpha", "1.0.0-alpha.1"), ("npm", "1.9.0", "1.10.0"),
    ("npm", "0.0.1", "0.1.0"),
])
def test_version_order(eco, lower, higher):
    assert version_key(eco, lower) < version_key(eco, higher)


@pytest.mark.parametrize("eco, text", [("PyPI", "not a version"), ("PyPI", ""), ("npm", "1.0"), ("npm", "latest"),
                                       ("npm", "")])
def test_versions_that_do_not_parse_have_no_key(eco, text):
    assert version_key(eco, text) is None
    assert canonical_version(eco, text) == text.strip()


@given(st.text(max_size=30), st.sampled_from(["PyPI", "npm"]))
def test_reading_any_text_raises_only_value_error(text, eco):
    try:
        norm = normalise_name(eco, text)
    except ValueError:
        return
    assert normalise_name(eco, norm) == norm            # normalising is idempotent
    canonical_version(eco, text)
