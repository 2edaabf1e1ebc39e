"""CPU per test file, exactly (a dev-only pytest plugin, never part of `make test`; docs/testing.md).

    env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$PWD/.venv/pycache SANDGATE_TEST_CPU=cpu.json \\
        .venv/bin/python -m pytest -q -p tests.support.gcfreeze -p tests.support.cpuacct -n 4 --dist loadfile
    .venv/bin/python -m tests.support.cpuacct table cpu.json 60      # the sorted table, Markdown

Each test process (every xdist worker, or the one process without xdist) moves itself into a cgroup v1 cpuacct group
of its own, `/sys/fs/cgroup/cpuacct/sgtest-<run>-<worker>` (needs root and the v1 cpuacct hierarchy), so everything
it starts afterwards is charged there too: sandgate processes, the zygote and what it forks, bao, PostgreSQL
clusters, Chromium, CLIs, and their children. A file's CPU is the group's `cpuacct.usage` from the start of its
first test to the start of the next file's first test on that worker: its module fixtures' setup and teardown
included (with `--dist loadfile` a file's tests run on one worker, one after the other). What outlives a file is
charged to whichever file is running when it spends: the per-worker zygote's imports to the first file that starts
a sandgate, the PostgreSQL gateway's session-scoped cluster and sandgate to the file that first asks for them (and
their idle ticks to later files), session teardown to the worker's last file. Collection and start-up are the rows
`(start <worker>)`. Each row also splits the CPU into the pytest process's own (`self`: `time.process_time`, all its
threads) and everything else in the group (`children`).

The controller gathers the workers' rows (xdist's workeroutput) and writes SANDGATE_TEST_CPU (JSON: file ->
cpu_s, self_s, children_s, wall_s, tests, worker), plus `_total` (the whole groups' usage, start-up included).
SANDGATE_TEST_CPU_TESTS=1 adds `_tests`: each test's own CPU (its setup, call and teardown: a module fixture's start
is charged to the file's first test), listed by `python -m tests.support.cpuacct tests CPU.json 30`."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct")
ENV_OUT = "SANDGATE_TEST_CPU"
ENV_RUN = "SANDGATE_TEST_CPU_RUN"
ENV_TESTS = "SANDGATE_TEST_CPU_TESTS"


def _usage(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


class _Meter:
    """One test process's group and its per-file rows."""

    def __init__(self, worker: str) -> None:
        run = os.environ.setdefault(ENV_RUN, str(os.getpid()))
        self.group = ROOT / f"sgtest-{run}-{worker}"
        self.worker = worker
        try:
            self.group.mkdir(exist_ok=True)
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as exc:
            raise pytest.UsageError(f"tests.support.cpuacct needs root and cgroup v1 cpuacct at {ROOT}: {exc}")
        self.start = self._sample()
        self.rows: dict[str, dict] = {}
        self.current: str | None = f"(start {worker})"
        self.mark = self.start
        self.tests = 0
        self.per_test = os.environ.get(ENV_TESTS) == "1"
        self.test_rows: dict[str, dict] = {}

    def _sample(self) -> tuple[float, float, float]:
        return _usage(self.group), time.process_time(), time.monotonic()

    def switch(self, path: str | None) -> None:
        now = self._sample()
        if self.current is not None:
            row = self.rows.setdefault(self.current, {"cpu_s": 0.0, "self_s": 0.0, "children_s": 0.0, "wall_s": 0.0,
                                                      "tests": 0, "worker": self.worker})
            cpu, own = now[0] - self.mark[0], now[1] - self.mark[1]
            row["cpu_s"] += cpu
            row["self_s"] += own
            row["children_s"] += cpu - own
            row["wall_s"] += now[2] - self.mark[2]
            row["tests"] += self.tests
        self.current, self.mark, self.tests = path, now, 0

    def total(self) -> dict:
        now = self._sample()
        return {"cpu_s": now[0] - self.start[0], "self_s": now[1] - self.start[1],
                "wall_s": now[2] - self.start[2], "worker": self.worker}

    def leave(self) -> None:
        """Back to the root group; the group goes if nothing is left in it (an orphan keeps it: its pids are listed)."""
        try:
            (ROOT / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            left = (self.group / "cgroup.procs").read_text().split() if self.group.exists() else []
            if left:
                print(f"cpuacct: {self.group} kept, processes left in it: {' '.join(left)}", file=sys.stderr)


_meter: _Meter | None = None
_gathered: dict[str, dict] = {}


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    global _meter
    distributed = bool(getattr(config.option, "numprocesses", None))
    if _is_worker(config):
        _meter = _Meter(config.workerinput["workerid"])
    elif not distributed:
        _meter = _Meter("main")
    else:
        os.environ.setdefault(ENV_RUN, str(os.getpid()))   # the workers' groups share the controller's run id


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    if _meter is not None:
        path = item.nodeid.split("::", 1)[0]
        if path != _meter.current:
            _meter.switch(path)
        _meter.tests += 1
        if _meter.per_test:
            before = _meter._sample()
            yield
            after = _meter._sample()
            _meter.test_rows[item.nodeid] = {"cpu_s": after[0] - before[0], "self_s": after[1] - before[1],
                                             "wall_s": after[2] - before[2]}
            return
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _meter is None:
        return
    _meter.switch(None)
    rows = dict(_meter.rows)
    rows[f"_total[{_meter.worker}]"] = _meter.total()
    if _meter.test_rows:
        rows[f"_tests[{_meter.worker}]"] = _meter.test_rows
    if _is_worker(session.config):
        session.config.workeroutput["cpuacct"] = json.dumps(rows)
    else:
        _gather(rows)


def _gather(rows: dict[str, dict]) -> None:
    """Add a process's rows (a file split over workers, as without --dist loadfile, sums)."""
    for key, row in rows.items():
        if key in _gathered and not key.startswith("_"):
            have = _gathered[key]
            for field in ("cpu_s", "self_s", "children_s", "wall_s", "tests"):
                have[field] += row[field]
            have["worker"] = ",".join(sorted({*have["worker"].split(","), row["worker"]}))
        else:
            _gathered[key] = row


def pytest_testnodedown(node, error) -> None:
    rows = getattr(node, "workeroutput", {}).get("cpuacct")
    if rows:
        _gather(json.loads(rows))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _meter is not None:
        _meter.leave()    # after tests/conftest.py's pytest_unconfigure reaped the zygote
    out = os.environ.get(ENV_OUT)
    if out and not _is_worker(config) and _gathered:
        totals = [row for key, row in _gathered.items() if key.startswith("_total[")]
        tests = {nodeid: row for key, rows in list(_gathered.items()) if key.startswith("_tests[")
                 for nodeid, row in rows.items()}
        for key in [k for k in _gathered if k.startswith("_tests[")]:
            del _gathered[key]
        if tests:
            _gathered["_tests"] = tests
        _gathered["_total"] = {"cpu_s": sum(r["cpu_s"] for r in totals), "self_s": sum(r["self_s"] for r in totals),
                               "workers": len(totals)}
        Path(out).write_text(json.dumps(_gathered, indent=1, sort_keys=True) + "\n")


def table(data: dict, top: int) -> str:
    """The Markdown table of the `top` files by CPU, and the totals."""
    files = sorted(((k, v) for k, v in data.items() if not k.startswith("_")), key=lambda kv: -kv[1]["cpu_s"])
    total = data.get("_total", {})
    in_files = sum(v["cpu_s"] for k, v in files)
    lines = [f"Total CPU of the test processes' groups: {total.get('cpu_s', in_files):.1f} s "
             f"({total.get('workers', '?')} workers; pytest processes themselves {total.get('self_s', 0):.1f} s); "
             f"{len(files)} rows, {sum(v['tests'] for k, v in files)} tests.", "",
             "| # | file | CPU s | self s | children s | wall s | tests | worker |", "|---|---|---|---|---|---|---|---|"]
    for n, (path, v) in enumerate(files[:top], 1):
        lines.append(f"| {n} | `{path}` | {v['cpu_s']:.1f} | {v['self_s']:.1f} | {max(0.0, v['children_s']):.1f} | "
                     f"{v['wall_s']:.1f} | {v['tests']} | {v['worker']} |")
    return "\n".join(lines) + "\n"


def compare(before: dict, after: dict, top: int) -> str:
    """The `top` files of `before` by CPU, with their CPU in `after`."""
    files = sorted(((k, v) for k, v in before.items() if not k.startswith("_")), key=lambda kv: -kv[1]["cpu_s"])
    lines = ["| file | CPU s before | CPU s after |", "|---|---|---|"]
    for path, v in files[:top]:
        a = after.get(path, {}).get("cpu_s")
        lines.append(f"| `{path}` | {v['cpu_s']:.1f} | {'-' if a is None else f'{a:.1f}'} |")
    tb, ta = before.get("_total", {}).get("cpu_s"), after.get("_total", {}).get("cpu_s")
    if tb is not None and ta is not None:
        lines.append(f"| whole run | {tb:.1f} | {ta:.1f} |")
    return "\n".join(lines) + "\n"


def tests_table(data: dict, top: int) -> str:
    """The `top` tests by CPU (a run with SANDGATE_TEST_CPU_TESTS=1): the test's own setup, call and teardown."""
    rows = sorted(data.get("_tests", {}).items(), key=lambda kv: -kv[1]["cpu_s"])
    lines = ["| test | CPU s | self s | wall s |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {v['cpu_s']:.2f} | {v['self_s']:.2f} | {v['wall_s']:.1f} |" for k, v in rows[:top]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "table":
        print(table(json.loads(Path(argv[1]).read_text()), int(argv[2]) if len(argv) > 2 else 60), end="")
        return 0
    if len(argv) >= 2 and argv[0] == "tests":
        print(tests_table(json.loads(Path(argv[1]).read_text()), int(argv[2]) if len(argv) > 2 else 30), end="")
        return 0
    if len(argv) >= 3 and argv[0] == "compare":
        before, after = (json.loads(Path(p).read_text()) for p in argv[1:3])
        print(compare(before, after, int(argv[3]) if len(argv) > 3 else 15), end="")
        return 0
    print("usage: python -m tests.support.cpuacct table CPU.json [TOP] | tests CPU.json [TOP] | compare BEFORE.json AFTER.json [TOP]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
