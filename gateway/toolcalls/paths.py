"""Path words -> path facts for the tool-call policy (`describe_path`). Pure: no file system access.

Paths are anchored against the working directory and normalised, never expanded: `~`, `$HOME` and `${HOME}`
stay a home marker ("~/x"), and a path with any other expansion is "dynamic" (unknown before it runs).
Symbolic links made earlier (in the command line or the session: `links`, link -> target) are followed, so a
path through a link that leaves the workspace is judged where it lands. A glob is judged by the directory it
expands in (`/*` wipes the root, `~/*` the home directory).
"""
from __future__ import annotations

import posixpath
import re

_HOME = re.compile(r"(~[A-Za-z0-9._-]*|\$HOME|\$\{HOME\})(?=/|$)")
_CWD = re.compile(r"(\$PWD|\$\{PWD\}|~\+)(?=/|$)")
_HOME_DIR = re.compile(r"/(root|home/[^/]+|Users/[^/]+|var/root)(?=/|$)")
_GLOB = re.compile(r"[*?\[]|[@+!]\(")
_DEVICE = re.compile(r"/dev/(sd|hd|vd|xvd|nvme|mmcblk|md|dm-|loop|sr|nbd|zram|ram|rbd|disk/|mapper/|block/|"
                     r"mem$|kmem$|port$|root$)|/proc/sysrq-trigger$|/sys/(block|firmware|devices)/")
MAX_LINK_HOPS = 8

PATH_KEYS = ("raw", "normalized", "in_workspace", "is_root", "is_home", "is_workspace_parent", "dynamic", "glob",
             "device", "via_link")


def clean_dir(path: str) -> str:
    path = posixpath.normpath(path or "/")
    return "/" + path.lstrip("/") if path.startswith("/") else path


def _anchor(raw: str, cwd: str | None) -> str | None:
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
    if not raw or "$" in raw or "`" in raw or raw.startswith(("<(", ">(")):
        return None
    if raw.startswith(("/", "~")):
        return raw
    return None if cwd is None else cwd.rstrip("/") + "/" + raw


def _normalize(anchored: str) -> str:
    if anchored.startswith("~"):
        head, _, rest = anchored.partition("/")
        rest = posixpath.normpath(rest) if rest else "."
        return head if rest == "." else f"{head}/{rest}"
    return clean_dir(anchored)


def follow_links(norm: str, links: dict[str, str | None] | None) -> tuple[str | None, str]:
    """norm with every link prefix replaced by its target: (path or None when a target is unknown, the first
    link followed or "")."""
    first = ""
    for _ in range(MAX_LINK_HOPS):
        hit = None
        for link in links or ():
            if norm == link or norm.startswith(link.rstrip("/") + "/"):
                if hit is None or len(link) > len(hit):
                    hit = link
        if hit is None or hit == "/":
            return norm, first
        first = first or hit
        target = (links or {})[hit]
        if target is None:
            return None, first
        norm = _normalize(target.rstrip("/") + norm[len(hit):]) if norm != hit else target
    return None, first


def resolve_path(raw: str, cwd: str | None, links: dict[str, str | None] | None = None) -> str | None:
    """The normalised path raw names (links followed), or None when it is only known at run time."""
    anchored = _anchor(raw, cwd)
    if anchored is None:
        return None
    return follow_links(_normalize(anchored), links)[0]


def _glob_base(norm: str) -> str:
    """The directory a glob expands in: the components before the first one holding a glob character."""
    head, _, rest = norm.partition("/") if norm.startswith("~") else ("", "", norm)
    parts = rest.split("/")
    for i, part in enumerate(parts):
        if _GLOB.search(part):
            base = "/".join(parts[:i])
            if head:
                return head + ("/" + base if base else "")
            return base or "/"
    return norm


def describe_path(raw: str, cwd: str | None, workspace: str, links: dict[str, str | None] | None = None) -> dict:
    """Facts about one path word: {"raw", "normalized", "in_workspace", "is_root", "is_home",
    "is_workspace_parent", "dynamic", "glob", "device", "via_link"}. `~`, `$HOME`, `${HOME}` stay a home
    marker ("~/x"); home is never assumed to be inside the workspace. A path with other expansions is
    "dynamic" (unknown). `is_home` covers home and its parents (`~/..`); a glob is judged by the directory it
    expands in."""
    workspace = clean_dir(workspace)
    glob = bool(_GLOB.search(raw))
    info = {"raw": raw, "normalized": "", "in_workspace": False, "is_root": False, "is_home": False,
            "is_workspace_parent": False, "dynamic": True, "glob": glob, "device": False, "via_link": ""}
    anchored = _anchor(raw, cwd)
    if anchored is None:
        return info
    norm, info["via_link"] = follow_links(_normalize(anchored), links)
    if norm is None:
        return info
    info["normalized"] = norm
    info["dynamic"] = False
    judged = _glob_base(norm) if glob else norm
    if judged.startswith("~"):
        head, _, rest = judged.partition("/")
        above = rest == ".." or rest.startswith("../")
        info["is_home"] = not rest or above
        in_home_ws = bool(_HOME_DIR.match(workspace))
        info["is_workspace_parent"] = above and in_home_ws
        # home is unknown: if the workspace lies in a home directory, ~/x may be inside it -> unknown
        info["dynamic"] = not info["is_home"] and in_home_ws
        return info
    info["is_root"] = judged == "/"
    info["is_home"] = bool(_HOME_DIR.fullmatch(judged))
    info["in_workspace"] = judged == workspace or judged.startswith(workspace.rstrip("/") + "/")
    info["is_workspace_parent"] = judged != workspace and (judged == "/" or workspace.startswith(judged + "/"))
    info["device"] = bool(_DEVICE.match(judged))
    return info


def dynamic_path(raw: str) -> dict:
    """The facts of a path only known at run time (computed by code, read from stdin)."""
    return {"raw": raw, "normalized": "", "in_workspace": False, "is_root": False, "is_home": False,
            "is_workspace_parent": False, "dynamic": True, "glob": False, "device": False, "via_link": ""}
