"""Index documents rewritten so that resolvers never pick a malicious version. Pure: bytes in, bytes out.

- PyPI simple HTML (PEP 503): each `<a>` whose file (the href's last path segment, as pip reads it, or the
  anchor's text) is a listed version gets `data-yanked="REASON"` (PEP 592): pip skips it unless pinned with `==`,
  and prints the reason when it is.
- PyPI simple JSON (PEP 691): such a file's `yanked` becomes the reason. The JSON API (`/pypi/NAME/json`): its
  files get `yanked` and `yanked_reason`, and `info` too when it describes a listed version.
- npm packuments (full and abbreviated): each listed version gets `deprecated` = the reason; every dist-tag
  pointing at one moves to the newest clean version (a stable one for a stable tag), or is removed when there
  is none. A single version manifest gets `deprecated` too.
`lookup(name, version)` answers the advisories of a (raw) name and version; None from a rewriter = unchanged.
"""
from __future__ import annotations

import html
import json
import posixpath
from html.parser import HTMLParser
from typing import Any, Callable, Sequence
from urllib.parse import unquote, urlsplit

from gateway.packages.index import Advisory
from gateway.packages.urls import download_of
from gateway.packages.versions import NPM, PYPI, is_prerelease, version_key

Lookup = Callable[[str, "str | None"], Sequence[Advisory]]     # (name, version) -> advisories (name raw)
REASON_MAX = 300


def reason_for(name: str, version: str | None, advisories: Sequence[Advisory]) -> str:
    ids = ", ".join(a.id for a in advisories)
    what = f"{name} {version}" if version else name
    return f"sandgate: {what} is a known malicious package ({ids})"[:REASON_MAX]


def file_advisories(filename: str, lookup: Lookup) -> tuple[str, Sequence[Advisory]] | None:
    """(reason, advisories) when a PyPI file name reads as a listed version, else None."""
    download = download_of(PYPI, "/" + filename.replace("/", "%2F"))
    if download is None:
        return None
    for name, version in download.readings:
        found = lookup(name, version)
        if found:
            return reason_for(name, version, found), found
    return None


# -- PyPI simple HTML --------------------------------------------------------------------------------------------

class _Anchors(HTMLParser):
    """Start tags of `<a>` elements: (offset, raw tag text, attributes, text inside)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[list[Any]] = []
        self._open: list[Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            line, col = self.getpos()
            self._open = [line, col, self.get_starttag_text() or "", attrs, ""]
            self.anchors.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[4] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def _href_filename(href: str) -> str:
    try:
        return posixpath.basename(unquote(urlsplit(href).path))
    except ValueError:
        return ""


def _yanked_tag(attrs: list[tuple[str, str | None]], reason: str) -> str:
    parts = ["<a"]
    for name, value in attrs:
        if name == "data-yanked":
            continue
        parts.append(f" {name}" if value is None else f' {name}="{html.escape(value, quote=True)}"')
    parts.append(f' data-yanked="{html.escape(reason, quote=True)}">')
    return "".join(parts)


def _line_starts(text: str) -> list[int]:
    """Offsets of each line's start, lines counted by "\\n" as HTMLParser.getpos counts them."""
    starts, at = [0], text.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


def rewrite_simple_html(body: bytes, lookup: Lookup) -> bytes | None:
    text = body.decode("utf-8", "surrogateescape")
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    if not parser.anchors:
        return None
    starts = _line_starts(text)
    edits = []
    for line, col, raw, attrs, inner in parser.anchors:
        href = next((v for k, v in attrs if k == "href" and v), "")
        hit = None
        for filename in {_href_filename(href), inner.strip()}:
            if filename:
                hit = hit or file_advisories(filename, lookup)
        if hit is not None and raw:
            offset = starts[line - 1] + col
            if text.startswith(raw, offset):
                edits.append((offset, len(raw), _yanked_tag(attrs, hit[0])))
    if not edits:
        return None
    out, last = [], 0
    for offset, length, tag in edits:
        out += [text[last:offset], tag]
        last = offset + length
    out.append(text[last:])
    return "".join(out).encode("utf-8", "surrogateescape")


