"""Shared fixtures: a recording upstream and a real sandgate process, both on loopback."""
from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings
from xdist.scheduler import LoadScopeScheduling

from gateway.runtime.eventloop import ServeLoop
from tests.support.durations import load as load_durations
from tests.support.gateway import FORK as SANDGATE_FORK
from tests.support.gateway import TIER as SANDGATE_TIER
from tests.support.gateway import Sandgate
from tests.support.upstream import Upstream, make_cert
from tests.support.zygote import shutdown as stop_zygote

IN_CI = os.environ.get("CI") == "true"
# Sandgate starts in tests fork this test process's zygote (tests/support/zygote.py, docs/testing.md);
# SANDGATE_TEST_EXEC=1 makes every start a real process.
SANDGATE_FORK["on"] = True

# Property tests never depend on timing (no per-example deadline: a loaded 2-core machine is not a failure). In CI
# they draw the same examples every run, so a red run is reproducible and a green one stays green; on a developer's
# machine they search afresh each time (and keep what they find in .hypothesis/).
settings.register_profile("sandgate", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None)
settings.load_profile("ci" if IN_CI else "sandgate")


# -- Tiers and parallel runs (docs/testing.md) ---------------------------------------------------------------
# End-to-end tests are marked by where they live, never file by file: a file named *_e2e.py or *_cli.py (tests of
# CLI processes), or one in a folder below. `make test-fast` runs the rest (`-m "not e2e"`); `make test` runs
# everything.
E2E_FOLDERS = ("deploy",)
# Files whose tests must not run at the same time as each other's under pytest-xdist: each group runs on one
# worker, one file after the other (a file's own tests always stay on one worker, for its module fixtures).
SERIAL_GROUPS: dict[str, tuple[str, ...]] = {}
# Folders whose files share a session fixture too costly to start on every worker: each folder's files run on one
# worker, one after the other (tests/gateway/postgres/: the PostgreSQL gateway's own cluster, initdb'd and started,
# and the sandgate in front of it, `pgcluster` and `pg_gateway`, once per test process).
SHARED_FOLDERS: tuple[str, ...] = ("tests/gateway/postgres/",)
_TESTS = Path(__file__).parent


def is_e2e(path: Path) -> bool:
    """Whether the test file at `path` is end-to-end: named *_e2e.py or *_cli.py, or in one of E2E_FOLDERS."""
    rel = path.resolve().relative_to(_TESTS)
    return path.name.endswith(("_e2e.py", "_cli.py")) or any(part in E2E_FOLDERS for part in rel.parts[:-1])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier: dict[Path, bool] = {}          # once per file, not per item: is_e2e resolves the path (system calls)
    for item in items:
        e2e = tier.get(item.path)
        if e2e is None:
            e2e = tier[item.path] = is_e2e(item.path)
        if e2e:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test outside the end-to-end tier may not start a sandgate process (tests.support.gateway.Sandgate.start
    refuses): `make test-fast` would run it."""
    SANDGATE_TIER["e2e"] = item.get_closest_marker("e2e") is not None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop and reap this test process's zygote (an xdist worker ends with os._exit, past atexit): its children's
    CPU then counts in this process's, as real processes' does."""
    stop_zygote()


def _scope_of(path: str) -> str:
    for group, files in SERIAL_GROUPS.items():
        if path in files:
            return group
    for folder in SHARED_FOLDERS:
        if path.startswith(folder):
            return folder
    return path


def expected_seconds(units: dict[str, list[str]]) -> dict[str, float]:
    """scope -> the seconds its files are expected to take: the committed table's (tests/durations.json, refreshed
    by `python -m tests.support.durations table RUN.xml`), scaled by its test count; a file the table lacks is
    its test count times the mean seconds per test of its tier in the table."""
    recorded = load_durations()
    rate = {}
    for tier in (True, False):
        known = [(secs, n) for path, (secs, n) in recorded.items() if is_e2e(_TESTS.parent / path) is tier]
        rate[tier] = sum(s for s, _ in known) / max(1, sum(n for _, n in known)) if known else (10.0 if tier else 0.1)
    out = {}
    for scope, nodeids in units.items():
        files: dict[str, int] = {}
        for nodeid in nodeids:
            path = nodeid.split("::", 1)[0]
            files[path] = files.get(path, 0) + 1
        out[scope] = sum(recorded[path][0] * n / max(1, recorded[path][1]) if path in recorded
                         else n * rate[is_e2e(_TESTS.parent / path)] for path, n in files.items())
    return out


class _ByFile(LoadScopeScheduling):
    """`--dist loadfile` for this suite: a file's tests stay on one worker (its module fixtures start once), the
    files of a serial group or a shared folder share one, and the longest files are handed out first (by recorded durations: a long
    file starting last would be the run's tail)."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return _scope_of(nodeid.split("::", 1)[0])

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:
            self._ordered = True
            seconds = expected_seconds({scope: list(unit) for scope, unit in self.workqueue.items()})
            units = sorted(self.workqueue.items(), key=lambda unit: -seconds[unit[0]])
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "loadfile":
        return _ByFile(config, log)
    return None


class _ServeLoopPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return ServeLoop()


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    """Async tests run on the loop `sandgate serve` runs on (gateway/runtime/eventloop.py: uvloop), so that what they
    show of the proxy, the API and the page holds for the loop users get."""
    return _ServeLoopPolicy()


def need(condition: bool, what: str) -> None:
    """Skip for a missing part on a user's machine; in CI a missing part fails the run."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {what}")
    pytest.skip(f"missing: {what}")


def need_binary(name: str) -> str:
    path = shutil.which(name)
    need(path is not None, f"the {name} binary")
    return path


@pytest.fixture(scope="module")
def _upstream_server():
    with Upstream() as up:
        yield up


@pytest.fixture
def upstream(_upstream_server):
    """A module-wide recording upstream, its record cleared for each test."""
    _upstream_server.recorder.requests.clear()
    _upstream_server.recorder.connections = 0
    return _upstream_server


@pytest.fixture
def tls_cert(tmp_path):
    return make_cert(tmp_path / "certs", ["secure.test", "localhost"])


@pytest.fixture
def tls_upstream(tls_cert):
    with Upstream(tls=tls_cert) as up:
        yield up


LOOPBACK_CONFIG = {"egress": {"private_allow": ["127.0.0.0/8"],
                              "resolve": {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"],
                                          "secure.test": ["127.0.0.1"]}}}


@pytest.fixture(scope="module")
def loopback_gateway(tmp_path_factory):
    """sandgate (one per test module) whose *.test names resolve to loopback, with loopback allowed."""
    with Sandgate(tmp_path_factory.mktemp("sandgate"), LOOPBACK_CONFIG) as sg:
        yield sg
