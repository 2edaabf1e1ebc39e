"""The embedded engines (threads and worker processes) fail closed: undefined, malformed, erroring and slow policies all deny."""
from __future__ import annotations

import asyncio
import time

import pytest

from gateway.policy.decision import parse_decision
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.isolated import IsolatedEngine

ENGINES = [EmbeddedEngine, IsolatedEngine]


def write_policy(tmp_path, body: str):
    (tmp_path / "egress.rego").write_text("package sandgate.egress\nimport rego.v1\n" + body)
    (tmp_path / "toolcall.rego").write_text("package sandgate.toolcall\nimport rego.v1\n"
                                           'decision := {"action": "allow", "reasons": [], "codes": []}\n')
    return tmp_path


async def decide(tmp_path, body, doc=None, timeout_s=2.0, engine_cls=EmbeddedEngine):
    engine = engine_cls(write_policy(tmp_path, body), timeout_s=timeout_s, workers=1)
    await engine.start()
    try:
        return await engine.decide("egress", doc or {"request": {"host": "x"}})
    finally:
        await engine.close()


@pytest.mark.parametrize("raw, code", [
    (None, "policy.undefined"), ("allow", "policy.malformed"), ({"action": "maybe"}, "policy.malformed"),
    ({"action": "allow", "reasons": "x"}, "policy.malformed"), ({"action": "allow", "codes": [1]}, "policy.malformed"),
])
def test_parse_decision_denies_odd_values(raw, code):
    d = parse_decision(raw)
    assert d.action == "deny" and d.codes == (code,)


def test_parse_decision_keeps_a_good_one():
    d = parse_decision({"action": "ask", "reasons": ["r"], "codes": ["c"], "approval": {"ttl_s": 60}})
    assert (d.action, d.reasons, d.codes, d.approval_ttl_s) == ("ask", ("r",), ("c",), 60.0)


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_undefined_decision_denies(tmp_path, engine_cls):
    d = await decide(tmp_path, 'decision := {"action": "allow", "reasons": [], "codes": []} if input.nope\n',
                     engine_cls=engine_cls)
    assert d.action == "deny" and d.code == "policy.undefined"


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_wrong_shape_denies(tmp_path, engine_cls):
    d = await decide(tmp_path, 'decision := {"action": "yes"}\n', engine_cls=engine_cls)
    assert d.action == "deny" and d.code == "policy.malformed"


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_slow_policy_times_out_and_denies(tmp_path, engine_cls):
    # About 1 s of CPU here, 20 times the timeout: the embedded engine's thread cannot be stopped and runs it to
    # the end (3,000,000 cost 2.7 s of the test process's CPU); a worker process is killed at the timeout.
    body = 'decision := {"action": "allow", "reasons": [], "codes": []} if {\n' \
           '\tinput.slow\n\tcount([x | some x in numbers.range(1, 1000000); x % 7 == 0]) > 0\n}\n'
    d = await decide(tmp_path, body, {"slow": True}, timeout_s=0.05, engine_cls=engine_cls)
    assert d.action == "deny" and d.code == "policy.timeout"


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_unknown_kind_denies(tmp_path, engine_cls):
    engine = engine_cls(write_policy(tmp_path, 'decision := {"action": "allow"}\n'), workers=1)
    await engine.start()
    try:
        d = await engine.decide("nonsense", {})
    finally:
        await engine.close()
    assert d.action == "deny"


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_decision_cache_is_per_revision(tmp_path, engine_cls):
    engine = engine_cls(write_policy(tmp_path, 'decision := {"action": "allow", "reasons": [], "codes": []}\n'),
                            workers=1)
    await engine.start()
    try:
        assert (await engine.decide("egress", {"a": 1})).action == "allow"
        write_policy(tmp_path, 'decision := {"action": "deny", "reasons": ["no"], "codes": ["x"]}\n')
        assert await engine.reload() is True
        assert (await engine.decide("egress", {"a": 1})).action == "deny"
    finally:
        await engine.close()


