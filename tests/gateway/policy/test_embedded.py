"""The embedded engine's evaluation threads (gateway/policy/embedded.py's EngineThread).

Before: a decision whose event loop closed while the thread evaluated it (sandgate stopping, a test's loop torn
down after a timeout: pytest warned about it in test_engine.py's test_slow_policy_times_out_and_denies) raised
`RuntimeError: Event loop is closed` when the thread handed back the result. The exception ended the thread, so
the engine lost an evaluator for good. Now a result nobody can receive is dropped and the thread goes on.
"""
from __future__ import annotations

import asyncio
import threading

from gateway.policy.embedded import EngineThread
from gateway.policy.loader import PolicySource, load_policy_dir
from tests.gateway.policy.test_engine import write_policy

ENTRY = "data.sandgate.egress.decision"


class HeldSource:
    """The real policy source, whose revision the engine thread can read only once the test lets it: the
    evaluation is then in flight, deterministically, for as long as the test wants."""

    def __init__(self, source: PolicySource):
        self.source = source
        self.release = threading.Event()

    def __getattr__(self, name: str):
        if name == "rev":
            self.release.wait()
        return getattr(self.source, name)


def test_a_loop_closed_mid_evaluation_leaves_the_thread_serving(tmp_path, monkeypatch):
    escaped: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    source = load_policy_dir(write_policy(tmp_path, 'decision := {"action": "allow", "reasons": [], "codes": []}\n'))
    held = HeldSource(source)
    thread = EngineThread("sandgate-rego-test")
    try:
        gone = asyncio.new_event_loop()

        async def submit_held() -> asyncio.Future:
            return thread.submit(held, ENTRY, {"request": {"host": "x"}})   # type: ignore[arg-type]

        pending = gone.run_until_complete(submit_held())
        gone.close()                                 # the loop goes away while the thread holds the job
        held.release.set()
        assert not pending.done()

        async def decide() -> object:              # the same thread, from another loop
            return await asyncio.wait_for(thread.submit(source, ENTRY, {"request": {"host": "x"}}), 60)

        value, _elapsed = asyncio.run(decide())
        assert value["action"] == "allow"
    finally:
        held.release.set()
        thread.stop()
        thread._thread.join(60)
    assert not thread._thread.is_alive()
    assert escaped == []
