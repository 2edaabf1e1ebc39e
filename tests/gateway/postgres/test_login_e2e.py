"""Who may connect: TLS required, SCRAM against the session's own placeholder, the session's databases only,
an ended session closed at once, a per-session connection cap; and the real password nowhere the sandbox or a
log could see it."""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
import time

import asyncpg
import psycopg
import pytest
from scramp import ScramClient

from gateway.postgres import wire
from tests.gateway.postgres.conftest import cancel_once_running, db_session, url_parts
from tests.support.pgcluster import APP_PASSWORD


def sqlstate(url: str) -> str | None:
    """The SQLSTATE a fresh connection (asyncpg: it reports the code of a FATAL at login) ends with, or None."""
    async def go() -> str | None:
        try:
            conn = await asyncpg.connect(url, timeout=10)
        except asyncpg.PostgresError as exc:
            return exc.sqlstate
        try:
            await conn.fetchval("SELECT 1")
        except asyncpg.PostgresError as exc:
            return exc.sqlstate
        finally:
            await conn.close()
        return None
    return asyncio.run(go())


def test_wrong_password_and_another_sessions_password_are_28p01(pg_gateway, cluster):
    _, url_a = db_session(pg_gateway)
    _, url_b = db_session(pg_gateway)
    a, b = url_parts(url_a), url_parts(url_b)
    assert sqlstate(url_a.replace(a["password"], "wrong-password")) == "28P01"
    assert sqlstate(url_a.replace(a["password"], b["password"])) == "28P01"
    assert sqlstate(url_a.replace(a["user"], "s_0000000000000000", 1)) == "28P01"
    assert sqlstate(url_a.replace(a["user"], "app", 1).replace(a["password"], APP_PASSWORD)) == "28P01"
    assert sqlstate(url_a) is None


