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
import threading
import time
from pathlib import Path

from psycopg import pq

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
        self._idle: dict[str, list[pq.PGconn]] = {}       # psql_local's connections, per database
        self._idle_lock = threading.Lock()

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
        """Run SQL as the superuser over the Unix socket (trust): the test's own view of the cluster. What
        `psql -X -q -At -v ON_ERROR_STOP=1 -c SQL` prints (every result's rows, fields joined by `|`, NULL empty) and
        how it fails (CalledProcessError, exit 2 without a connection, 3 on an error, stderr the server's message),
        in this process: a psql process through runuser cost about 40 ms of CPU a call, a few hundred calls a
        run. Each call sees a fresh session as psql's would: a connection is kept for the next call only when it
        ends outside a transaction, and then after DISCARD ALL (settings, temporary tables, LISTEN, prepared
        statements dropped); calls on several threads at once each take a connection of their own."""
        conn = self._connection(db)
        keep = False
        try:
            conn.send_query(sql.encode())
            out: list[str] = []
            error = ""
            while (res := conn.get_result()) is not None:
                if res.status == pq.ExecStatus.TUPLES_OK:
                    for row in range(res.ntuples):
                        out.append("|".join("" if (v := res.get_value(row, col)) is None else v.decode()
                                            for col in range(res.nfields)) + "\n")
                elif res.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.BAD_RESPONSE):
                    error = error or (res.error_message.decode(errors="replace") or "error")
                elif res.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY):
                    error = error or f"psql_local: unexpected result {res.status.name}"
            if conn.status == pq.ConnStatus.OK and conn.transaction_status == pq.TransactionStatus.IDLE:
                keep = conn.exec_(b"DISCARD ALL").status == pq.ExecStatus.COMMAND_OK
        finally:
            self._release(db, conn, keep)
        if error:
            raise subprocess.CalledProcessError(3, ["psql", "-c", sql], "".join(out), error)
        return "".join(out)

    def _connection(self, db: str) -> pq.PGconn:
        with self._idle_lock:
            idle = self._idle.setdefault(db, [])
            if idle:
                return idle.pop()
        conninfo = f"host={self.sockdir} port={self.port} user=postgres dbname={db}".encode()
        conn = pq.PGconn.connect(conninfo)
        if conn.status != pq.ConnStatus.OK:
            message = conn.error_message.decode(errors="replace")
            conn.finish()
            raise subprocess.CalledProcessError(2, ["psql", "-d", db], "", message)
        return conn

    def _release(self, db: str, conn: pq.PGconn, keep: bool) -> None:
        if keep:
            with self._idle_lock:
                self._idle.setdefault(db, []).append(conn)
        else:
            conn.finish()

    def _close_connections(self) -> None:
        with self._idle_lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.finish()

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
        self._close_connections()
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
