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
