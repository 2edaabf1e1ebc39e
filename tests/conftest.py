"""Shared fixtures: a recording upstream and a real sandgate process, both on loopback."""
from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from hypothesis import settings

from gateway.runtime.eventloop import ServeLoop
from tests.support.gateway import Sandgate
from tests.support.upstream import Upstream, make_cert

IN_CI = os.environ.get("CI") == "true"

# Property tests never depend on timing (no per-example deadline: a loaded 2-core machine is not a failure). In CI
# they draw the same examples every run, so a red run is reproducible and a green one stays green; on a developer's
# machine they search afresh each time (and keep what they find in .hypothesis/).
settings.register_profile("sandgate", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, database=None)
settings.load_profile("ci" if IN_CI else "sandgate")


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
