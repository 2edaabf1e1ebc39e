"""URL paths as a server reads them (pure): the form access grants match a path prefix against."""
from __future__ import annotations

from urllib.parse import unquote

AMBIGUOUS = ""      # servers read the path differently: only a grant of the whole host ("/") covers it


def _decoded(segment: str) -> str | None:
    """A segment percent-decoded until nothing changes (None when that takes more than 4 rounds)."""
    for _ in range(5):
        nxt = unquote(segment, errors="strict") if "%" in segment else segment
        if nxt == segment:
            return segment
        segment = nxt
    return None


def normalise_path(path: str) -> str:
    """The path as a server reads it: backslashes as slashes, each segment percent-decoded, dot segments resolved,
    empty segments dropped; it starts with "/" and keeps a trailing "/". AMBIGUOUS ("") when servers read it
    differently: a segment that decodes to a separator or a dot segment ("%2e%2e", "..%2f"), a dot segment with
    parameters ("..;x", Tomcat's reading), or one that cannot be decoded."""
    text = path.split("?", 1)[0].replace("\\", "/")
    segments = text.split("/")
    out: list[str] = []
    for seg in segments:
        try:
            dec = _decoded(seg)
        except UnicodeDecodeError:
            dec = seg
        if dec is None or "/" in dec or "\\" in dec or (dec in (".", "..") and dec != seg):
            return AMBIGUOUS
        if dec.split(";", 1)[0] in (".", "..") and ";" in dec:
            return AMBIGUOUS
        if dec in ("", "."):
            continue
        if dec == "..":
            if out:
                out.pop()
            continue
        out.append(dec)
    joined = "/" + "/".join(out)
    return joined + "/" if out and segments[-1] in ("", ".", "..") else joined


def path_covered(path: str, prefix: str) -> bool:
    """Whether the normalised `path` is under `prefix` at a segment boundary ("/v1/" covers "/v1/x" and "/v1",
    never "/v1-admin"). A prefix of "/" covers every path, an AMBIGUOUS one too; no other prefix covers that."""
    base = prefix.rstrip("/")
    if base == "":
        return True
    return path != AMBIGUOUS and (path == base or path.startswith(base + "/"))
