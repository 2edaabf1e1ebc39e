"""The PostgreSQL gateway's listener and the services its connections use: the TLS certificate (from sandgate's
CA, for the advertised host), session logins, the real passwords, the audit rows and metrics of statements, and
closing the connections of a session that ended."""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from mitmproxy.certs import CertStore

from gateway.audit.log import AuditLog
from gateway.store.changes import Change
from gateway.runtime.metrics import Metrics
from gateway.postgres.connection import MAX_STATEMENT_AUDIT, Connection, GatewayDeps, Login
from gateway.sessions.database import Verifier
from gateway.postgres.judge import Verdict
from gateway.postgres.registry import ConnectionRegistry
from gateway.sessions.registry import SessionRegistry

log = logging.getLogger("sandgate.postgres")
ENDED = ("57P01", "terminating connection: the sandgate session has ended")
STOPPING = ("57P01", "terminating connection: sandgate is stopping; a statement still waiting for approval did not "
                     "run (its approval stays pending: once approved, the same statement sent again runs once)")


def server_tls(data_dir: Path, host: str) -> ssl.SSLContext:
    """A TLS context whose certificate, issued by sandgate's CA (the egress CA in the data dir, mitmproxy's file names), names `host`."""
    store = CertStore.from_store(data_dir, "mitmproxy", 2048)
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    entry = store.get_cert(host, [san])
    cert_path, key_path = data_dir / "postgres-tls.pem", data_dir / "postgres-tls.key"
    cert_path.write_bytes(entry.cert.to_pem() + b"".join(c.to_pem() for c in entry.chain_certs))
    key_path.touch(mode=0o600)
    key_path.write_bytes(entry.privatekey.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    return ctx


def postgres_socket(listen: tuple[str, int], reuse_port: bool = False) -> socket.socket:
    """The listener's socket, bound (not yet listening) so its port is known before sessions are created."""
    host, port = listen
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


class SessionLogins:
    """A session's database login, read from the session row (the user name is the session id)."""

    def __init__(self, sessions: SessionRegistry) -> None:
        self._sessions = sessions

    async def login_of(self, user: str) -> Login | None:
        if not user.startswith("s_") or len(user) > 64:
            return None
        row = await self._sessions.known(user)
        scram = (row or {}).get("db_login", {}).get("scram") if row else None
        if not scram:
            return None
        live = await self._sessions.live(user) is not None
        return Login(user, Verifier.from_json(scram), tuple(row.get("databases") or ()), live)


class StatementRecorder:
    """One audit row of kind `sql` per statement (with what the decision's `toolcall` row would have said: the
    call's id, tool, summary and decision, the verdict's `extra`), and the statement counters."""

    def __init__(self, audit: AuditLog, metrics: Metrics) -> None:
        self._audit, self._metrics = audit, metrics

    def statement(self, session: str, database: str, statement: str, verdict: Verdict | None, *, tag: str,
                  rows: int | None, error: str, duration_ms: float) -> None:
        action = verdict.action if verdict is not None else "allow"
        if action == "ask":
            action = "allow" if not error else "deny"      # what happened: approved and run, or not
        self._metrics.decision("sql", action)
        text = statement if len(statement) <= MAX_STATEMENT_AUDIT else statement[:MAX_STATEMENT_AUDIT] + "…"
        detail = {**(verdict.extra if verdict is not None else {}), "database": database, "statement": text,
                  "tag": tag, "rows": rows, "duration_ms": round(duration_ms, 3), "via": "postgres"}
        if error:
            detail["error"] = error
        if verdict is not None and verdict.approval_id:
            detail["approval_id"] = verdict.approval_id
        self._audit.record("sql", session=session, action=action,
                           reasons=list(verdict.reasons) if verdict else [], codes=list(verdict.codes) if verdict else [],
                           request_id=verdict.id if verdict else None, policy_rev=verdict.rev if verdict else None,
                           detail=detail)


class PostgresGateway:
    def __init__(self, deps: GatewayDeps, sessions: SessionRegistry) -> None:
        self.deps = deps
        self._sessions = sessions
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self, listen: tuple[str, int], sock=None) -> tuple[str, int]:
        if sock is not None:
            self._server = await asyncio.start_server(self._accept, sock=sock, limit=1 << 20)
        else:
            self._server = await asyncio.start_server(self._accept, *listen, limit=1 << 20, reuse_address=True)
        name = self._server.sockets[0].getsockname()
        return name[0], name[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            await Connection(self.deps, reader, writer).serve()
        finally:
            if task is not None:
                self._conns.discard(task)

    # -- CancelRequests that landed on another worker (ChangeHandler of kind "pgcancel") ------------------
    async def on_change(self, change: Change) -> None:
        pid, _, key = change.id.partition(":")
        try:
            conn = self.deps.registry.find(int(pid), int(key))
        except ValueError:
            return
        if conn is not None:
            await conn.cancel()

    async def resync(self) -> None:
        return None

    def session_ended(self, sid: str) -> None:
        self.deps.registry.end_session(sid, *ENDED)

    async def sweep(self, every_s: float = 0.5) -> None:
        """Sessions that expired (no change event says so): their connections are closed."""
        while True:
            await asyncio.sleep(every_s)
            now = time.time()
            for sid in self.deps.registry.sessions():
                try:
                    live = await self._sessions.live(sid)
                except Exception:  # noqa: BLE001 - the store is down: keep what is open, check again
                    continue
                if live is None or float(live.get("expires_at", now + 1)) <= now:
                    self.session_ended(sid)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for sid in self.deps.registry.sessions():
            self.deps.registry.end_session(sid, *STOPPING)
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=2.0)
        for task in list(self._conns):
            task.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
