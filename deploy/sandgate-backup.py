#!/usr/bin/env python3
"""Back up, and restore, a sandgate data dir: the SQLite store (a consistent copy while sandgate runs) and the keys.

    sandgate-backup create DATA_DIR [--db FILE | --no-db] | ENCRYPT > backup.tar.ENC
    DECRYPT < backup.tar.ENC | sandgate-backup restore DATA_DIR [--db FILE]

`create` writes one tar stream to stdout, never a file: pipe it straight into an encryptor (age, gpg, openssl), so
the CA's private key, the signing keys and the local secrets' key never lie on disk in the clear. It refuses to
write to a terminal. The stream holds:

- `sandgate.db`: the SQLite store, copied with SQLite's online backup API (a consistent snapshot; the WAL is
  included, sandgate may keep running) into memory, not into a file;
- the key material found in DATA_DIR: `signing.key` (tokens), `audit.key` (audit checkpoints), `mitmproxy-ca.pem`
  and `mitmproxy-ca-cert.pem` (the egress CA), `secrets.json` and `secrets.key` (local secrets);
- `manifest.json`: each file's SHA-256, checked by `restore`.

`--no-db` leaves the store out (a PostgreSQL store: back it up with pg_dump). `restore` reads the stream from
stdin into DATA_DIR (made 0700; keys 0600), checks every digest and SQLite's integrity_check before anything is
written, and refuses a DATA_DIR that already holds a store or keys. `harness.token` is not kept: sandgate mints
a new one at start.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sqlite3
import sys
import tarfile
import time
from pathlib import Path

KEYS = ("signing.key", "audit.key", "mitmproxy-ca.pem", "mitmproxy-ca-cert.pem", "secrets.json", "secrets.key")
PUBLIC = {"mitmproxy-ca-cert.pem"}
DB = "sandgate.db"
FORMAT = 1


class BackupError(Exception):
    pass


def sqlite_snapshot(path: Path) -> bytes:
    """A consistent copy of the database at `path`, WAL included, as bytes (SQLite's backup API into memory)."""
    if not path.is_file():
        raise BackupError(f"no SQLite store at {path} (a PostgreSQL store? use --no-db and pg_dump)")
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(":memory:")
    try:
        src.backup(dst)
        data = bytearray(dst.serialize())
    finally:
        src.close()
        dst.close()
    # The copy holds every committed page (the WAL's too). Its header still says WAL (bytes 18-19 = 2), which an
    # in-memory check cannot open: mark it a rollback-journal file (1, 1); sandgate turns WAL on again at start.
    data[18:20] = b"\x01\x01"
    return bytes(data)


def check_sqlite(data: bytes) -> None:
    db = sqlite3.connect(":memory:")
    try:
        db.deserialize(data)
        result = db.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{DB} is not a usable SQLite database: {exc}") from None
    finally:
        db.close()
    if result != "ok":
        raise BackupError(f"{DB} fails SQLite's integrity check: {result}")


def create(data_dir: Path, db: Path | None, out) -> list[str]:
    files: dict[str, bytes] = {}
    if db is not None:
        files[DB] = sqlite_snapshot(db)
    for name in KEYS:
        if (data_dir / name).is_file():
            files[name] = (data_dir / name).read_bytes()
    if not files:
        raise BackupError(f"nothing to back up in {data_dir}")
    manifest = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "files": {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}}
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name, body in [("manifest.json", json.dumps(manifest, indent=2).encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(body), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(body))
    return list(files)


def read_stream(stream) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile() or member.name not in (*KEYS, DB, "manifest.json"):
                raise BackupError(f"unexpected entry {member.name!r}: not a sandgate backup")
            fh = tar.extractfile(member)
            files[member.name] = fh.read() if fh is not None else b""
    try:
        manifest = json.loads(files.pop("manifest.json"))
    except (KeyError, ValueError):
        raise BackupError("no readable manifest.json: not a sandgate backup") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"backup format {manifest.get('format')!r} is not {FORMAT}")
    if set(manifest["files"]) != set(files):
        raise BackupError("the stream's files differ from its manifest (truncated?)")
    for name, body in files.items():
        if hashlib.sha256(body).hexdigest() != manifest["files"][name]:
            raise BackupError(f"{name}: digest mismatch (corrupt or altered)")
    if DB in files:
        check_sqlite(files[DB])
    return files


def write_private(path: Path, body: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".restore")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def restore(stream, data_dir: Path, db: Path) -> list[str]:
    files = read_stream(stream)                       # everything checked before anything is written
    targets = {name: (db if name == DB else data_dir / name) for name in files}
    present = [str(p) for p in targets.values() if p.exists()] + [
        str(p) for p in (db.with_name(db.name + "-wal"),) if DB in files and p.exists()]
    if present:
        raise BackupError(f"refusing to overwrite {', '.join(present)}: restore into a new data dir")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    for name, path in targets.items():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, files[name], 0o644 if name in PUBLIC else 0o600)
    return list(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandgate-backup", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("create", "restore"):
        p = sub.add_parser(name)
        p.add_argument("data_dir", type=Path)
        p.add_argument("--db", type=Path, help=f"the SQLite store (default DATA_DIR/{DB})")
    sub.choices["create"].add_argument("--no-db", action="store_true", help="keys only (a PostgreSQL store)")
    args = parser.parse_args(argv)
    db = args.db or args.data_dir / DB
    try:
        if args.cmd == "create":
            if sys.stdout.isatty():
                raise BackupError("the backup holds private keys: pipe it into an encryptor, not a terminal")
            names = create(args.data_dir, None if args.no_db else db, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            names = restore(sys.stdin.buffer, args.data_dir, db)
    except (BackupError, OSError, tarfile.TarError, sqlite3.Error) as exc:
        print(f"sandgate-backup: {exc}", file=sys.stderr)
        return 1
    print(f"sandgate-backup: {args.cmd}: {', '.join(names)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
