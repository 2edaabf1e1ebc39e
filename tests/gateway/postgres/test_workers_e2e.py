"""`serve --workers 2`: a CancelRequest reaches the worker that holds the connection, whichever worker the kernel
hands the cancel's own connection to."""
from __future__ import annotations

import json

import psycopg
import pytest

from tests.conftest import need
from tests.gateway.postgres.conftest import cancel_once_running, db_session, gateway_config, policy_dir
from tests.support.gateway import Sandgate
from tests.support.pg import PG_URL, pg_available
from tests.support.pgcluster import APP_PASSWORD
from tests.support.upstream import free_port


@pytest.fixture(scope="module")
def pg_workers(pgcluster, tmp_path_factory):
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    tmp = tmp_path_factory.mktemp("pg-workers")
    config = gateway_config(pgcluster, free_port()) | {"store": {"url": PG_URL}, "policy": {"dir": str(policy_dir(tmp))}}
    sg = Sandgate(tmp, config, env={"PROD_DB_PASSWORD": APP_PASSWORD},
                  serve_args=("--workers", "2"))
    sg.start()
    try:
        sg.pids = json.loads((sg.data_dir / "listen.json").read_text())["workers"]
        yield sg
    finally:
        sg.stop()


def test_cancel_reaches_the_worker_holding_the_connection(pg_workers, cluster):
    _, url = db_session(pg_workers)
    for _ in range(6):          # the cancel's connection lands on either worker: both paths, several times
        conn = psycopg.connect(url, autocommit=True)
        canceller = cancel_once_running(cluster, conn, "SELECT pg_sleep(20)")
        with pytest.raises(psycopg.errors.QueryCanceled):   # only the cancel ends it with this error
            conn.execute("SELECT pg_sleep(20)")
        canceller.join(30)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.close()