@pytest.mark.parametrize("engine_cls", ENGINES)
async def test_impure_policy_is_not_cached(tmp_path, engine_cls):
    engine = engine_cls(write_policy(tmp_path, 'decision := {"action": "allow", "reasons": [], "codes": []} '
                                                   'if time.now_ns() > 0\n'), workers=1)
    await engine.start()
    try:
        assert engine.cache.enabled is False
    finally:
        await engine.close()


ALLOW = 'decision := {"action": "allow", "reasons": [], "codes": []}\n'


# How long a test waits for a replacement policy worker: a restart is a Python start and a policy compile, many
# seconds on a busy machine (as long as the pool itself gives a worker to start).
RESTART_WAIT_S = 60.0


async def test_killed_worker_denies_then_recovers(tmp_path):
    import os
    import signal

    # A slow evaluation to kill the worker in the middle of, and a cheap one to see its replacement answer. The
    # timeout is far above either (nothing here may time out: the deny must be the crash's).
    engine = IsolatedEngine(write_policy(tmp_path, ALLOW.removesuffix("\n") + ' if input.fast\n'
                                                   'decision := {"action": "allow", "reasons": [], "codes": []} '
                                                   'if {\n\tinput.slow\n\tcount([x | some x in numbers.range(1, 3000000)]) > 0\n}\n'),
                            timeout_s=60, workers=1)
    await engine.start()
    try:
        pending = asyncio.create_task(engine.decide("egress", {"slow": True, "n": 1}))
        await asyncio.sleep(0.1)
        os.kill(engine._pool.workers[0].proc.pid, signal.SIGKILL)   # as if the engine had crashed
        d = await pending
        assert d.action == "deny" and d.code == "policy.error"
        # Asked at once, while the dead worker may not be reaped yet: denied for the crash, not sent to the dead
        # worker to wait out the timeout (it was: a policy.timeout after 60 s).
        again = await engine.decide("egress", {"fast": True})
        assert again.code == "policy.error"
        deadline = time.monotonic() + RESTART_WAIT_S
        while again.action != "allow" and time.monotonic() < deadline:
            assert again.code == "policy.error"          # no worker yet: denied, never allowed by default
            await asyncio.sleep(0.1)
            again = await engine.decide("egress", {"fast": True})
        assert again.action == "allow", f"no replacement worker took over in {RESTART_WAIT_S:.0f} s"
    finally:
        await engine.close()


async def test_timeout_restarts_the_stuck_worker(tmp_path):
    body = 'decision := {"action": "allow", "reasons": [], "codes": []} if {\n' \
           '\tinput.slow\n\tcount([x | some x in numbers.range(1, 3000000); x % 7 == 0]) > 0\n}\n'
    engine = IsolatedEngine(write_policy(tmp_path, body), timeout_s=0.05, workers=1)
    await engine.start()
    try:
        first_pid = engine._pool.workers[0].proc.pid
        assert (await engine.decide("egress", {"slow": True})).code == "policy.timeout"
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline:
            w = engine._pool.workers[0]
            if w.alive and w.proc.pid != first_pid:
                break
            await engine.decide("egress", {"fast": True})
            await asyncio.sleep(0.1)
        assert engine._pool.workers[0].proc.pid != first_pid, f"the worker was not replaced in {RESTART_WAIT_S:.0f} s"
    finally:
        await engine.close()


async def test_reload_rejects_broken_policy_and_keeps_serving(tmp_path):
    engine = IsolatedEngine(write_policy(tmp_path, ALLOW), workers=1)
    await engine.start()
    try:
        rev = engine.rev
        (tmp_path / "egress.rego").write_text("package sandgate.egress\nimport rego.v1\ndecision := {\n")
        assert await engine.reload() is False
        assert engine.rev == rev and engine.last_error
        assert (await engine.decide("egress", {"b": 1})).action == "allow"
    finally:
        await engine.close()
