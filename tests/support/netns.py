"""Probes that run in a loopback-only network namespace of their own (`unshare -n -m -- python PROBE ARGS`):
tests/support/isolate_probe.py, forbidden_probe.py and rebind_probe.py.

The test process runs one with `run_probe`: forked from its zygote where it can be (the child unshares its network
and mount namespaces and makes `/` private before it runs the script: tests/support/zygote.py), else exec'd under
`unshare`. The probe calls `enter()` before anything else: its sandgate starts then fork from a zygote of its own,
which a forked probe (PRELOAD imported already) makes as a fork of itself, before it starts any thread, instead of
a new interpreter importing PRELOAD again. Either way the zygote and every sandgate it forks are children of the
probe, in its namespaces. `isolation(pids)` is what shows it; `assert_isolated` is the test's check of it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support import zygote
from tests.support.gateway import FORK, START_TIMEOUT_S, fork_refusal


def run_probe(probe: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """`unshare -n -m -- python PROBE ARGS` for its output, forked from this test process's zygote where it can be
    (in a network and mount namespace of its own all the same): sandgate's imports are then done once for the probe
    and the zygote it forks from itself, not again in an interpreter it starts."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = zygote.client(START_TIMEOUT_S) if fork_refusal(sys.executable, []) is None else None
    if server is not None and server.forks(env):
        try:
            done = zygote.run(server, list(args), env, os.getcwd(), None, timeout, script=probe, unshare=True)
        except zygote.ZygoteGone:
            pass
        else:
            return subprocess.CompletedProcess([sys.executable, probe, *args], done.returncode,
                                               done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))
    return subprocess.run(["unshare", "-n", "-m", "--", sys.executable, probe, *args], capture_output=True, text=True,
                          timeout=timeout)


def enter() -> None:
    """First thing in a probe: its sandgate starts (and CLI runs) fork from a zygote of the probe's; a probe forked
    from the test process's zygote forks that zygote from itself (it must not have started a thread yet)."""
    FORK["on"] = True
    if "gateway.app" in sys.modules and fork_refusal(sys.executable, []) is None:
        zygote.client(START_TIMEOUT_S, fork=True)


def _net(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def isolation(*pids: int) -> dict:
    """Where this probe and PIDS (its sandgates) run: their network namespaces and the links this one has."""
    return {"net": _net("self"), "links": sorted(name for _, name in socket.if_nameindex()),
            "pids": [_net(pid) for pid in pids]}


def assert_isolated(seen: dict) -> None:
    """The probe ran in a network namespace that is not the test's, with loopback only, and so did its sandgates:
    a packet to a forbidden address had nowhere to go, whatever sandgate decided."""
    assert seen["net"] != _net("self"), seen
    assert seen["links"] == ["lo"], seen
    assert seen["pids"] and all(net == seen["net"] for net in seen["pids"]), seen