def test_a_database_the_session_does_not_list_is_3d000(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    assert sqlstate(url.replace("/prod?", "/app?")) == "3D000"
    resp = pg_gateway.call("POST", "/v1/sessions", json={"databases": ["prod", "nope"]})
    assert resp.status_code == 400 and "nope" in resp.json()["detail"]


def test_an_ended_sessions_connection_is_closed_with_57p01(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    conn = psycopg.connect(url, autocommit=True)
    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert pg_gateway.call("DELETE", f"/v1/sessions/{sess['id']}").status_code == 204
    with pytest.raises(psycopg.OperationalError) as err:     # a statement left to run would end without error
        conn.execute("SELECT pg_sleep(90)")
    assert err.value.sqlstate == "57P01" or "session has ended" in str(err.value)
    conn.close()
    assert sqlstate(url) == "57P01"


def test_connections_beyond_the_per_session_cap_are_53300(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    conns = [psycopg.connect(url) for _ in range(10)]
    try:
        assert sqlstate(url) == "53300"
        _, other = db_session(pg_gateway)           # another session is not starved
        assert sqlstate(other) is None
    finally:
        for c in conns:
            c.close()
    assert sqlstate(url) is None


def _raw_login(port: int, user: str, password: str) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(struct.pack("!ii", 8, wire.GSSENC_REQUEST))
    assert sock.recv(1) == b"N"                       # GSSAPI encryption refused cleanly
    sock.sendall(wire.ssl_request())
    assert sock.recv(1) == b"S"
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    tls.sendall(wire.startup_message({"user": user, "database": "prod"}))
    scram = ScramClient(["SCRAM-SHA-256"], "x", password)
    assert _read(tls)[0] == b"R"
    tls.sendall(wire.sasl_initial("SCRAM-SHA-256", scram.get_client_first().encode()))
    kind, body = _read(tls)
    scram.set_server_first(body[4:].decode())
    tls.sendall(wire.message(b"p", scram.get_client_final().encode()))
    while True:
        kind, body = _read(tls)
        assert kind != b"E", wire.parse_fields(body)
        if kind == b"Z":
            return tls


def _read(sock) -> tuple[bytes, bytes]:
    head = b""
    while len(head) < 5:
        head += sock.recv(5 - len(head))
    kind, length = struct.unpack("!ci", head)
    body = b""
    while len(body) < length - 4:
        body += sock.recv(length - 4 - len(body))
    return kind, body


def test_plaintext_is_refused_and_function_call_is_refused(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    parts = url_parts(url)
    with socket.create_connection(("127.0.0.1", parts["port"]), timeout=10) as sock:
        sock.sendall(wire.startup_message({"user": parts["user"], "database": "prod"}))
        kind, body = _read(sock)
        assert kind == b"E" and wire.parse_fields(body)["C"] == "28000"
    tls = _raw_login(parts["port"], parts["user"], parts["password"])
    # FunctionCall: lo_unlink (oid 964) of OID 1, one int4 argument
    tls.sendall(wire.message(b"F", struct.pack("!ih", 964, 1) + struct.pack("!h", 1) + struct.pack("!ii", 4, 1)
                             + struct.pack("!h", 0)))
    kind, body = _read(tls)
    fields = wire.parse_fields(body)
    assert kind == b"E" and fields["C"] == "42501" and "FunctionCall" in fields["M"]
    assert _read(tls) == (b"Z", b"I")
    tls.sendall(wire.message(b"Q", wire.cstr("SELECT count(*) FROM t")))
    kinds = []
    while True:
        kind, body = _read(tls)
        kinds.append(kind)
        if kind == b"Z":
            break
    assert kinds == [b"T", b"D", b"C", b"Z"]
    tls.close()


def test_copy_from_stdin_is_decided_then_streamed(pg_gateway, cluster):
    _, url = db_session(pg_gateway)
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor().copy("COPY t (id, v) FROM STDIN") as copy:
            for i in range(1000, 1500):
                copy.write_row((i, f"copied {i}"))
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (510,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE t")
    assert cluster.count() == 510


def test_cancel_request_cancels_only_this_sessions_query(pg_gateway, cluster):
    _, url_a = db_session(pg_gateway)
    _, url_b = db_session(pg_gateway)
    a, b = psycopg.connect(url_a, autocommit=True), psycopg.connect(url_b, autocommit=True)
    out: dict = {}

    def sleep_b() -> None:
        started = time.time()
        b.execute("SELECT pg_sleep(3)")
        out["b"] = time.time() - started
    th = threading.Thread(target=sleep_b)
    th.start()
    canceller = cancel_once_running(cluster, a, "SELECT pg_sleep(60)")
    with pytest.raises(psycopg.errors.QueryCanceled):       # only the cancel ends it with this error
        a.execute("SELECT pg_sleep(60)")
    canceller.join(30)
    th.join(20)
    assert out["b"] >= 2.9                                  # the other session's query ran to its end
    assert a.execute("SELECT 1").fetchone() == (1,)          # and this connection is still usable
    a.close()
    b.close()


def test_the_real_password_and_placeholders_are_nowhere(pg_gateway, cluster):
    sess, url = db_session(pg_gateway)
    placeholder = url_parts(url)["password"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT v FROM t WHERE id = %s", (1,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE t")
    admin = pg_gateway.token("admin", "auditor")
    texts = [pg_gateway.log(), pg_gateway.call("GET", "/v1/events", token=admin).text,
             pg_gateway.call("GET", "/metrics", token=admin).text,
             pg_gateway.call("GET", f"/v1/sessions/{sess['id']}").text,
             pg_gateway.call("GET", "/v1/approvals", token=admin).text]
    assert 'sandgate_decisions_total{action="deny",kind="sql"}' in texts[2]      # statements counted by decision
    assert 'sandgate_decisions_total{action="allow",kind="sql"}' in texts[2]
    for text in texts:
        assert APP_PASSWORD not in text
        assert placeholder not in text
    assert not any(APP_PASSWORD in v for v in sess["env"].values())
    events = pg_gateway.events(sess["id"])
    sql = [e for e in events if e["kind"] == "sql"]
    assert [e["detail"]["statement"] for e in sql] == ["SELECT v FROM t WHERE id = (1)", "TRUNCATE t"]
    assert sql[-1]["action"] == "deny" and sql[-1]["codes"] == ["site.no_truncate"]
    assert sql[0]["detail"]["tag"] == "SELECT 1" and sql[0]["detail"]["rows"] == 1
    assert sql[0]["detail"]["database"] == "prod"


def test_startup_options_and_replication_never_reach_the_server(pg_gateway, cluster):
    """`options=-c ...` in the start-up packet would change the session with no statement to decide: the server
    never gets it; a replication connection is refused."""
    _, url = db_session(pg_gateway)
    opts = ("-c search_path=evil -c session_replication_role=replica -c default_transaction_read_only=on "
            "-c standard_conforming_strings=off -c role=postgres")
    with psycopg.connect(url, autocommit=True, options=opts, application_name="red") as conn:
        got = conn.execute("SELECT current_user, current_setting('search_path'), "
                           "current_setting('session_replication_role'), "
                           "current_setting('default_transaction_read_only'), "
                           "current_setting('standard_conforming_strings'), "
                           "current_setting('application_name')").fetchone()
    assert got == ("app", '"$user", public', "origin", "off", "on", "red"), got
    for mode in ("database", "true"):
        with pytest.raises(psycopg.OperationalError) as err:
            psycopg.connect(url, replication=mode).close()
        assert "replication connections are not supported" in str(err.value)
