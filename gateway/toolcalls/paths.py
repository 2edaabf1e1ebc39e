"""Path words -> path facts for the tool-call policy (`describe_path`). Pure: no file system access.

Paths are anchored against the working directory and normalised, never expanded: `~`, `$HOME` and `${HOME}`
stay a home marker ("~/x"), and a path with any other expansion is "dynamic" (unknown before it runs).
"""
from __future__ import annotations

import posixpath
import re

_HOME = re.compile(r"(~[A-Za-z0-9._-]*|\$HOME|\$\{HOME\})(?=/|$)")
_CWD = re.compile(r"(\$PWD|\$\{PWD\})(?=/|$)")
_HOME_DIR = re.compile(r"/(root|home/[^/]+|Users/[^/]+)(?=/|$)")


def _clean_dir(path: str) -> str:
    path = posixpath.normpath(path or "/")
    return "/" + path.lstrip("/") if path.startswith("/") else path


def _resolve(raw: str, cwd: str | None) -> str | None:
    """raw as an anchored path ("/..." or "~..."), or None when it cannot be known before it runs."""
    match = _HOME.match(raw)
    if match:
        marker = match.group(1)
        raw = ("~" if marker.startswith("$") else marker) + raw[match.end():]
    else:
        cwd_match = _CWD.match(raw)
        if cwd_match:
            if cwd is None:
                return None
            raw = cwd + raw[cwd_match.end():]
    if not raw or "$" in raw or "`" in raw:
        return None
    if raw.startswith(("/", "~")):
        return raw
    return None if cwd is None else cwd.rstrip("/") + "/" + raw


def _normalize(anchored: str) -> str:
    if anchored.startswith("~"):
        head, _, rest = anchored.partition("/")
        rest = posixpath.normpath(rest) if rest else "."
        return head if rest == "." else f"{head}/{rest}"
    return _clean_dir(anchored)


def _resolve_dir(raw: str, cwd: str | None) -> str | None:
    anchored = _resolve(raw, cwd)
    return None if anchored is None else _normalize(anchored)


def describe_path(raw: str, cwd: str | None, workspace: str) -> dict:
    """Facts about one path word: {"raw", "normalized", "in_workspace", "is_root", "is_home",
    "is_workspace_parent", "dynamic", "glob"}. `~`, `$HOME`, `${HOME}` stay a home marker ("~/x");
    home is never assumed to be inside the workspace. A path with other expansions is "dynamic" (unknown)."""
    workspace = _clean_dir(workspace)
    anchored = _resolve(raw, cwd)
    info = {"raw": raw, "normalized": "", "in_workspace": False, "is_root": False, "is_home": False,
            "is_workspace_parent": False, "dynamic": anchored is None, "glob": bool(re.search(r"[*?\[]", raw))}
    if anchored is None:
        return info
    norm = _normalize(anchored)
    info["normalized"] = norm
    if norm.startswith("~"):
        info["is_home"] = "/" not in norm
        # home is unknown: if the workspace lies in a home directory, ~/x may be inside it -> unknown
        info["dynamic"] = not info["is_home"] and bool(_HOME_DIR.match(workspace))
        return info
    info["is_root"] = norm == "/"
    info["is_home"] = bool(_HOME_DIR.fullmatch(norm))
    info["in_workspace"] = norm == workspace or norm.startswith(workspace.rstrip("/") + "/")
    info["is_workspace_parent"] = norm != workspace and (norm == "/" or workspace.startswith(norm + "/"))
    return info
