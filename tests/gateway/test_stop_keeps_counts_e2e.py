"""A session's counters (`input.session.stats`: tool calls, requests, ...) survive a stop: SIGTERM writes the
counts taken since the last sync (regression: they were synced once a second by a background task that the
stop cancelled, so a restart forgot up to a second of tool calls, and a policy limiting them saw fewer)."""
from __future__ import annotations

import sqlite3

from tests.support.gateway import Sandgate


def test_sigterm_keeps_the_counts_taken_since_the_last_sync(tmp_path):
    sg = Sandgate(tmp_path).start()
    try:
        sess = sg.session(allow=["allowed.test"])
        for step in range(40):
            resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": step,
                                                         "args": {"command": f"echo {step}"}})
            assert resp.status_code == 200, resp.text
    finally:
        assert sg.stop() == 0
    with sqlite3.connect(sg.data_dir / "sandgate.db") as db:
        row = db.execute("SELECT toolcalls FROM session_stats WHERE session = ?", (sess["id"],)).fetchone()
    assert row is not None and row[0] == 40

    sg.start()                                 # and the restarted process goes on from there
    try:
        resp = sg.call("POST", "/v1/toolcalls", json={"session": sess["id"], "tool": "shell", "step": 40,
                                                     "args": {"command": "echo again"}})
        assert resp.status_code == 200, resp.text
    finally:
        assert sg.stop() == 0
    with sqlite3.connect(sg.data_dir / "sandgate.db") as db:
        assert db.execute("SELECT toolcalls FROM session_stats WHERE session = ?",
                          (sess["id"],)).fetchone()[0] == 41
