"""What one command does to files and hosts, read from its name, options and operands. Pure helpers on words.

`writes` (redirects, tee/touch/mkdir, cp/mv/install/rsync destinations, `curl -o/-O`, `wget -O/-P`, `tar -x -C`,
`unzip -d`, `git clone DIR`, `dd of=`, `sed -i`, `truncate`, `chmod/chown`, `find -fprint`), `deletes` carried
by options (`rsync --delete*` deletes in its destination, `tar --remove-files`), `moves` (mv sources),
`links` (`ln -s TARGET LINK`), `remote` (`ssh HOST`, scp/rsync/sftp to `host:path`) and `http` (curl, wget,
httpie, `gh api`).
"""
from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"})
HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "xhs"})
_REMOTE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9a-fA-F:.]+\]):(?!//)|^rsync://|^s(?:ftp|cp)://")


def write_targets(name: str, flags: list[str], operands: list[str], values: dict[str, list[str]],
                  argv: list[str]) -> list[str]:
    """Path words the command writes (redirects are the caller's)."""
    def given(*opts: str) -> bool:
        return any(o in flags or o in values for o in opts)

    targets: list[str] = []
    if name in ("tee", "touch", "mkdir", "truncate", "mkfifo", "mknod", "shred"):
        targets += operands
    elif name in ("cp", "install", "ln", "scp", "rsync", "mv"):
        explicit = values.get("-t", []) + values.get("--target-directory", [])
        if name == "install" and given("-d", "--directory"):
            targets += operands
        else:
            targets += explicit or (operands[-1:] if len(operands) > 1 or name == "ln" else [])
        targets = [t for t in targets if not _REMOTE.match(t)]
    elif name in ("chmod", "chown", "chgrp"):
        targets += operands if given("--reference") else operands[1:]
    elif name == "dd":
        targets += [w[3:] for w in operands if w.startswith("of=")]
    elif name in ("sort", "shuf"):
        targets += values.get("-o", []) + values.get("--output", [])
    elif name == "uniq" and len(operands) > 1:
        targets.append(operands[1])
    elif name in ("curl",):
        targets += _curl_writes(flags, operands, values)
    elif name == "wget":
        targets += _wget_writes(flags, operands, values)
    elif name in ("tar", "gtar", "bsdtar"):
        targets += _tar_writes(flags, operands, values, argv)
    elif name == "unzip":
        targets += values.get("-d", []) or ["."]
    elif name == "zip" and operands:
        targets.append(operands[0])
    elif name in ("7z", "7za", "7zz", "7zr") and operands[:1] in (["x"], ["e"]):
        targets += [w[2:] for w in argv[1:] if w.startswith("-o") and len(w) > 2] or ["."]
    elif name == "git" and operands:
        targets += _git_writes(operands)
    elif name in ("docker", "podman", "nerdctl") and operands[:1] in (["run"], ["create"]):
        targets += _bind_sources(values)
    elif name == "find":
        words = argv[1:]
        for i, word in enumerate(words):
            if word in ("-fprint", "-fprint0", "-fls", "-fprintf") and i + 1 < len(words):
                targets.append(words[i + 1])
    elif name in ("xxd",) and given("-r") and len(operands) > 1:
        targets.append(operands[1])
    return [t for t in targets if t and t != "-"]


def _curl_writes(flags: list[str], operands: list[str], values: dict[str, list[str]]) -> list[str]:
    out = [v for key in ("-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace",
                         "--trace-ascii", "--libcurl", "--etag-save", "--stderr") for v in values.get(key, [])]
    if any(f in flags for f in ("-O", "--remote-name", "--remote-name-all", "-J", "--remote-header-name")):
        directory = (values.get("--output-dir") or ["."])[-1]
        urls = operands + values.get("--url", [])
        out += [posixpath.join(directory, _url_basename(u)) for u in urls] or [directory]
    return out


def _wget_writes(flags: list[str], operands: list[str], values: dict[str, list[str]]) -> list[str]:
    out = [v for key in ("-o", "--output-file", "-a", "--append-output") for v in values.get(key, [])]
    document = values.get("-O", []) + values.get("--output-document", [])
    if document:
        return out + document
    directory = (values.get("-P") or values.get("--directory-prefix") or ["."])[-1]
    if any(f in flags for f in ("-r", "--recursive", "-m", "--mirror")):
        return out + [directory]
    return out + [posixpath.join(directory, _url_basename(u)) for u in operands]


def _url_basename(url: str) -> str:
    try:
        path = urlsplit(url if "://" in url else "http://" + url).path
    except ValueError:
        return "index.html"
    return posixpath.basename(path.rstrip("/")) or "index.html"


def _tar_writes(flags: list[str], operands: list[str], values: dict[str, list[str]], argv: list[str]) -> list[str]:
    letters = argv[1] if len(argv) > 1 and re.fullmatch(r"[A-Za-z]+", argv[1]) else ""
    extract = any(f in flags for f in ("-x", "--extract", "--get")) or "x" in letters
    create = any(f in flags for f in ("-c", "--create", "-r", "--append", "-u", "--update")) or \
        any(c in letters for c in "cru")
    archive = values.get("-f", []) + values.get("--file", [])
    if letters and "f" in letters and not archive:
        rest = [w for w in argv[2:] if not w.startswith("-")]
        archive = rest[:1]
    if extract:
        return values.get("-C", []) + values.get("--directory", []) or ["."]
    if create:
        return archive
    return []


def _bind_sources(values: dict[str, list[str]]) -> list[str]:
    """Host paths a container gets to write: `-v SRC:DST`, `--mount type=bind,source=SRC`."""
    out = [v.split(":", 1)[0] for v in values.get("-v", []) + values.get("--volume", [])
           if v.startswith(("/", "~", ".", "$"))]
    for mount in values.get("--mount", []):
        fields = dict(part.split("=", 1) for part in mount.split(",") if "=" in part)
        source = fields.get("source") or fields.get("src")
        if source and fields.get("type", "volume") == "bind":
            out.append(source)
    return out


def _git_writes(operands: list[str]) -> list[str]:
    sub, rest = operands[0], operands[1:]
    if sub == "clone" and rest:
        if len(rest) > 1:
            return [rest[1]]
        return [re.sub(r"\.git$", "", posixpath.basename(rest[0].rstrip("/").split(":")[-1])) or "."]
    if sub == "init":
        return rest[:1] or ["."]
    if sub == "worktree" and rest[:1] == ["add"] and len(rest) > 1:
        return [rest[1]]
    return []


# compressors that replace each file operand with its compressed (or decompressed) form unless told to keep it;
# those in _KEEPING keep it unless told to remove it (--rm)
COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "pigz", "unpigz",
                         "pbzip2", "lbzip2", "pixz", "plzip", "lzip", "lunzip", "compress", "uncompress", "zstd",
                         "unzstd", "zstdmt", "pzstd", "lz4", "unlz4", "brotli", "lzop", "xz-utils"})
