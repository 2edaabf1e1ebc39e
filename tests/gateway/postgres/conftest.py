"""A PostgreSQL cluster of the test process's own and a sandgate whose PostgreSQL gateway fronts it as `prod`."""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import need
from tests.support.gateway import ROOT, Sandgate
from tests.support.pgcluster import APP_PASSWORD, PgCluster, cluster_available
from tests.support.upstream import free_port


def gateway_config(cluster: PgCluster, pg_port: int, **db) -> dict:
    return {
        "proxy": {"postgres_listen": f"127.0.0.1:{pg_port}"},
        "databases": {"prod": {"upstream": f"localhost:{cluster.port}", "dbname": "app", "user": "app",
                               "password": "env:PROD_DB_PASSWORD", "upstream_ca": cluster.ca_file,
                               "hold_timeout_s": 20, **db}},
    }


@pytest.fixture(scope="session")
def pgcluster():
    """One cluster for the test process (initdb and a start cost seconds each): the tests that change it go
    through `cluster`, which puts table `t` back as it was."""
    need(cluster_available(), "initdb under /usr/lib/postgresql/*/bin and a postgres user")
    with PgCluster() as cluster:
        yield cluster


SITE_RULE = r"""package sandgate.toolcall

import rego.v1

deny contains {"code": "site.no_truncate", "reason": "TRUNCATE is not allowed here"} if {
	"TRUNCATE" in object.get(object.get(input, "sql", {}), "kinds", [])
}

deny contains {"code": "site.tautology", "reason": "no 1=1 here"} if {
	regex.match(`(^|[^0-9$])\(?(E')?1'?\)?\s*=\s*\(?(E')?1'?\)?([^0-9]|$)`, object.get(input.tool.args, "query", ""))
}
"""


def policy_dir(tmp: Path) -> Path:
    """The shipped policies plus a site rule that denies TRUNCATE, and `pg_sleep` among the safe functions (the
    shipped table leaves it out: it holds the connection): the tests' statement that runs upstream until it is
    cancelled or its session ends."""
    pol = tmp / "policies"
    shutil.copytree(ROOT / "policies", pol, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (pol / "site_sql.rego").write_text(SITE_RULE)
    data = pol / "sandgate/config/toolcall/data.json"
    doc = json.loads(data.read_text())
    doc["sql_safe_functions"] = {"pg_sleep": True}          # merged with the shipped table
    data.write_text(json.dumps(doc))
    return pol


@pytest.fixture(scope="session")
def pg_gateway(pgcluster, tmp_path_factory):
    """One sandgate in front of the cluster for the test process, shared by the modules that take it (a start and a
    token cost seconds each): every test makes sessions of its own and looks only at what they did."""
    tmp = tmp_path_factory.mktemp("pg-gateway")
    config = gateway_config(pgcluster, free_port()) | {"policy": {"dir": str(policy_dir(tmp))}}
    sg = Sandgate(tmp, config, env={"PROD_DB_PASSWORD": APP_PASSWORD})
    with sg:
        sg.approver = sg.token("approver", "dba")
        yield sg


def pending(sg: Sandgate, sid: str, timeout: float = 20.0) -> list[dict]:
    """The session's pending approvals, waiting until there is one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = sg.call("GET", f"/v1/approvals?status=pending&session={sid}").json()
        if rows:
            return rows
        time.sleep(0.1)
    return []


def decide(sg: Sandgate, aid: str, verdict: str) -> None:
    body = {"reason": "test says " + verdict}
    resp = sg.call("POST", f"/v1/approvals/{aid}/{verdict}", token=sg.approver, json=body)
    assert resp.status_code == 200, resp.text


@pytest.fixture
def cluster(pgcluster):
    pgcluster.reset()
    return pgcluster


def db_session(sg: Sandgate, **body) -> tuple[dict, str]:
    """A session listing `prod`, and its database URL (the CA path rewritten to where the test wrote it)."""
    sess = sg.session(databases=["prod"], **body)
    url = sess["env"]["PROD_DATABASE_URL"]
    return sess, url.replace("sslrootcert=" + sess.get("ca_path", "/etc/sandgate/ca.pem"),
                             "sslrootcert=" + sess["ca_file"]).replace("sslrootcert=%2Fetc%2Fsandgate%2Fca.pem",
                                                                       "sslrootcert=" + sess["ca_file"])


def url_parts(url: str) -> dict:
    u = urlsplit(url)
    return {"user": u.username, "password": u.password, "host": u.hostname, "port": u.port,
            "dbname": u.path.lstrip("/")}


def cancel_once_running(cluster: PgCluster, conn, sql: str, timeout: float = 60.0) -> threading.Thread:
    """Cancel `conn`'s statement `sql` (through the gateway, as psycopg sends a CancelRequest) once the cluster
    shows it running (pg_stat_activity): a cancel that arrives before the statement does cancels nothing, so a
    timer races a loaded machine."""
    def run() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = cluster.psql_local("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                         f"AND query = '{sql}'", db="postgres").strip()
            if running != "0":
                conn.cancel()
                return
            time.sleep(0.05)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
