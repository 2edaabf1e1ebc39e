"""Which registry requests are package downloads, and which may fetch an index document. Pure.

A registry host serves one or more ecosystems: the public ones (`DEFAULT_REGISTRIES`) and the site's mirrors
(`egress.package_registries`). URL shapes are read from the path, never from a fixed prefix, so a mirror's own
prefix (Artifactory `/artifactory/api/pypi/REPO/...`, Nexus `/repository/REPO/...`, devpi `/root/pypi/+f/...`,
GitLab `/api/v4/projects/ID/packages/...`, Verdaccio) changes nothing:

- PyPI: a path whose last segment is a distribution file (`.whl`, `.tar.gz`, `.zip`, `.tar.bz2`, `.tar.xz`,
  `.tgz`, `.tar`, `.egg`) is a download; name and version come from the file name (PEP 427 wheels; PEP 625
  sdists, and every split of a legacy sdist name at a hyphen whose right side is a version, so no reading of an
  ambiguous name misses a listed version).
- npm: a path with a `-` segment followed by a `.tgz` file is a tarball: the package is the one or two segments
  (`@scope/name`, or `@scope%2fname`) before the `-`; the version is the file name after the unscoped name and a
  hyphen, or its trailing SemVer.
Paths are percent-decoded once and their dot segments resolved (as a server would) before reading.
Anything else on a registry host may be an index document (PyPI simple HTML or JSON, the JSON API, an npm
packument or version manifest): its candidate names are the path's segments (and scoped pairs).
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Iterable, Mapping
from urllib.parse import unquote

from gateway.packages.versions import NPM, PYPI, normalise_name, version_key

DEFAULT_REGISTRIES: tuple[tuple[str, str], ...] = (
    ("pypi.org", PYPI), ("files.pythonhosted.org", PYPI), ("test.pypi.org", PYPI),
    ("test-files.pythonhosted.org", PYPI), ("registry.npmjs.org", NPM), ("registry.yarnpkg.com", NPM),
)
SDIST_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".zip", ".tar")
_TRAILING_SEMVER = re.compile(r"-v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$")


@dataclass(frozen=True)
class Download:
    """A package file: every (name, version) it may be read as; version None = a version that cannot be read."""

    ecosystem: str
    readings: tuple[tuple[str, str | None], ...]
    filename: str


def registries_for(entries: Iterable[Mapping[str, str]], defaults: bool = True) -> dict[str, tuple[str, ...]]:
    """host -> ecosystems, from the defaults and `egress.package_registries` entries ({"host", "ecosystem"})."""
    out: dict[str, list[str]] = {}
    pairs = list(DEFAULT_REGISTRIES if defaults else ()) + [(e["host"], e["ecosystem"]) for e in entries]
    for host, eco in pairs:
        if eco not in out.setdefault(host, []):
            out[host].append(eco)
    return {h: tuple(e) for h, e in out.items()}


def path_segments(path: str) -> list[str]:
    """The path without its query, percent-decoded once, dot segments resolved; its non-empty segments."""
    raw = unquote(path.split("?", 1)[0].split("#", 1)[0], errors="replace")
    norm = posixpath.normpath("/" + raw.replace("\\", "/"))
    return [s for s in norm.split("/") if s and s != "."]


def _pypi_readings(filename: str) -> list[tuple[str, str | None]]:
    lower = filename.lower()
    readings: list[tuple[str, str | None]] = []
    if lower.endswith((".whl", ".egg")):
        # PEP 427: NAME-VERSION(-BUILD)?-PY-ABI-PLATFORM.whl, the name's hyphens escaped: name and version are the
        # first two fields (the tags need not be read to know the package). Eggs: NAME-VERSION(-pyX.Y...).egg.
        parts = filename[:-4].split("-")
        return [(parts[0], parts[1] if len(parts) > 1 else None)] if parts[0] else []
    stem = next((filename[:-len(s)] for s in SDIST_SUFFIXES if lower.endswith(s)), None)
    if stem is None:
        return []
    # Every split at a hyphen whose right side is a version: "foo-1.0-1" is (foo, 1.0-1) and (foo-1.0, 1). When no
    # split reads as a version, the last one, its version kept as text.
    for i, ch in enumerate(stem):
        if ch == "-" and 0 < i < len(stem) - 1 and version_key(PYPI, stem[i + 1:]) is not None:
            readings.append((stem[:i], stem[i + 1:]))
    if not readings:
        name, _, version = stem.rpartition("-")
        readings.append((name, version) if name else (stem, None))
    return readings


def _npm_download(segments: list[str]) -> Download | None:
    if "-" not in segments[:-1] or not segments[-1].lower().endswith((".tgz", ".tar.gz")):
        return None
    dash = max(i for i, s in enumerate(segments[:-1]) if s == "-")
    if dash == 0:
        return None
    name = f"{segments[dash - 2]}/{segments[dash - 1]}" if dash >= 2 and segments[dash - 2].startswith("@") \
        else segments[dash - 1]
    filename = segments[-1]
    stem = filename[:-4] if filename.lower().endswith(".tgz") else filename[:-7]
    base = name.rsplit("/", 1)[-1]
    versions: list[str | None] = []
    if stem.lower().startswith(base.lower() + "-") and len(stem) > len(base) + 1:
        versions.append(stem[len(base) + 1:])
    trailing = _TRAILING_SEMVER.search(stem)
    if trailing and trailing.group(1) not in versions:
        versions.append(trailing.group(1))
    if not any(v is not None and version_key(NPM, v) is not None for v in versions):
        versions.append(None)            # the tarball of this package, its version unreadable
    try:
        norm = normalise_name(NPM, name)
    except ValueError:
        return None
    return Download(NPM, tuple((norm, v) for v in versions), filename)


def download_of(ecosystem: str, path: str) -> Download | None:
    """The package file a GET of `path` on a registry of `ecosystem` fetches, or None."""
    segments = path_segments(path)
    if not segments:
        return None
    if ecosystem == NPM:
        return _npm_download(segments)
    readings = []
    for name, version in _pypi_readings(segments[-1]):
        try:
            norm = normalise_name(PYPI, name)
        except ValueError:
            continue
        readings.append((norm, version))
    return Download(PYPI, tuple(readings), segments[-1]) if readings else None


def candidate_names(ecosystem: str, path: str) -> set[str]:
    """Names an index document at `path` may be about: every segment (and, for npm, every `@scope/name` pair)."""
    segments = path_segments(path)
    raw = list(segments)
    if ecosystem == NPM:
        raw += [f"{a}/{b}" for a, b in zip(segments, segments[1:]) if a.startswith("@")]
    out = set()
    for text in raw:
        try:
            out.add(normalise_name(ecosystem, text))
        except ValueError:
            continue
    return out
