"""The suite's recorded durations: what the scheduler in tests/conftest.py orders the files by, and what shows where
a run's time goes (docs/testing.md, Durations).

    python -m tests.support.durations table RUN.xml [RUN.xml ...]    # rewrite tests/durations.json
    python -m tests.support.durations top RUN.xml [N]                # the N slowest files and tests of a run
    python -m tests.support.durations starts STARTS.jsonl            # sandgate starts per file (SANDGATE_TEST_STARTS)

RUN.xml is pytest's JUnit report of a whole run (`--junitxml=RUN.xml`); a test's time there is its setup, call and
teardown, so a module fixture's start counts in its file's first test. Several reports are averaged per file.
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "tests" / "durations.json"


def _file_of(case: ET.Element) -> str:
    """tests/x/test_y.py of a JUnit testcase (classname "tests.x.test_y" or "tests.x.test_y.TestClass")."""
    parts = case.get("classname", "").split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (ROOT / path).is_file():
            return path
    return "/".join(parts) + ".py"


def per_test(report: Path) -> list[tuple[str, str, float]]:
    """(file, test name, seconds) of every testcase in a JUnit report."""
    return [(_file_of(case), case.get("name", ""), float(case.get("time") or 0))
            for case in ET.parse(report).getroot().iter("testcase")]


def per_file(report: Path) -> dict[str, tuple[float, int]]:
    """file -> (seconds, tests) of one JUnit report."""
    files: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for path, _, seconds in per_test(report):
        files[path][0] += seconds
        files[path][1] += 1
    return {path: (secs, n) for path, (secs, n) in files.items()}


def table(reports: list[Path]) -> dict[str, list]:
    """file -> [seconds, tests], the mean over the reports that ran the file."""
    runs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for report in reports:
        for path, record in per_file(report).items():
            runs[path].append(record)
    return {path: [round(sum(s for s, _ in r) / len(r), 1), round(sum(n for _, n in r) / len(r))]
            for path, r in sorted(runs.items())}


def load() -> dict[str, tuple[float, int]]:
    """The committed table (empty when there is none: the scheduler falls back to test counts)."""
    try:
        return {path: (float(secs), int(n)) for path, (secs, n) in json.loads(TABLE.read_text()).items()}
    except (OSError, ValueError):
        return {}


def starts(log: Path) -> str:
    """Per test file: sandgate starts, distinct configurations, seconds to listen (SANDGATE_TEST_STARTS lines); bao,
    PostgreSQL cluster and Chromium starts on lines of their own."""
    files: dict[str, list] = defaultdict(lambda: [0, set(), 0.0])
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        row = files[(rec["test"].split("::", 1)[0] or "?") + ("" if rec["what"] == "sandgate" else f" ({rec['what']})")]
        row[0] += 1
        row[1].add(rec.get("config"))
        row[2] += rec["seconds"]
    rows = sorted(files.items(), key=lambda item: -item[1][0])
    out = [f"{'starts':>6} {'configs':>7} {'seconds':>8}  file"]
    out += [f"{n:>6} {len(cfgs):>7} {secs:>8.1f}  {path}" for path, (n, cfgs, secs) in rows]
    out.append(f"{sum(r[0] for _, r in rows):>6} {'':>7} {sum(r[2] for _, r in rows):>8.1f}  total")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "table":
        rows = table([Path(a) for a in argv[1:]])
        TABLE.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in rows.items()) + "\n}\n")
        return 0
    if len(argv) in (2, 3) and argv[0] == "top":
        n = int(argv[2]) if len(argv) == 3 else 25
        files = sorted(per_file(Path(argv[1])).items(), key=lambda item: -item[1][0])
        tests = sorted(per_test(Path(argv[1])), key=lambda rec: -rec[2])
        total = sum(secs for _, (secs, _) in files)
        print(f"{total:.0f} s in {sum(c for _, (_, c) in files)} tests, {len(files)} files")
        print("\n".join(f"{secs:8.1f} {count:5} {path}" for path, (secs, count) in files[:n]))
        print("\n".join(f"{secs:8.1f} {path}::{name}" for path, name, secs in tests[:n]))
        return 0
    if len(argv) == 2 and argv[0] == "starts":
        print(starts(Path(argv[1])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
