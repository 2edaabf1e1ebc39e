"""Which processes have a SQLite store open (gateway/store/presence.py), with real processes: a process is
alone until another joins, not alone while it runs, alone again once it has gone (also when it was killed)."""
from __future__ import annotations

import subprocess
import sys
import time

from gateway.store.presence import Presence

CHILD = """
import sys, time
from gateway.store.presence import Presence
p = Presence(); p.join(sys.argv[1]); print("joined", flush=True); sys.stdin.readline()
"""


def _child(db: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "joined"
    return proc


def test_alone_until_another_process_joins_and_again_after_it_leaves(tmp_path):
    db = str(tmp_path / "s.db")
    me = Presence()
    assert me.alone()                        # never joined: nothing to share
    me.join(db)
    assert me.alone() and me.alone()         # asking keeps the claim shared
    other = _child(db)
    try:
        assert not me.alone() and not me.alone()
    finally:
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait(10)
    assert me.alone()
    killed = _child(db)
    assert not me.alone()
    killed.kill()
    killed.wait(10)
    deadline = time.monotonic() + 10
    while not me.alone() and time.monotonic() < deadline:      # the kernel drops a dead process's lock
        time.sleep(0.01)
    assert me.alone()
    me.close()


def test_a_process_that_joins_while_another_asks_is_not_turned_away(tmp_path):
    db = str(tmp_path / "s.db")
    me = Presence()
    me.join(db)
    for _ in range(5):
        me.alone()
        other = _child(db)                   # join() waits for the instant the lock is exclusive
        assert not me.alone()
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait(10)
    me.close()


async def test_the_store_answers_from_its_last_poll(tmp_path):
    """`sole_writer()` (asked on every tool call) is a flag; `check_writers()` (the background poll) updates it."""
    from gateway.store import Store

    db = str(tmp_path / "s.db")
    store = Store(f"sqlite:///{db}")
    await store.open()
    try:
        assert store.join_writers() is False and store.sole_writer()      # nobody else on the file
        other = _child(db)
        try:
            assert store.sole_writer()                                     # not asked yet
            assert store.check_writers() is False and not store.sole_writer()
        finally:
            other.stdin.write("\n")
            other.stdin.flush()
            other.wait(10)
        assert store.check_writers() and store.sole_writer()
        joined = _child(db)
        try:
            second = Store(f"sqlite:///{db}")
            assert second.join_writers() is True and not second.sole_writer()   # it waits before writing
            second.close()
        finally:
            joined.stdin.write("\n")
            joined.stdin.flush()
            joined.wait(10)
    finally:
        store.close()