# -- PyPI JSON ---------------------------------------------------------------------------------------------------

def _file_hit(item: dict, lookup: Lookup) -> tuple[str, Sequence[Advisory]] | None:
    names = {str(item.get("filename") or ""), _href_filename(str(item.get("url") or ""))}
    for filename in sorted(n for n in names if n):
        hit = file_advisories(filename, lookup)
        if hit is not None:
            return hit
    return None


def rewrite_pypi_json(doc: Any, lookup: Lookup) -> bool:
    """PEP 691 `files` and the JSON API's `releases` / `urls` / `info`, in place; whether anything changed."""
    if not isinstance(doc, dict):
        return False
    changed = False
    if isinstance(doc.get("files"), list):                       # PEP 691
        for item in doc["files"]:
            if isinstance(item, dict) and (hit := _file_hit(item, lookup)) is not None:
                item["yanked"] = hit[0]
                changed = True
    groups = list(doc["releases"].values()) if isinstance(doc.get("releases"), dict) else []
    if isinstance(doc.get("urls"), list):
        groups.append(doc["urls"])
    for files in groups:
        for item in files if isinstance(files, list) else []:
            if isinstance(item, dict) and (hit := _file_hit(item, lookup)) is not None:
                item["yanked"], item["yanked_reason"] = True, hit[0]
                changed = True
    info = doc.get("info")
    if isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str):
        found = lookup(info["name"], info["version"])
        if found:
            info["yanked"], info["yanked_reason"] = True, reason_for(info["name"], info["version"], found)
            changed = True
    return changed


# -- npm -----------------------------------------------------------------------------------------------------------

def rewrite_npm(doc: Any, lookup: Lookup) -> bool:
    """A packument (full or abbreviated) or one version's manifest, in place; whether anything changed."""
    if not isinstance(doc, dict):
        return False
    versions = doc.get("versions")
    if not isinstance(versions, dict):
        name, version = doc.get("name"), doc.get("version")
        if isinstance(name, str) and isinstance(version, str) and (found := lookup(name, version)):
            doc["deprecated"] = reason_for(name, version, found)
            return True
        return False
    doc_name = doc.get("name") if isinstance(doc.get("name"), str) else None
    bad: set[str] = set()
    for version, manifest in versions.items():
        names = {n for n in (doc_name, manifest.get("name") if isinstance(manifest, dict) else None)
                 if isinstance(n, str)}
        for name in sorted(names):
            found = lookup(name, version)
            if found:
                bad.add(version)
                if isinstance(manifest, dict):
                    manifest["deprecated"] = reason_for(name, version, found)
                break
    tags = doc.get("dist-tags")
    if isinstance(tags, dict):
        clean = sorted(((k, v) for v in versions if v not in bad and (k := version_key(NPM, v)) is not None),
                       key=lambda kv: kv[0])
        for tag, target in list(tags.items()):
            if target not in bad:
                continue
            stable = not is_prerelease(NPM, version_key(NPM, str(target)))
            choice = [v for k, v in clean if not (stable and is_prerelease(NPM, k))] or [v for _, v in clean]
            if choice:
                tags[tag] = choice[-1]
            else:
                del tags[tag]
    return bool(bad)


def rewrite_document(ecosystem: str, content_type: str, body: bytes, lookup: Lookup) -> bytes | None:
    """The rewritten document, or None when it is not one sandgate reads or nothing in it is listed."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ecosystem == PYPI and ctype in ("text/html", "application/vnd.pypi.simple.v1+html", "application/xhtml+xml"):
        return rewrite_simple_html(body, lookup)
    if not (ctype.endswith("json") or ctype.endswith("+json")):
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    changed = rewrite_npm(doc, lookup) if ecosystem == NPM else rewrite_pypi_json(doc, lookup)
    if not changed:
        return None
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