_KEEPING = frozenset({"zstd", "unzstd", "zstdmt", "pzstd", "lz4", "unlz4", "brotli", "lzop"})
_KEEP_FLAGS = frozenset({"-k", "--keep", "-c", "--stdout", "--to-stdout", "-t", "--test", "-l", "--list", "-h",
                         "--help", "-V", "--version", "-L", "--license"})
_SEVEN_Z = frozenset({"7z", "7za", "7zz", "7zr"})


def option_deletes(name: str, flags: list[str], operands: list[str], argv: list[str] | None = None) -> list[str]:
    """Path words deleted because of an option or a command: rsync --delete* (in the destination), archivers
    that delete what they archived (tar --remove-files, zip -m, 7z -sdel, rar -df/-dr and `rar m`)."""
    words = argv[1:] if argv is not None else []
    if name == "rsync" and any(f.startswith("--delete") or f == "--del" for f in flags) and len(operands) > 1:
        return [] if _REMOTE.match(operands[-1]) else [operands[-1]]
    if name in ("tar", "gtar", "bsdtar") and "--remove-files" in flags:
        return operands
    if name in ("zip",) and any(f in flags for f in ("-m", "--move")):
        return operands[1:]
    if name in _SEVEN_Z and any(w.lower() == "-sdel" for w in words if w != "--"):
        return operands[2:]
    if name in ("rar", "winrar") and operands:
        if operands[0].lower() in ("m", "mf") or any(w.lower() in ("-df", "-dr") for w in words):
            return operands[2:]
    return []


def consumed(name: str, flags: list[str], operands: list[str]) -> list[str]:
    """Path words a compressor replaces by its output (`gzip x` leaves `x.gz`, `gzip -r ~` every file of home):
    moved away, unless it keeps them (-k, -c) or, for those that keep by default, without --rm."""
    if name not in COMPRESSORS or any(f in _KEEP_FLAGS for f in flags):
        return []
    if name in _KEEPING and "--rm" not in flags:
        return []
    return [o for o in operands if o != "-"]


