"""What one connection can make the gateway hold is capped: prepared statements, and messages sent without
waiting for their results."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from gateway.postgres import wire
from gateway.postgres.connection import MAX_PIPELINE, MAX_PREPARED
from tests.gateway.postgres.conftest import db_session, decide, url_parts
from tests.gateway.postgres.test_login_e2e import _raw_login, _read


def _approving(sg, sid: str) -> threading.Event:
    """Approve the session's asks in the background (DEALLOCATE asks under some policies) until the event is set."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for item in sg.call("GET", f"/v1/approvals?status=pending&session={sid}").json():
                decide(sg, item["id"], "approve")
            time.sleep(0.1)
    threading.Thread(target=run, daemon=True).start()
    return stop


def test_prepared_statements_beyond_the_cap_are_54000(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    stop = _approving(pg_gateway, sess["id"])
    with psycopg.connect(url, autocommit=True) as conn:
        pg = conn.pgconn
        for i in range(MAX_PREPARED):
            res = pg.prepare(f"s{i}".encode(), f"SELECT {i}".encode())
            assert res.status == psycopg.pq.ExecStatus.COMMAND_OK, res.error_message
        res = pg.prepare(b"one_more", b"SELECT 1")
        assert res.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"54000"
        pg.exec_(b"DEALLOCATE s0")              # what the server forgets, the gateway forgets: room for one
        assert pg.prepare(b"one_more", b"SELECT 1").status == psycopg.pq.ExecStatus.COMMAND_OK
        pg.exec_(b"DEALLOCATE ALL")
        for i in range(5):
            assert pg.prepare(f"again{i}".encode(), b"SELECT 1").status == psycopg.pq.ExecStatus.COMMAND_OK
        assert conn.execute("SELECT 1").fetchone() == (1,)
    stop.set()


def test_a_pipeline_past_the_cap_is_closed(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    parts = url_parts(url)
    tls = _raw_login(parts["port"], parts["user"], parts["password"])
    describe = wire.message(b"D", b"S" + wire.cstr(""))
    tls.sendall(describe * (MAX_PIPELINE + 10))
    while True:
        kind, body = _read(tls)
        if kind == b"E":
            fields = wire.parse_fields(body)
            if fields.get("S") == "FATAL":
                assert fields["C"] == "54000"
                break
    tls.close()
