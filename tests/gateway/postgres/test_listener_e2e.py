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

    from tests.gateway.postgres.conftest import decide
    sess, url = db_session(pg_gateway)
    notices: list = []
    conn = psycopg.connect(url, autocommit=True)
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))
    done = threading.Event()

    def approve_all() -> None:     # what the default policy asks about (LISTEN, DO), until both statements ran
        while not done.is_set():
            for item in pg_gateway.call("GET", f"/v1/approvals?status=pending&session={sess['id']}").json():
                decide(pg_gateway, item["id"], "approve")
            done.wait(0.1)
    helper = threading.Thread(target=approve_all)
    helper.start()
    try:
        conn.execute("LISTEN sandgate_test")
        conn.execute("DO $$ BEGIN RAISE NOTICE 'hello from the server'; END $$")
    finally:
        done.set()
        helper.join(30)
    assert notices == ["hello from the server"]
    cluster.psql_local("NOTIFY sandgate_test, 'payload-1'")
    got = next(conn.notifies(timeout=10, stop_after=1))
    assert (got.channel, got.payload) == ("sandgate_test", "payload-1")
    conn.close()


def test_the_gateway_listener_is_refused_to_sandboxes_through_the_proxy(pgcluster, tmp_path):
    """Even with loopback opened to sandboxes (egress.private_allow), the PostgreSQL gateway's own listener is
    not reachable through the egress proxy (as the proxy's and the API's are not)."""
    import requests

    from tests.gateway.postgres.conftest import gateway_config
    from tests.support.gateway import Sandgate
    from tests.support.pgcluster import APP_PASSWORD
    from tests.support.upstream import free_port
    pg_port = free_port()
    config = gateway_config(pgcluster, pg_port) | {"egress": {"private_allow": ["127.0.0.0/8"],
                                                             "raw_tcp": [f"127.0.0.1:{pg_port}"]}}
    with Sandgate(tmp_path, config, env={"PROD_DB_PASSWORD": APP_PASSWORD}) as sg:
        sess = sg.session(allow=["127.0.0.1"])
        proxy = sess["proxy_url"]
        resp = requests.get(f"http://127.0.0.1:{pg_port}/", proxies={"http": proxy}, timeout=10)
        assert resp.status_code == 403 and resp.json()["code"] == "address.own_listener"
        other = requests.get(f"http://127.0.0.1:{pgcluster.port}/", proxies={"http": proxy}, timeout=10)
        assert other.status_code != 403 or other.json().get("code") != "address.own_listener"
