"""The PostgreSQL gateway through real sockets: real psql, TLS verify-full against sandgate's CA, SCRAM against the
session's placeholder, the upstream login with the real password."""
from __future__ import annotations

import subprocess

from tests.conftest import need_binary
from tests.gateway.postgres.conftest import db_session


def psql(url: str, sql: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([need_binary("psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          capture_output=True, text=True, timeout=60, env=env)


def test_psql_selects_through_the_gateway(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    assert "sslmode=verify-full" in url
    out = psql(url, "SELECT count(*) FROM t")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "10"


def test_notices_and_notifications_are_relayed(pg_gateway, cluster):
    import threading

    import psycopg

    from tests.gateway.postgres.conftest import decide, pending
    sess, url = db_session(pg_gateway)
    notices: list = []
    conn = psycopg.connect(url, autocommit=True)
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))

    def approve_all() -> None:                # LISTEN and DO are not known to the default policy: they ask
        for _ in range(2):
            for item in pending(pg_gateway, sess["id"]):
                decide(pg_gateway, item["id"], "approve")
    helper = threading.Thread(target=approve_all)
    helper.start()
    conn.execute("LISTEN sandgate_test")
    conn.execute("DO $$ BEGIN RAISE NOTICE 'hello from the server'; END $$")
    helper.join(30)
    assert notices == ["hello from the server"]
    cluster.psql_local("NOTIFY sandgate_test, 'payload-1'")
    got = next(conn.notifies(timeout=10, stop_after=1))
    assert (got.channel, got.payload) == ("sandgate_test", "payload-1")
    conn.close()
