"""Policy workers forked from a forker (gateway/policy/forker.py): the same workers, killed, replaced and failing
their evaluations as exec'd ones do, holding no descriptor but their stdin, stdout and stderr; a forker that dies
or cannot be made leaves the pool starting workers as new processes.

The forker here is exec'd (`forker.serve` in a fresh interpreter): the test process may run threads, and `start`
forks one only from a process with a single thread. What runs in it is the same code; `sandgate serve`'s own
forker, forked by `start`, is checked end to end in tests/gateway/egress/test_robustness_e2e.py."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.policy import forker as policy_forker
from gateway.policy.isolated import IsolatedEngine
from gateway.policy.pool import Worker, WorkerError, WorkerPool

ALLOW = 'decision := {"action": "allow", "reasons": [], "codes": []}\n'
SLOW = ('decision := {"action": "allow", "reasons": [], "codes": []} if {\n'
        '\tinput.slow\n\tcount([x | some x in numbers.range(1, 3000000); x % 7 == 0]) > 0\n}\n'
        'decision := {"action": "allow", "reasons": [], "codes": []} if input.fast\n')
WAIT_S = 60.0


def write_policy(tmp: Path, body: str) -> Path:
    (tmp / "egress.rego").write_text("package sandgate.egress\nimport rego.v1\n" + body)
    (tmp / "toolcall.rego").write_text("package sandgate.toolcall\nimport rego.v1\n" + body)
    return tmp


def exec_forker() -> policy_forker.Forker:
    """A forker in a fresh interpreter, given its end of the socket (what `start` forks, minus the fork)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    code = "import os, sys; from gateway.policy.forkserver import serve; serve(int(sys.argv[1]), os.getppid())"
    proc = subprocess.Popen([sys.executable, "-c", code, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            stdin=subprocess.DEVNULL)
    theirs.close()
    return policy_forker.Forker(proc.pid, os.pidfd_open(proc.pid), ours)


@pytest.fixture(scope="module")
def forker():
    f = exec_forker()
    yield f
    f.close()


@pytest.fixture
def installed(forker):
    previous = policy_forker.install(forker)
    yield forker
    policy_forker.install(previous)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def until(check, what: str):
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S:.0f} s"
        await asyncio.sleep(0.05)


async def test_a_forked_worker_evaluates_and_holds_only_its_stdin_stdout_and_stderr(tmp_path, installed, monkeypatch):
    (tmp_path / "p").mkdir()
    policy = write_policy(tmp_path / "p", ALLOW)
    monkeypatch.chdir(tmp_path)
    pool = WorkerPool("p", 1)                    # relative: resolved in the worker's cwd, this process's
    await pool.start()
    try:
        worker = pool.workers[0]
        assert isinstance(worker.proc, policy_forker.ForkedWorker)
        pid = worker.proc.pid
        assert parent_of(pid) == installed.pid
        assert Path(f"/proc/{pid}/cwd").resolve() == tmp_path.resolve()
        fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert sorted(fds) == [0, 1, 2], fds            # no descriptor of the forker's, ours, or another worker's
        assert fds[0].startswith("pipe:") and fds[1].startswith("pipe:") and fds[0] != fds[1]
        ours = os.stat(2)
        theirs = os.stat(f"/proc/{pid}/fd/2")
        assert (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)   # this process's stderr
        value = await pool.evaluate("egress", {}, 30)
        assert value == {"action": "allow", "reasons": [], "codes": []}
        # a second worker holds nothing of the first's (its pipes were closed in the forker before it forked)
        other = Worker(str(policy))
        await other.start()                          # ready: past its set-up
        try:
            assert isinstance(other.proc, policy_forker.ForkedWorker)
            assert sorted(int(fd) for fd in os.listdir(f"/proc/{other.proc.pid}/fd")) == [0, 1, 2]
        finally:
            other.kill()
            await other.proc.wait()
        assert other.proc.returncode == -signal.SIGKILL and not other.alive
    finally:
        await pool.close()
    await until(lambda: gone(pid), "the worker ends once its stdin closes")