def move_sources(name: str, flags: list[str], operands: list[str], values: dict[str, list[str]]) -> list[str]:
    """Path words moved away (the source no longer exists afterwards)."""
    if name == "mv":
        explicit = values.get("-t") or values.get("--target-directory")
        return operands if explicit else operands[:-1]
    if name == "rsync" and "--remove-source-files" in flags:
        return [o for o in operands[:-1] if not _REMOTE.match(o)]
    return []


def link_pairs(name: str, flags: list[str], operands: list[str], values: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(target, link) for each link `ln` makes (symbolic or hard)."""
    if name != "ln" or not operands:
        return []
    directory = (values.get("-t") or values.get("--target-directory") or [None])[-1]
    if directory is not None:
        return [(t, posixpath.join(directory, posixpath.basename(t.rstrip("/")))) for t in operands]
    if len(operands) == 1:
        return [(operands[0], posixpath.basename(operands[0].rstrip("/")) or ".")]
    if len(operands) == 2:
        link = operands[1]
        return [(operands[0], link if not link.endswith("/") else link + posixpath.basename(operands[0]))]
    return [(t, posixpath.join(operands[-1], posixpath.basename(t.rstrip("/")))) for t in operands[:-1]]


def copy_pairs(name: str, operands: list[str], values: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(source, destination file) for cp/mv/install, so content written earlier follows the file."""
    if name not in ("cp", "mv", "install") or len(operands) < 2:
        return []
    dest = operands[-1]
    sources = operands[:-1]
    if len(sources) > 1 or dest.endswith("/"):
        return [(s, posixpath.join(dest, posixpath.basename(s.rstrip("/")))) for s in sources]
    return [(sources[0], dest)]


def remote_target(name: str, operands: list[str]) -> str | None:
    """The remote host a command writes to or runs on (ssh HOST, scp/rsync/sftp to host:path)."""
    if name in ("ssh", "mosh", "autossh") and operands:
        return operands[0]
    if name == "sftp" and operands:
        return operands[-1]
    if name in ("scp", "rsync", "rclone") and len(operands) > 1 and _REMOTE.match(operands[-1]):
        return operands[-1].split(":", 1)[0] if "://" not in operands[-1] else operands[-1]
    return None


def http_facts(name: str, flags: list[str], operands: list[str], values: dict[str, list[str]]) -> dict:
    """{"method", "urls": [raw url]} for curl, wget, httpie and xh."""
    def given(*opts: str) -> bool:
        return any(o in values or o in flags for o in opts)

    urls = list(operands)
    if name == "curl":
        urls += values.get("--url", [])
        explicit = (values.get("-X") or values.get("--request") or [""])[-1].upper()
        if explicit:
            method = explicit
        elif given("-I", "--head"):
            method = "HEAD"
        elif given("-T", "--upload-file"):
            method = "PUT"
        elif given("-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "--data-ascii", "--json",
                   "-F", "--form", "--form-string") and not given("-G", "--get"):
            method = "POST"
        else:
            method = "GET"
    elif name == "wget":
        method = (values.get("--method") or [""])[-1].upper() or \
            ("POST" if given("--post-data", "--post-file", "--body-data", "--body-file") else "GET")
    else:
        method = "GET"
        if urls and urls[0].upper() in _METHODS:
            method, urls = urls[0].upper(), urls[1:]
        elif any(re.match(r"[^=:]+(:=|=|@)", w) for w in urls[1:]):
            method = "POST"
        urls = urls[:1]
    return {"method": method, "urls": [u if "://" in u else "http://" + u for u in urls]}


def forge_api(name: str, operands: list[str], values: dict[str, list[str]]) -> dict | None:
    """`gh api` / `glab api`: {"method", "urls"} (GET unless -X, or POST when fields are given)."""
    if name not in ("gh", "glab") or operands[:1] != ["api"]:
        return None
    explicit = (values.get("-X") or values.get("--method") or [""])[-1].upper()
    fields = any(k in values for k in ("-f", "--field", "-F", "--raw-field", "--input"))
    method = explicit or ("POST" if fields else "GET")
    host = "api.github.com" if name == "gh" else "gitlab.com"
    endpoint = operands[1] if len(operands) > 1 else ""
    url = endpoint if "://" in endpoint else f"https://{host}/{endpoint.lstrip('/')}"
    return {"method": method, "urls": [url]}
