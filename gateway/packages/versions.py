"""Package versions and names per ecosystem, as pure functions.

PyPI: PEP 440 versions (`packaging.version`), PEP 503 names (`packaging.utils.canonicalize_name`). npm: SemVer 2.0
precedence (`semver`, python-semver: what OSV's SEMVER ranges and the npm registry use; build metadata is ignored
in comparisons), names lower-cased with their scope (`@scope/name`), `%2f` / `%40` decoded. A version that does
not parse has no key: callers decide what that means (the index treats it as unknowable, hence affected, for a
package with advisories).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import semver
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

PYPI, NPM = "PyPI", "npm"
ECOSYSTEMS = (PYPI, NPM)
_BY_LOWER = {e.lower(): e for e in ECOSYSTEMS}
_NPM_LOOSE = re.compile(r"^\s*[v=]*\s*")
_SPACE = re.compile(r"\s")


def parse_ecosystem(text: str) -> str:
    """'pypi' / 'PyPI' -> 'PyPI', 'npm' -> 'npm'; ValueError for any other."""
    eco = _BY_LOWER.get(str(text).strip().lower())
    if eco is None:
        raise ValueError(f"unknown ecosystem {text!r} (PyPI or npm)")
    return eco


def normalise_name(ecosystem: str, name: str) -> str:
    """The name as the index keys it: PEP 503 for PyPI; for npm lower case, scope kept, `%2f`/`%40` decoded."""
    text = str(name).strip()
    if ecosystem == PYPI:
        out = canonicalize_name(text)
    elif ecosystem == NPM:
        out = unquote(text).strip().lower()
    else:
        raise ValueError(f"unknown ecosystem {ecosystem!r}")
    if not out or _SPACE.search(out):
        raise ValueError(f"not a package name: {name!r}")
    return out


@lru_cache(maxsize=65536)
def version_key(ecosystem: str, text: str) -> Any:
    """A comparable key of the version, or None when it does not parse in the ecosystem's scheme."""
    if ecosystem == PYPI:
        try:
            return Version(text)
        except InvalidVersion:
            return None
    try:
        return semver.Version.parse(_NPM_LOOSE.sub("", text).strip())
    except (ValueError, TypeError):
        return None


def canonical_version(ecosystem: str, text: str) -> str:
    """The version spelled canonically (PEP 440 normal form; SemVer without a leading v or =); text that does not
    parse is kept as given (trimmed)."""
    key = version_key(ecosystem, str(text).strip())
    if key is None:
        return str(text).strip()
    if ecosystem == NPM:
        return str(key.replace(build=None))
    return str(key)


def is_prerelease(ecosystem: str, key: Any) -> bool:
    if key is None:
        return False
    return bool(key.is_prerelease) if ecosystem == PYPI else key.prerelease is not None