async def test_a_timeout_kills_the_forked_worker_and_a_forked_one_replaces_it(tmp_path, installed):
    engine = IsolatedEngine(write_policy(tmp_path, SLOW), timeout_s=0.05, workers=1)
    await engine.start()
    try:
        first = engine._pool.workers[0].proc
        assert isinstance(first, policy_forker.ForkedWorker)
        assert (await engine.decide("egress", {"slow": True})).code == "policy.timeout"
        await until(lambda: gone(first.pid), "the stuck worker is killed")
        deadline = time.monotonic() + WAIT_S
        while not (engine._pool.workers[0].alive and engine._pool.workers[0].proc.pid != first.pid):
            assert time.monotonic() < deadline, "the worker was not replaced"
            assert (await engine.decide("egress", {"fast": True, "n": time.monotonic()})).action in ("allow", "deny")
            await asyncio.sleep(0.05)
        again = engine._pool.workers[0].proc
        assert isinstance(again, policy_forker.ForkedWorker) and parent_of(again.pid) == installed.pid
        assert (await engine.decide("egress", {"fast": True, "n": -1})).action == "allow"
    finally:
        await engine.close()


async def test_a_forked_worker_that_dies_fails_its_pending_evaluations(tmp_path, installed):
    pool = WorkerPool(str(write_policy(tmp_path, SLOW)), 1)
    await pool.start()
    try:
        worker = pool.workers[0]
        pending = asyncio.create_task(pool.evaluate("egress", {"slow": True}, 60))
        await until(lambda: worker.pending, "the evaluation is sent")
        os.kill(worker.proc.pid, signal.SIGKILL)            # a crash, not our kill
        with pytest.raises(WorkerError, match="exited"):
            await pending
        await until(lambda: not worker.alive, "the dead worker is seen")
        with pytest.raises(WorkerError):                    # asked at once: denied, never sent to the dead one
            await worker.evaluate("egress", {"fast": True}, 60)
    finally:
        await pool.close()


async def test_a_dead_forker_leaves_workers_started_as_new_processes(tmp_path, caplog):
    f = exec_forker()
    previous = policy_forker.install(f)
    try:
        pool = WorkerPool(str(write_policy(tmp_path, ALLOW)), 1)
        await pool.start()
        forked = pool.workers[0].proc
        assert isinstance(forked, policy_forker.ForkedWorker)
        signal.pidfd_send_signal(f._pidfd, signal.SIGKILL)
        await until(lambda: gone(f.pid), "the forker is killed")
        # its worker lives on (a separate process with its own pipes to us)
        assert await pool.evaluate("egress", {}, 30) == {"action": "allow", "reasons": [], "codes": []}
        caplog.set_level(logging.WARNING, logger="sandgate.policy")
        again = WorkerPool(pool.directory, 2)
        await again.start()
        try:
            for w in again.workers:
                assert isinstance(w.proc, asyncio.subprocess.Process)
                assert parent_of(w.proc.pid) == os.getpid()
            assert await again.evaluate("egress", {}, 30) == {"action": "allow", "reasons": [], "codes": []}
        finally:
            await again.close()
        assert f.gone is not None and "forker exited" in f.gone
        said = [r.getMessage() for r in caplog.records if "forker" in r.getMessage()]
        assert len(said) == 1 and "start as new processes" in said[0], said       # said once, with why
        await pool.close()
    finally:
        policy_forker.install(previous)
        f.close()


async def test_no_forker_is_made_where_forking_is_unsafe_or_refused(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="sandgate.policy")
    monkeypatch.setenv(policy_forker.SPAWN_ENV, "exec")
    assert policy_forker.start() is None
    monkeypatch.delenv(policy_forker.SPAWN_ENV)
    assert policy_forker.start() is None         # an event loop runs here (and perhaps threads)
    reasons = [r.getMessage() for r in caplog.records]
    assert f"{policy_forker.SPAWN_ENV}=exec" in reasons[0]
    assert "not safe" in reasons[1]
    assert policy_forker.current() is None
