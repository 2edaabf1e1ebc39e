"""The zygote (tests/support/zygote.py): a start forked from it is the real server in its own process, with the
start's environment, working directory and log, fresh random state, a Popen's exit statuses; the escape hatch runs
a real process, and the fallbacks are refused the fork; a zygote that died is replaced; the zygote ends with its
test process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.support import zygote
from tests.support.gateway import ROOT, Sandgate, gateway_cli


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def children_of(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_forked_start_is_the_server_with_the_starts_environment_cwd_and_log(tmp_path):
    # its policy workers exec'd, as they were by default before the policy worker forker (gateway/policy/forker.py):
    # a forked worker's /proc/PID/environ is the zygote's exec-time block, whatever its os.environ holds
    with Sandgate(tmp_path / "gw", env={"SG_ZYGOTE_PROBE": "from-this-start", "SANDGATE_POLICY_SPAWN": "exec"}) as sg:
        assert sg.forked, sg.exec_reason
        server = zygote.client(100)
        assert parent_of(sg.proc.pid) == server.proc.pid != os.getpid()
        assert Path(f"/proc/{sg.proc.pid}/cwd").resolve() == (tmp_path / "gw").resolve()
        assert requests.get(sg.api + "/healthz", timeout=10).json()["status"] == "ok"
        # its policy workers are real processes it started with its os.environ: the start's variables, and none
        # of the zygote's own (os.environ is replaced, not merged)
        workers = children_of(sg.proc.pid)
        assert workers
        for worker in workers:
            env = environ_of(worker)
            assert env["SG_ZYGOTE_PROBE"] == "from-this-start"
            assert "SANDGATE_ZYGOTE_PDEATHSIG" not in env
        assert sg.stop() == 0
    assert "sandgate ready" in sg.log()


def test_forked_starts_draw_fresh_random_state_and_report_exit_statuses_as_popen(tmp_path):
    first = Sandgate(tmp_path / "one").start()
    second = Sandgate(tmp_path / "two").start()
    try:
        assert first.forked and second.forked
        assert first.harness_token != second.harness_token
        one, two = first.session(), second.session()
        assert one["ca_pem"] != two["ca_pem"]           # keys made by OpenSSL in each child: reseeded after fork
        assert one["id"] != two["id"]
        assert first.proc.poll() is None
        second.proc.send_signal(signal.SIGKILL)
        assert second.proc.wait(60) == -signal.SIGKILL
        try:
            first.proc.wait(0.2)
            raise AssertionError("a running child reported an exit")
        except subprocess.TimeoutExpired:
            pass
    finally:
        assert first.stop() == 0
        second.stop()


def test_the_escape_hatch_another_python_and_an_import_time_variable_exec_a_real_process(tmp_path, monkeypatch):
    # which starts exec is decided before any process runs (Sandgate._zygote); the real process is then started
    # by the same branch of Sandgate.start whatever the reason: one real start here (the escape hatch) and the
    # other reasons checked as decisions, none forked
    server = zygote.client(100)
    spawned = server.spawned
    env = Sandgate(tmp_path / "env", env={"AIOHTTP_NO_EXTENSIONS": "1"})
    assert env._zygote() is None and "import" in env.exec_reason
    other = Sandgate(tmp_path / "other", python="/usr/bin/python3")
    assert other._zygote() is None and other.exec_reason == "another interpreter's install"
    assert server.spawned == spawned
    monkeypatch.setenv("SANDGATE_TEST_EXEC", "1")
    sg = Sandgate(tmp_path / "hatch").start()
    try:
        assert not sg.forked and sg.exec_reason == "SANDGATE_TEST_EXEC=1"
        assert isinstance(sg.proc, subprocess.Popen) and parent_of(sg.proc.pid) == os.getpid()
        assert b"-m\0gateway\0serve" in Path(f"/proc/{sg.proc.pid}/cmdline").read_bytes()
        assert requests.get(sg.api + "/healthz", timeout=10).ok
    finally:
        assert sg.stop() == 0
    assert server.spawned == spawned


def test_a_fork_after_the_zygote_died_comes_from_a_new_zygote(tmp_path, monkeypatch):
    # zygotes of this test's own: killing the test process's shared one would take with it the exit statuses of
    # the sandgates it forked for session fixtures (the PostgreSQL gateway's), still running on this worker. What
    # is tested is the zygote's lifecycle, not the server's: both import a light module instead of sandgate's
    # (~3 s of CPU each), and the fork is a CLI's (`--help`), through the zygote.client() every start goes through
    shared = zygote._CLIENT.get("client")
    monkeypatch.setattr(zygote, "_CLIENT", {})
    monkeypatch.setenv("SANDGATE_ZYGOTE_PRELOAD", "json")
    old = zygote.client(100)
    try:
        old.proc.kill()
        old.proc.wait()
        done = gateway_cli("--help", cwd=tmp_path)
        new = zygote.client(100)
        assert new is not old and new.proc.pid != old.proc.pid and new.proc.poll() is None
        assert new.spawned == 1 and not new.children                    # forked from the new one, and reaped
        assert done.returncode == 0 and "serve" in done.stdout, done.stderr
    finally:
        zygote.shutdown()               # this test's second zygote; the shared one comes back with _CLIENT
    assert shared is None or shared.proc.poll() is None, "the test process's own zygote was stopped"


def test_the_zygote_ends_with_its_test_process(tmp_path):
    code = ("import os, sys; from tests.support import zygote; c = zygote.client(100); "
            "print(c.proc.pid, flush=True); sys.stdin.read(); os._exit(0)")   # no atexit: as if it crashed
    # its zygote is never forked from: it imports a light module, not sandgate's (~1.5 s of CPU)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(ROOT), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "SANDGATE_ZYGOTE_PRELOAD": "json"})
    pid = int(proc.stdout.readline())
    assert Path(f"/proc/{pid}").exists()
    proc.stdin.close()
    proc.wait(60)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]:
        assert time.monotonic() < deadline, "the zygote outlived its test process"
        time.sleep(0.1)


def test_a_zygote_that_cannot_start_says_why_and_starts_exec(tmp_path, monkeypatch):
    """A zygote whose imports fail (here: a preloaded module that does not exist, read from the environment it is
    started with, in place of PRELOAD) is reported, and the start is refused the fork: it runs a real process, by
    the branch of Sandgate.start the escape hatch's test runs one with."""
    monkeypatch.setattr(zygote, "_CLIENT", {})
    monkeypatch.setattr(zygote, "_FAILED", {})
    monkeypatch.setenv("SANDGATE_ZYGOTE_PRELOAD", "gateway.no_such_module")
    sg = Sandgate(tmp_path / "nozygote")
    assert sg._zygote() is None and sg.exec_reason.startswith("no zygote: preload failed")
    assert "no_such_module" in sg.exec_reason
    assert zygote.client(100) is None and zygote.failure() == sg.exec_reason.removeprefix("no zygote: ")


def test_a_cli_process_forked_reads_stdin_and_prints_what_a_real_one_does(tmp_path, monkeypatch):
    args = ("policy", "eval", "--kind", "egress", "--input", "-", "--data-dir", str(tmp_path / "data"),
            "--policies", str(ROOT / "policies"))
    lines = '{"request": {"host": "example.com", "method": "GET"}}\nnot json\n'
    server = zygote.client(100)
    spawned, running = server.spawned, set(server.children)    # sandgates of this worker's fixtures may run
    forked = gateway_cli(*args, input=lines, cwd=tmp_path)
    assert server.spawned == spawned + 1 and set(server.children) <= running     # forked, and reaped
    monkeypatch.setenv("SANDGATE_TEST_EXEC", "1")
    real = gateway_cli(*args, input=lines, cwd=tmp_path)
    assert server.spawned == spawned + 1                                 # a real process
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.returncode == 1 and '"decision"' in forked.stdout and '"error"' in forked.stdout
