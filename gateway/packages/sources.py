"""Where OSV records come from: JSON files, directories of them (walked), and zip archives (such as OSV's
`all.zip` or a download of ossf/malicious-packages). A file may hold one record or a list of them."""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

MAX_RECORD_BYTES = 16 * 1024 * 1024        # a larger JSON file is not an OSV record: skipped


@dataclass
class ReadReport:
    files: int = 0
    skipped: list[str] = field(default_factory=list)        # "PATH: why"


def _decode(data: bytes, where: str, report: ReadReport) -> Iterator[Any]:
    report.files += 1
    try:
        doc = json.loads(data)
    except ValueError as exc:
        report.skipped.append(f"{where}: not JSON ({exc.__class__.__name__})")
        return
    yield from (doc if isinstance(doc, list) else [doc])


def read_records(paths: list[str], report: ReadReport) -> Iterator[Any]:
    """Every record under `paths` (files, directories, zips), in a stable order. OSError for a missing path."""
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise OSError(f"no such file or directory: {raw}")
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in (".json", ".zip"))
        else:
            files = [path]
        for f in files:
            if f.suffix.lower() == ".zip" or zipfile.is_zipfile(f):
                yield from _read_zip(f, report)
            elif f.stat().st_size > MAX_RECORD_BYTES:
                report.skipped.append(f"{f}: larger than {MAX_RECORD_BYTES} bytes")
            else:
                yield from _decode(f.read_bytes(), str(f), report)


def _read_zip(path: Path, report: ReadReport) -> Iterator[Any]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        report.skipped.append(f"{path}: not a zip file")
        return
    with archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if info.is_dir() or not info.filename.lower().endswith(".json"):
                continue
            if info.file_size > MAX_RECORD_BYTES:
                report.skipped.append(f"{path}:{info.filename}: larger than {MAX_RECORD_BYTES} bytes")
                continue
            yield from _decode(archive.read(info), f"{path}:{info.filename}", report)


BUILTIN = Path(__file__).with_name("data")


def builtin_records() -> list[Any]:
    """The sample of real records shipped with sandgate (always in the index; a load of the same advisory
    replaces it)."""
    report = ReadReport()
    return list(read_records([str(BUILTIN)], report)) if BUILTIN.is_dir() else []
