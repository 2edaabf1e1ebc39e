"""A statement held for approval across a sandgate restart: the client gets a clear error, the statement never
ran; approved afterwards, the same statement sent again runs once, and only once. And `sandgate run --database`."""
from __future__ import annotations

import os
import subprocess
import threading

from tests.conftest import need_binary
from tests.gateway.postgres.conftest import db_session, decide, pending
from tests.support.gateway import gateway_cli


def psql(url: str, sql: str) -> subprocess.CompletedProcess:
    return subprocess.run([need_binary("psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          capture_output=True, text=True, timeout=60)


def test_a_held_statement_across_a_restart_runs_once(pg_gateway, cluster):
    sess, url = db_session(pg_gateway, workload="persistent")
    out: dict = {}
    th = threading.Thread(target=lambda: out.setdefault("r", psql(url, "DELETE FROM t WHERE id > 5")))
    th.start()
    items = pending(pg_gateway, sess["id"])
    assert len(items) == 1
    pg_gateway.stop()
    th.join(30)
    assert out["r"].returncode != 0
    assert "sandgate is stopping" in out["r"].stderr and "did not run" in out["r"].stderr
    assert cluster.count() == 10
    pg_gateway.start()
    decide(pg_gateway, items[0]["id"], "approve")
    assert cluster.count() == 10                          # approving runs nothing by itself
    again = psql(url, "DELETE FROM t WHERE id > 5")         # the client's retry: the approval is used once
    assert again.returncode == 0, again.stderr
    assert cluster.count() == 5
    cluster.psql_local("INSERT INTO t SELECT g, 'x' FROM generate_series(6, 10) g")
    th2 = threading.Thread(target=lambda: out.setdefault("r2", psql(url, "DELETE FROM t WHERE id > 5")))
    th2.start()
    second = pending(pg_gateway, sess["id"])                # a third time asks again
    assert len(second) == 1 and second[0]["id"] != items[0]["id"]
    decide(pg_gateway, second[0]["id"], "deny")
    th2.join(30)
    assert out["r2"].returncode != 0 and cluster.count() == 10


def test_sandgate_run_database(pg_gateway, cluster):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDGATE_")}
    res = gateway_cli("run", "--api-url", pg_gateway.api, "--token", pg_gateway.harness_token, "--database", "prod",
                      "--", "sh", "-c", 'psql -X -At "$PROD_DATABASE_URL" -c "SELECT v FROM t WHERE id = 2"',
                      timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "row2"
