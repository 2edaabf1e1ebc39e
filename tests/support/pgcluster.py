"""A PostgreSQL cluster of the test's own: `initdb` under /usr/lib/postgresql/*/bin, `scram-sha-256` in pg_hba,
TLS with a test CA (the client can use `sslmode=verify-full` with `localhost` or 127.0.0.1), run as the
`postgres` user (`initdb` refuses root). A role `app` (password `APP_PASSWORD`) owns the database `app`, which
holds a table `t(id int primary key, v text)` with rows 1..10.

Start one per module (`PgCluster(tmp).start()`, or the `pgcluster` fixture of a test module) and `reset()` the
table between tests.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.gateway import record_start
from tests.support.upstream import free_port, make_cert

APP_PASSWORD = "real-Db-pass-7f3c9e1a"
SUPER_PASSWORD = "super-pass-c41d"
RUN_AS = "postgres"


def pg_bindir() -> str | None:
    """The newest /usr/lib/postgresql/*/bin that has initdb, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def cluster_available() -> bool:
    if pg_bindir() is None:
        return False
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        return False
    return os.geteuid() == 0 or pwd.getpwuid(os.geteuid()).pw_name == RUN_AS


class PgCluster:
    def __init__(self, tmp: Path | None = None):
        # initdb and the server run as `postgres`: the directory must be reachable by it, so not under a 0700 tmp.
        self.root = Path(tempfile.mkdtemp(prefix="sandgate-pgcluster-", dir="/tmp"))
        os.chmod(self.root, 0o755)
        self.bindir = pg_bindir()
        self.port = free_port()
        self.host = "127.0.0.1"
        self.datadir = self.root / "data"
        self.sockdir = self.root / "sock"
        self.tls = make_cert(self.root / "tls", ["localhost", "db.test"], ["127.0.0.1"])
        self.ca_file = self.tls.cert          # self-signed: the certificate is its own CA
        self.log_path = self.root / "postgres.log"
        self.proc: subprocess.Popen | None = None

    # -- running as postgres -----------------------------------------------------------------------
    def _as_pg(self, *cmd: str, **kw) -> subprocess.CompletedProcess:
        prefix = [] if os.geteuid() != 0 else ["runuser", "-u", RUN_AS, "--"]
        return subprocess.run(prefix + list(cmd), check=True, capture_output=True, text=True, **kw)

    def start(self) -> "PgCluster":
        began = time.monotonic()
        pg = pwd.getpwnam(RUN_AS)
        for path in (self.root, self.root / "tls", Path(self.tls.cert), Path(self.tls.key)):
            os.chown(path, pg.pw_uid, pg.pw_gid)
        os.chmod(self.tls.key, 0o600)
        self.sockdir.mkdir()
        os.chown(self.sockdir, pg.pw_uid, pg.pw_gid)
        pwfile = self.root / "pw"
        pwfile.write_text(SUPER_PASSWORD + "\n")
        os.chown(pwfile, pg.pw_uid, pg.pw_gid)
        self._as_pg(f"{self.bindir}/initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=scram-sha-256",
                    f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync")
        (self.datadir / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 scram-sha-256\n")
        with open(self.datadir / "postgresql.conf", "a") as fh:
            fh.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                     f"unix_socket_directories = '{self.sockdir}'\nssl = on\n"
                     f"ssl_cert_file = '{self.tls.cert}'\nssl_key_file = '{self.tls.key}'\n"
                     "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
                     "shared_buffers = 32MB\npassword_encryption = 'scram-sha-256'\n")
        prefix = [] if os.geteuid() != 0 else ["runuser", "-u", RUN_AS, "--"]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(prefix + [f"{self.bindir}/postgres", "-D", str(self.datadir)],
                                     stdout=self._log, stderr=self._log)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited: " + self.log_path.read_text(errors="replace"))
            try:
                self.psql_local("SELECT 1", db="postgres")
                break
            except subprocess.CalledProcessError:
                time.sleep(0.1)
        else:
            raise RuntimeError("postgres did not start: " + self.log_path.read_text(errors="replace"))
        self.psql_local(f"CREATE ROLE app LOGIN PASSWORD '{APP_PASSWORD}'", db="postgres")
        self.psql_local("CREATE DATABASE app OWNER app", db="postgres")
        self.reset()
        record_start("pgcluster", time.monotonic() - began)     # SANDGATE_TEST_STARTS
        return self

    def psql_local(self, sql: str, db: str = "app") -> str:
        """Run SQL as the superuser over the Unix socket (trust): the test's own view of the cluster."""
        return self._as_pg("psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(self.sockdir), "-p",
                           str(self.port), "-U", "postgres", "-d", db, "-c", sql).stdout

    def reset(self) -> None:
        self.psql_local("DROP TABLE IF EXISTS t; CREATE TABLE t (id int PRIMARY KEY, v text); "
                        "INSERT INTO t SELECT g, 'row' || g FROM generate_series(1, 10) g; ALTER TABLE t OWNER TO app")

    def count(self, table: str = "t") -> int:
        return int(self.psql_local(f"SELECT count(*) FROM {table}").strip())

    def table_exists(self, table: str = "t") -> bool:
        return self.psql_local(f"SELECT to_regclass('public.{table}') IS NOT NULL").strip() == "t"

    @property
    def hostport(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PgCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
