"""One sandbox connection to the PostgreSQL gateway: an explicit state machine.

    STARTUP -> (TLS) -> AUTH (SCRAM-SHA-256 against the session's placeholder) -> UPSTREAM LOGIN -> READY
    READY: every frontend message is handled here, one at a time, in order:
        Query          split with pglast; every statement decided; all allowed -> forwarded, else refused whole
        Parse          decided; Bind with parameters decided again with the values written in
        Describe/Close/Sync/Flush/Execute   forwarded (Execute only for a portal a decision covered)
        CopyData/CopyDone/CopyFail          forwarded while the upstream is in COPY FROM STDIN, else dropped
        FunctionCall   refused;  Terminate   closes;  anything else  FATAL 08P01
    CLOSED

A refused statement never reaches the upstream: in its place the gateway sends a stand-in the server rejects
before it runs anything (a Query or Parse whose text is a unique token, or a Bind of a statement name that
does not exist), and answers the server's error for it with its own `42501`. The server's own state machine thus
fails the transaction exactly as for a statement that failed (25P02 after, COMMIT answered ROLLBACK, ReadyForQuery
`E`) and skips what follows up to Sync in the extended protocol.

Backend messages are relayed by a second task; it swaps the stand-ins' errors, notes COPY IN, the transaction
status and each statement's command tag (for its audit row), and the parameter types ParameterDescription gives.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping, Protocol

from gateway.postgres import statements, wire
from gateway.sessions.database import DUMMY, ScramError, ScramServer, Verifier
from gateway.postgres.judge import StatementJudge, StatementRequest, Verdict
from gateway.postgres.registry import ConnectionRegistry
from gateway.config import DatabaseSettings
from gateway.postgres.upstream import Upstream, UpstreamError, connect, send_cancel

log = logging.getLogger("sandgate.postgres")
MAX_STATEMENT_AUDIT = 4096
AUTH_TIMEOUT_S = 30.0
# What one connection can make the gateway hold (besides one message of at most wire.MAX_MESSAGE_BYTES):
MAX_PREPARED = 1000                 # prepared statements and portals kept (their text, for Bind and the audit)
MAX_PREPARED_BYTES = 16 * 1024 * 1024
MAX_PIPELINE = 10_000               # statements and Describes sent without reaching ReadyForQuery
PARSE_ANSWER_TIMEOUT_S = 30.0       # how long a Bind waits for the server's answer to its statement's Parse


@dataclass(frozen=True)
class Login:
    """What the gateway knows of a session's database login."""
    session: str
    verifier: Verifier
    databases: tuple[str, ...]
    live: bool


class Logins(Protocol):
    async def login_of(self, user: str) -> Login | None: ...


class Recorder(Protocol):
    def statement(self, session: str, database: str, statement: str, verdict: Verdict | None, *, tag: str,
                  rows: int | None, error: str, duration_ms: float) -> None: ...


@dataclass(frozen=True)
class GatewayDeps:
    databases: Mapping[str, DatabaseSettings]
    logins: Logins
    password: Callable[[DatabaseSettings], Awaitable[str]]
    judge: StatementJudge
    recorder: Recorder
    registry: ConnectionRegistry
    tls: ssl.SSLContext
    # a CancelRequest whose key this process did not hand out: passed to the other workers (`serve --workers N`)
    elsewhere: Callable[[int, int], None] = lambda pid, key: None


class Closed(Exception):
    pass


@dataclass
class Prepared:
    query: str
    verdict: Verdict
    param_types: list[int]
    rebind: bool                # every Bind is decided again, with the values
    spent: bool = False         # the Parse's decision covered one run: its next Bind is decided again
    positions: list[tuple[int, int, int]] | None = None     # where its $n stand (found once, at the first Bind)
    stamp: object = None        # the judge's stamp at Parse: a Bind after a policy or session change decides again
    run: int = 0                # how many Syncs and Queries went upstream before its Parse
    confirmed: bool = False     # the server answered its Parse with ParseComplete
    dropped: bool = False       # the server failed or skipped its Parse: it holds no such statement


@dataclass
class Run:
    """A statement sent to run: its audit row is written when the server says how it ended."""
    statement: str
    verdict: Verdict | None
    segment: int                # how many Syncs and Queries went upstream before it: the pipeline segment it is in
    started: float = field(default_factory=time.monotonic)


def _deny_error(verdict: Verdict) -> bytes:
    return wire.error_response("42501", f"sandgate: denied: {verdict.reason}", f"code: {verdict.code}")


def _fatal(code: str, text: str) -> bytes:
    return wire.error_response(code, text, severity="FATAL")


def _rows_of(tag: str) -> int | None:
    last = tag.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() and " " in tag else None


class Connection:
    def __init__(self, deps: GatewayDeps, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.deps = deps
        self.reader, self.writer = reader, writer
        self.session = ""
        self.database = ""
        self.db: DatabaseSettings | None = None
        self.up: Upstream | None = None
        self.key: tuple[int, int] | None = None
        self._stand_ins: dict[str, bytes] = {}       # token -> the error the client gets instead of the server's
        self._runs: deque[Run] = deque()
        self._prepared: dict[str, Prepared] = {}
        self._prepared_bytes = 0
        self._portals: dict[str, tuple[str, Verdict]] = {}
        self._describes: deque[tuple[str, str, int]] = deque()     # what, name, segment
        self._copy_in = False
        self._skipping = False      # a refusal in the extended protocol: the server skips to Sync, so do we
        # the segment (Syncs and Queries answered before it) the server reported an error in, until its
        # ReadyForQuery: the server skips that segment's messages up to its Sync, not the later segments'
        self._failed: int | None = None
        self._pending_ready = 0     # Query and Sync messages sent whose ReadyForQuery has not come back
        self._ends_sent = 0         # Syncs and Queries sent upstream, and ReadyForQuery messages come back
        self._ends_seen = 0
        self._unconfirmed: deque[Prepared] = deque()    # Parses sent, in order, not yet answered
        self._parse_answered = asyncio.Event()
        self._batch_open = False    # extended-protocol messages received since the last Sync
        self._own_syncs: set[int] = set()       # which ReadyForQuery answers a Sync of the gateway's own
        self._copy_started = asyncio.Event()    # the server answered a COPY FROM STDIN: CopyInResponse or not
        self._copy_nth: int | None = None       # which Execute of the batch is the COPY (None: a Query's)
        self._batch_executes = 0                # Executes sent since the last Sync
        self._executes_ended = 0                # CommandComplete, PortalSuspended, EmptyQuery since ReadyForQuery
        self._answered_all = asyncio.Event()
        self._executed = False      # an Execute sent since the last Sync
        self._settings: dict[str, str] = {}      # what the server reports of the settings its lexer reads
        self._held: asyncio.Event | None = None      # set by a CancelRequest while a statement waits for approval
        self._tasks: list[asyncio.Task] = []
        self._out: list[bytes] = []                  # messages for the upstream not yet written (see _flush)
        self._out_bytes = 0
        self._messages = wire.MessageReader(reader)      # the client's messages after start-up
        self._ending: tuple[str, str] | None = None

    # -- the start-up phase ------------------------------------------------------------------------
    async def serve(self) -> None:
        try:
            startup = await asyncio.wait_for(self._startup(), AUTH_TIMEOUT_S)
            if startup is None:
                return
            if not await asyncio.wait_for(self._authenticate(startup), AUTH_TIMEOUT_S):
                return
            await self._relay()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, ssl.SSLError, Closed):
            pass
        except wire.ProtocolError as exc:
            await self._send_quietly(_fatal("08P01", f"sandgate: protocol violation: {exc}"))
        except Exception:  # noqa: BLE001 - never a traceback to the client; the connection closes
            log.exception("postgres connection failed")
            await self._send_quietly(_fatal("XX000", "sandgate: internal error"))
        finally:
            await self._close()

    async def _startup(self) -> wire.Startup | None:
        tls_done = False
        while True:
            startup = await wire.read_startup(self.reader)
            if startup.code == wire.CANCEL_REQUEST:
                await self._on_cancel_request(*startup.cancel)
                return None
            if startup.code == wire.SSL_REQUEST:
                if tls_done:
                    raise wire.ProtocolError("SSLRequest inside TLS")
                self.writer.write(b"S")
                await self.writer.drain()
                await self.writer.start_tls(self.deps.tls)
                tls_done = True
                continue
            if startup.code == wire.GSSENC_REQUEST:
                self.writer.write(b"N")          # no GSSAPI encryption: the client may go on with TLS or plain
                await self.writer.drain()
                continue
            unknown = [k for k in startup.params if k.startswith("_pq_.")]
            if startup.code != wire.PROTOCOL_V3 or unknown:
                # a 3.x minor or protocol options we do not speak: NegotiateProtocolVersion to 3.0, as the server does
                self.writer.write(wire.message(b"v", struct.pack("!ii", 0, len(unknown))
                                               + b"".join(wire.cstr(k) for k in unknown)))
            if not tls_done:
                await self._send(_fatal("28000", "sandgate: the database gateway requires TLS (sslmode=require "
                                                 "or stronger)"))
                return None
            if startup.params.get("replication", "false").lower() not in ("false", "off", "0", "no"):
                await self._send(_fatal("0A000", "sandgate: replication connections are not supported"))
                return None
            return startup

    async def _authenticate(self, startup: wire.Startup) -> bool:
        user = startup.params.get("user", "")
        database = startup.params.get("database", user)
        login = await self.deps.logins.login_of(user) if user else None
        verifier = login.verifier if login is not None else DUMMY
        server = ScramServer(verifier)
        self.writer.write(wire.auth_sasl(["SCRAM-SHA-256"]))
        await self.writer.drain()
        try:
            kind, body = await wire.read_message(self.reader, 1 << 16)
            if kind != b"p":
                raise wire.ProtocolError("expected a SASLInitialResponse")
            mech, data = wire.parse_sasl_initial(body)
            if mech != "SCRAM-SHA-256":
                raise ScramError("unsupported mechanism")
            self.writer.write(wire.auth_sasl_continue(server.client_first(data.decode()).encode()))
            await self.writer.drain()
            kind, body = await wire.read_message(self.reader, 1 << 16)
            if kind != b"p":
                raise wire.ProtocolError("expected a SASLResponse")
            final = server.client_final(body.decode())
        except (ScramError, UnicodeDecodeError, ValueError):
            login = None
        if login is None:
            await self._send(_fatal("28P01", f'password authentication failed for user "{user[:64]}"'))
            return False
        self.writer.write(wire.auth_sasl_final(final.encode()))
        if not login.live:
            await self._send(_fatal("57P01", "sandgate: the session has ended"))
            return False
        db = self.deps.databases.get(database)
        if db is None or database not in login.databases:
            await self._send(_fatal("3D000", f'database "{database[:64]}" does not exist for this session'))
            return False
        if self.deps.registry.count(login.session, database) >= db.max_connections_per_session:
            await self._send(_fatal("53300", f"sandgate: this session already has "
                                             f"{db.max_connections_per_session} connections to {database}"))
            return False
        self.session, self.database, self.db = login.session, database, db
        self.key = self.deps.registry.add(self)
        try:
            self.up = await connect(db, await self.deps.password(db), startup.params)
        except UpstreamError as exc:
            await self._send(_fatal(exc.code, f"sandgate: {exc.message}"))
            return False
        except Exception:  # noqa: BLE001 - the secret source failed: say so without details
            log.warning("database %s: the password source could not be read", db.name)
            await self._send(_fatal("08006", f"sandgate: the credentials of database {db.name} are unavailable"))
            return False
        self._settings = {k: v for k, v in self.up.parameters.items()
                          if k in ("client_encoding", "standard_conforming_strings")}
        out = [wire.auth_ok()] + [wire.parameter_status(k, v) for k, v in self.up.parameters.items()]
        out += [wire.backend_key(*self.key), wire.ready_for_query(self.up.status)]
        self.writer.write(b"".join(out))
        await self.writer.drain()
        return True

    # -- relaying ----------------------------------------------------------------------------------
    async def _relay(self) -> None:
        self._tasks = [asyncio.create_task(self._from_client()), asyncio.create_task(self._from_upstream())]
        done, pending = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is not None and not isinstance(exc, (asyncio.IncompleteReadError, ConnectionError, Closed,
                                                        ssl.SSLError)):
                raise exc
        if self._ending is not None:
            await self._send_quietly(_fatal(*self._ending))

    async def _from_client(self) -> None:
        assert self.up is not None
        handlers = {b"Q": self._on_query, b"P": self._on_parse, b"B": self._on_bind, b"E": self._on_execute,
                    b"D": self._on_describe, b"C": self._on_close, b"S": self._on_sync, b"H": self._forward,
                    b"d": self._on_copy, b"c": self._on_copy, b"f": self._on_copy, b"F": self._on_function_call}
        messages = self._messages
        while True:
            kind, body = await messages.next()
            if kind == b"X":
                self._queue(wire.message(b"X"))
                await self._flush()
                raise Closed
            handler = handlers.get(kind)
            if handler is None:
                raise wire.ProtocolError(f"unexpected message type {kind!r}")
            if kind in DECIDED:
                await self._settle()
            step = self._in_step(kind)
            if step is False:
                raise Closed
            if step is None:
                continue
            if len(self._runs) + len(self._describes) >= MAX_PIPELINE:
                self._ending = ("54000", f"sandgate: more than {MAX_PIPELINE} statements sent without waiting "
                                         "for their results")
                raise Closed
            if (self._skipping or self._failed == self._ends_sent) and kind in SKIPPED:
                await self._flush_after(kind)
                continue            # the server ignores these until Sync after an error: never decided, never sent
            if kind == b"S":
                self._skipping = False
            await handler(kind, body)
            await self._flush_after(kind)

    def _in_step(self, kind: bytes) -> bool | None:
        """Keep every Sync and Query the gateway sends answered by exactly one ReadyForQuery, so it knows which of
        its Parses the server skipped (see _parse_done): the server ignores a Query or FunctionCall after an
        error in an extended-protocol batch, and a Sync or Flush while it reads COPY data. A Query or
        FunctionCall inside a batch (before its Sync: asyncpg's Parse, Describe, Flush, then a COPY's Query) is
        sent after a Sync of the gateway's own, whose ReadyForQuery the client never sees; a Sync or Flush during
        COPY FROM STDIN is not passed on (the server would ignore it); any other message there ends the
        connection. True: go on; False: close; None: not passed on."""
        if self._copy_in and kind not in COPY_MESSAGES:
            if kind in (b"S", b"H"):
                return None
            self._ending = ("08P01", "sandgate: only COPY data, CopyDone or CopyFail may follow COPY FROM STDIN")
            return False
        if kind in BATCH:
            self._batch_open = True
        elif kind == b"S":
            self._batch_open = False
        elif kind in (b"Q", b"F") and self._batch_open:
            self._batch_open = self._skipping = False
            self._batch_executes = 0
            self._queue(wire.message(b"S"))
            self._pending_ready += 1
            self._ends_sent += 1
            self._own_syncs.add(self._ends_sent)
        return True

    async def _flush_after(self, kind: bytes) -> None:
        if kind in ANSWERED or self._out_bytes >= FLUSH_BYTES or not self._messages.buffered():
            await self._flush()

    def _queue(self, data: bytes) -> None:
        self._out.append(data)
        self._out_bytes += len(data)

    async def _flush(self) -> None:
        """Send what the client's messages queued for the upstream, in one write: the messages of one round trip
        (Bind, Execute, Sync) become one TLS record instead of three."""
        assert self.up is not None
        if self._out:
            self.up.writer.write(b"".join(self._out) if len(self._out) > 1 else self._out[0])
            self._out.clear()
            self._out_bytes = 0
        await self.up.writer.drain()

    async def _forward(self, kind: bytes, body: bytes) -> None:
        self._queue(wire.message(kind, body))

    async def _on_sync(self, kind: bytes, body: bytes) -> None:
        self._pending_ready += 1
        self._ends_sent += 1
        self._batch_executes = 0
        self._executed = False
        await self._forward(kind, body)

    async def _send_query(self, text_or_body: bytes) -> None:
        self._pending_ready += 1
        self._ends_sent += 1
        await self._forward(b"Q", text_or_body)

    async def _settle(self) -> None:
        """Before a statement is read: the server still reads statements as the gateway does (UTF-8,
        standard_conforming_strings on), as it reported at its last ReadyForQuery. A connection that changed
        either (`SET client_encoding`, `set_config(...)`) is closed: the server would read the next statement
        otherwise than pglast."""
        encoding = self._settings.get("client_encoding", "UTF8").upper()
        conforming = self._settings.get("standard_conforming_strings", "on").lower()
        if encoding not in ("UTF8", "UNICODE") or conforming != "on":
            self._ending = ("08P01", "sandgate reads statements as UTF-8 with standard_conforming_strings on; "
                                     "this connection changed that and is closed")
            raise Closed

    def _unsettled(self, text: str) -> Verdict | None:
        """A refusal for a statement the server may read otherwise than pglast: sent while statements before it
        have not reached ReadyForQuery (a pipeline: a setting changed there is reported only then) and holding a
        backslash or non-ASCII text (the two things standard_conforming_strings and the client encoding change)."""
        if not (self._pending_ready or self._executed) or (text.isascii() and "\\" not in text):
            return None
        return Verdict("", "deny", ("a statement with a backslash or non-ASCII text is read only after the "
                                    "statements before it have finished; send it outside a pipeline",),
                       ("postgres.pipelined_text",))

    def _stand_in(self, error: bytes) -> str:
        token = "sandgate_refused_" + secrets.token_hex(8)
        self._stand_ins[token] = error
        return token

    async def _decide(self, statement: str) -> tuple[Verdict, bytes | None]:
        """The verdict on one statement and, unless it may run, the error the client gets. An ask waits."""
        verdict = await self.deps.judge.decide(StatementRequest(self.session, self.database, statement))
        if verdict.action == "allow":
            return verdict, None
        if verdict.action == "ask" and verdict.approval_id:
            status = await self._hold(verdict.approval_id)
            if status == "approved":
                return verdict, None
            if status == "cancelled":
                return verdict, wire.error_response("57014", "canceling statement due to user request",
                                                    "sandgate: the statement waiting for approval was withdrawn")
            return verdict, wire.error_response(
                "42501", f"sandgate: denied: approval {status}: {verdict.reason}", f"code: approval.{status}")
        return verdict, _deny_error(verdict)

    async def _hold(self, approval_id: str) -> str:
        assert self.db is not None
        await self._flush()                 # what came before the held statement is not held with it
        self._held = asyncio.Event()
        wait = asyncio.create_task(self.deps.judge.wait(approval_id, self.db.hold_timeout_s))
        cancel = asyncio.create_task(self._held.wait())
        try:
            done, _ = await asyncio.wait({wait, cancel}, return_when=asyncio.FIRST_COMPLETED)
            if wait in done:
                status = wait.result()
                return "timed out" if status == "pending" else status
            await self.deps.judge.withdraw(approval_id, "the client cancelled the statement")
            return "cancelled"
        finally:
            self._held = None
            for task in (wait, cancel):
                task.cancel()

    async def _on_query(self, kind: bytes, body: bytes) -> None:
        query = wire.parse_query(body)
        self._forget_prepared("")               # a Query destroys the unnamed statement and portal
        self._portals.pop("", None)
        unsettled = self._unsettled(query)
        if unsettled is not None:
            self.deps.recorder.statement(self.session, self.database, query, unsettled, tag="", rows=None,
                                         error="refused", duration_ms=0.0)
            await self._send_query(wire.cstr(self._stand_in(_deny_error(unsettled))))
            return
        parts = statements.split_statements(query)
        verdicts: list[Verdict] = []
        refusal: bytes | None = None
        for part in parts:
            verdict, error = await self._decide(part)
            verdicts.append(verdict)
            if error is not None:
                refusal = error
                break
        if refusal is None:
            self._runs.extend(Run(p, v, self._ends_sent) for p, v in zip(parts, verdicts))
            for part in parts:                  # what the server forgets, the gateway forgets
                dropped = statements.deallocated(part)
                if dropped is None:
                    self._prepared.clear()
                    self._prepared_bytes = 0
                for name in dropped or ():
                    self._forget_prepared(name)
            copies = any(statements.copies_in(part) for part in parts)
            if copies:
                await self._idle()
            await self._send_query(body)
            if copies:
                await self._await_copy(None)
            return
        for part, verdict in zip(parts, verdicts):
            self.deps.recorder.statement(self.session, self.database, part, verdict, tag="",
                                         rows=None, error="refused" if verdict is verdicts[-1] else "not run",
                                         duration_ms=0.0)
        await self._send_query(wire.cstr(self._stand_in(refusal)))

    async def _on_parse(self, kind: bytes, body: bytes) -> None:
        parse = wire.parse_parse(body)
        self._forget_prepared(parse.name)
        if len(self._prepared) >= MAX_PREPARED or self._prepared_bytes + len(parse.query) > MAX_PREPARED_BYTES:
            limit = wire.error_response("54000", f"sandgate: this connection holds {len(self._prepared)} prepared "
                                                 "statements, the most it may; close some (DEALLOCATE, Close)")
            await self._forward_raw(wire.encode_parse(wire.Parse(parse.name, self._stand_in(limit), ())))
            self._skipping = True
            return
        unsettled = self._unsettled(parse.query)
        if unsettled is not None:
            self.deps.recorder.statement(self.session, self.database, parse.query, unsettled, tag="", rows=None,
                                         error="refused", duration_ms=0.0)
            await self._forward_raw(wire.encode_parse(wire.Parse(parse.name, self._stand_in(_deny_error(unsettled)),
                                                                 ())))
            self._skipping = True
            return
        rebind = False
        if statements.has_params(parse.query):
            # Nothing runs at Parse: a statement with parameters runs only through a Bind. A deny stands now. An
            # ask is not held here (what would be approved is not known yet): each Bind asks with its values. An
            # allow covers the first Bind unless the values can change what the statement does.
            verdict = await self.deps.judge.decide(StatementRequest(self.session, self.database, parse.query))
            if verdict.action == "ask" and verdict.approval_id:
                await self.deps.judge.withdraw(verdict.approval_id, "decided again at Bind, with the values")
            error = _deny_error(verdict) if verdict.action == "deny" else None
            rebind = verdict.action != "allow" or statements.params_matter(parse.query)
        else:
            verdict, error = await self._decide(parse.query)
        if error is not None:
            self.deps.recorder.statement(self.session, self.database, parse.query, verdict, tag="", rows=None,
                                         error="refused", duration_ms=0.0)
            await self._forward_raw(wire.encode_parse(wire.Parse(parse.name, self._stand_in(error), ())))
            self._skipping = True
            return
        prepared = Prepared(parse.query, verdict, list(parse.param_types), rebind,
                            stamp=self.deps.judge.stamp(self.session), run=self._ends_sent)
        self._prepared[parse.name] = prepared
        self._prepared_bytes += len(parse.query)
        self._unconfirmed.append(prepared)
        await self._forward(kind, body)

    def _forget_prepared(self, name: str) -> None:
        gone = self._prepared.pop(name, None)
        if gone is not None:
            self._prepared_bytes -= len(gone.query)

    async def _forward_raw(self, data: bytes) -> None:
        self._queue(data)

    async def _on_bind(self, kind: bytes, body: bytes) -> None:
        bind = wire.parse_bind(body)
        self._portals.pop(bind.portal, None)
        if len(self._portals) >= MAX_PREPARED:
            self._portals.clear()       # named portals end with their transaction: forget the oldest knowledge
        prepared = self._prepared.get(bind.statement)
        if prepared is not None and not prepared.confirmed and prepared.run < self._ends_sent:
            prepared = await self._answered(bind.statement, prepared)
        if prepared is None:
            # a statement the gateway did not see parsed (an SQL PREPARE's): what it runs was decided with the
            # PREPARE; Bind it only through EXECUTE, where the policy sees it
            verdict = Verdict("", "deny", ("sandgate binds only statements it saw prepared with Parse; use "
                                           "EXECUTE for an SQL PREPARE",), ("postgres.unknown_statement",))
            await self._forward_raw(wire.encode_bind_to(self._stand_in(_deny_error(verdict))))
            self._skipping = True
            return
        values = [statements.render_param(v, bind.format_of(i), self._type_of(prepared, i))
                  for i, v in enumerate(bind.params)]
        if bind.params and prepared.positions is None:
            prepared.positions = statements.param_positions(prepared.query)
        bound = statements.bind_statement(prepared.query, values, prepared.positions) if bind.params \
            else prepared.query
        if not (prepared.rebind or prepared.spent) and prepared.stamp == self.deps.judge.stamp(self.session):
            # what it does cannot depend on the values: the Parse's decision covers its first run (the audit row
            # shows the values). Every later run is a statement of its own, decided again: it joins the session's
            # history and counts, and the policy sees them (a budget spent by the earlier runs makes it ask).
            prepared.spent = True
            self._portals[bind.portal] = (bound, prepared.verdict)
            await self._forward(kind, body)
            return
        # values that cannot change what it does: decided as at its Parse (the same text, so the same facts and
        # cache entry), with the session as it is now; values that can: decided with them written in
        verdict, error = await self._decide(bound if prepared.rebind else prepared.query)
        if error is not None:
            self.deps.recorder.statement(self.session, self.database, bound, verdict, tag="", rows=None,
                                         error="refused", duration_ms=0.0)
            await self._forward_raw(wire.encode_bind_to(self._stand_in(error)))
            self._skipping = True
            return
        self._portals[bind.portal] = (bound, verdict)
        await self._forward(kind, body)

    async def _answered(self, name: str, prepared: Prepared) -> Prepared | None:
        """The statement a Bind names, once the server has answered its Parse. A Parse the server failed or
        skipped (an error earlier in its pipeline) left the server with no statement of that name, or with an
        older one the gateway no longer knows: bound only after ParseComplete, never on the Parse's say-so. A
        Bind in the Parse's own pipeline needs no wait (the server skips it if the Parse failed)."""
        await self._flush()
        deadline = time.monotonic() + PARSE_ANSWER_TIMEOUT_S
        while not (prepared.confirmed or prepared.dropped):
            self._parse_answered.clear()
            try:
                await asyncio.wait_for(self._parse_answered.wait(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                break
        return prepared if prepared.confirmed and self._prepared.get(name) is prepared else None

    def _parse_done(self, ok: bool) -> None:
        """ParseComplete (ok) for the oldest Parse sent; or an error: every Parse of the pipeline it ended is
        not the server's (failed, or skipped up to Sync), and is forgotten."""
        if ok:
            if self._unconfirmed:
                self._unconfirmed.popleft().confirmed = True
        else:
            while self._unconfirmed and self._unconfirmed[0].run <= self._ends_seen:
                self._drop(self._unconfirmed.popleft())
        self._parse_answered.set()

    def _drop(self, prepared: Prepared) -> None:
        prepared.dropped = True
        for name, known in list(self._prepared.items()):
            if known is prepared:
                self._forget_prepared(name)

    @staticmethod
    def _type_of(prepared: Prepared, i: int) -> int:
        return prepared.param_types[i] if i < len(prepared.param_types) else 0

    async def _on_execute(self, kind: bytes, body: bytes) -> None:
        portal, _rows = wire.parse_execute(body)
        known = self._portals.get(portal)
        # a portal not bound through the gateway is a cursor (DECLARE, decided as its statement) or nothing
        self._runs.append(Run(known[0] if known else f"FETCH FROM {portal or 'unnamed portal'}",
                              known[1] if known else None, self._ends_sent))
        self._executed = True
        copies = known is not None and statements.copies_in(known[0])
        if copies:
            await self._idle()
        await self._forward(kind, body)
        self._batch_executes += 1
        if copies:
            await self._await_copy(self._batch_executes)

    async def _idle(self) -> None:
        """Wait until the server has answered every Sync and Query sent: what it answers next is this batch's."""
        await self._flush()
        while self._ends_seen < self._ends_sent:
            self._answered_all.clear()
            await self._answered_all.wait()

    async def _await_copy(self, nth: int | None) -> None:
        """After a COPY FROM STDIN is sent (the server idle before its batch): read nothing more from the client
        until the server says whether it reads COPY data now (CopyInResponse) or not: an error; for a Query its
        ReadyForQuery, for the batch's `nth` Execute the end of that Execute. So _in_step knows which of the
        client's Syncs the server will ignore."""
        self._copy_nth = nth
        self._copy_started.clear()
        await self._flush()
        if nth is not None and self._executes_ended >= nth:
            return
        await self._copy_started.wait()

    async def _on_describe(self, kind: bytes, body: bytes) -> None:
        self._describes.append((*wire.parse_describe_or_close(body), self._ends_sent))
        await self._forward(kind, body)

    async def _on_close(self, kind: bytes, body: bytes) -> None:
        what, name = wire.parse_describe_or_close(body)
        if what == "S":
            self._forget_prepared(name)
        else:
            self._portals.pop(name, None)
        await self._forward(kind, body)

    async def _on_copy(self, kind: bytes, body: bytes) -> None:
        if self._copy_in:
            if kind != b"d":
                self._copy_in = False
            await self._forward(kind, body)

    async def _on_function_call(self, kind: bytes, body: bytes) -> None:
        verdict = Verdict("", "deny", ("the FunctionCall protocol message is refused",), ("postgres.function_call",))
        self.deps.recorder.statement(self.session, self.database, "FunctionCall", verdict, tag="", rows=None,
                                     error="refused", duration_ms=0.0)
        await self._send_query(wire.cstr(self._stand_in(_deny_error(verdict))))

    async def _from_upstream(self) -> None:
        """Relay backend messages as they come, a read's worth at a time: most (DataRow, RowDescription, ...) go
        through as bytes; the few the gateway follows are read on the way, and a stand-in's error swapped."""
        assert self.up is not None
        reader, out = self.up.reader, self.writer
        buf = bytearray()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise Closed
            buf += data
            parts: list = []
            pos = start = 0
            size = len(buf)
            while size - pos >= 5:
                kind, length = _BACKEND_HEAD.unpack_from(buf, pos)
                if length < 4 or length > wire.MAX_MESSAGE_BYTES:
                    raise wire.ProtocolError("the server sent a message out of bounds")
                end = pos + 1 + length
                if end > size:
                    break
                if kind not in _PASSED:
                    replaced = self._on_backend(_KINDS[kind], bytes(buf[pos + 5:end]) if kind in _READ else b"")
                    if replaced is not None:
                        parts += [buf[start:pos], replaced]
                        start = end
                pos = end
            if pos:
                parts.append(buf[start:pos])
                out.write(b"".join(parts))
                del buf[:pos]
                await out.drain()

    def _on_backend(self, kind: bytes, body: bytes) -> bytes | None:
        """Follow one backend message; the bytes that replace it, or None to pass it on as it is."""
        if kind == b"E":
            self._parse_done(False)
            self._copy_started.set()
            return self._on_error(body)
        if kind in (b"C", b"s", b"I"):
            self._executes_ended += 1
            if self._copy_nth is not None and self._executes_ended >= self._copy_nth:
                self._copy_started.set()            # the COPY's Execute ended without COPY data
        if kind == b"1":
            self._parse_done(True)
        elif kind == b"C":
            self._finish(wire.parse_command_tag(body), "")
        elif kind == b"Z":
            assert self.up is not None
            self.up.status = body[:1]
            self._ready()
            if self._ends_seen in self._own_syncs:
                self._own_syncs.discard(self._ends_seen)
                return b""
        elif kind == b"I":
            self._finish("EMPTY", "")
        elif kind == b"s":
            self._finish("SUSPENDED", "")
        elif kind == b"G":
            self._copy_in = True
            self._copy_started.set()
        elif kind == b"t":
            self._on_parameter_description(body)
        elif kind == b"S":
            name, _, value = body.rstrip(b"\0").partition(b"\0")
            if name in (b"client_encoding", b"standard_conforming_strings"):
                self._settings[name.decode()] = value.decode("utf-8", "replace")
        elif kind in (b"T", b"n") and self._describes:
            self._describes.popleft()
        elif kind in (b"R", b"K", b"v"):
            raise wire.ProtocolError(f"the server sent {kind!r} after login")
        return None

    def _on_error(self, body: bytes) -> bytes | None:
        fields = wire.parse_fields(body)
        text = " ".join(fields.values())
        swapped = None
        for token, error in self._stand_ins.items():
            if token in text:
                swapped = error
                break
        if swapped is not None:
            return swapped
        if self._runs and self._runs[0].segment <= self._ends_seen:
            self._finish("", fields.get("C", "error"))
        # what was sent after it in its segment does not run: the rest of a Query, or every message up to Sync
        while self._runs and self._runs[0].segment <= self._ends_seen:
            self._finish("", "not run")
        self._failed = self._ends_seen
        return None

    def _finish(self, tag: str, error: str) -> None:
        if not self._runs:
            return
        run = self._runs.popleft()
        self.deps.recorder.statement(self.session, self.database, run.statement, run.verdict, tag=tag,
                                     rows=_rows_of(tag) if tag else None, error=error,
                                     duration_ms=(time.monotonic() - run.started) * 1000)
        if tag == "" or kind_ends_copy(tag):
            self._copy_in = False

    def _ready(self) -> None:
        self._ends_seen += 1
        self._executes_ended = 0
        self._copy_started.set()
        if self._ends_seen >= self._ends_sent:
            self._answered_all.set()
        while self._unconfirmed and self._unconfirmed[0].run < self._ends_seen:
            self._drop(self._unconfirmed.popleft())     # no ParseComplete before its ReadyForQuery: not the server's
        self._parse_answered.set()
        while self._runs and self._runs[0].segment < self._ends_seen:
            self._finish("", "not run")
        self._failed = None
        self._pending_ready = max(0, self._pending_ready - 1)
        if self._ends_seen >= self._ends_sent:      # a later pipeline's stand-ins are still to be answered
            self._stand_ins.clear()
        while self._describes and self._describes[0][2] < self._ends_seen:
            self._describes.popleft()
        self._copy_in = False

    def _on_parameter_description(self, body: bytes) -> None:
        if not self._describes or self._describes[0][0] != "S":
            return
        name = self._describes[0][1]
        prepared = self._prepared.get(name)
        if prepared is not None:
            types = wire.parse_parameter_description(body)
            prepared.param_types = [given or found for given, found in
                                    zip(prepared.param_types + [0] * len(types), types)]

    # -- cancel and end ----------------------------------------------------------------------------
    async def cancel(self) -> None:
        """A CancelRequest with this connection's key: withdraw a held statement, else cancel the upstream's."""
        if self._held is not None:
            self._held.set()
            return
        if self.up is not None and self.db is not None:
            await send_cancel(self.db, self.up.pid, self.up.key)

    def end(self, code: str, message: str) -> None:
        """The session ended: the client gets FATAL `code` and the connection closes at once."""
        self._ending = (code, message)
        if self._held is not None:
            self._held.set()
        for task in self._tasks:
            task.cancel()
        if not self._tasks:
            self.writer.write(_fatal(code, message))
            self.writer.close()

    async def _on_cancel_request(self, pid: int, key: int) -> None:
        conn = self.deps.registry.find(pid, key)
        if conn is not None:
            await conn.cancel()
        else:
            self.deps.elsewhere(pid, key)

    # -- output and closing ------------------------------------------------------------------------
    async def _send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _send_quietly(self, data: bytes) -> None:
        try:
            await asyncio.wait_for(self._send(data), 2.0)
        except Exception:  # noqa: BLE001 - the client may be gone
            pass

    async def _close(self) -> None:
        if self.key is not None:
            self.deps.registry.remove(self, *self.key)
        while self._runs:
            self._finish("", "connection closed")
        if self.up is not None:
            self.up.writer.close()
        self.writer.close()


_BACKEND_HEAD = struct.Struct("!Bi")
_KINDS = tuple(bytes((i,)) for i in range(256))
_PASSED = frozenset(b"D23")         # DataRow, BindComplete, CloseComplete: relayed, never looked at
_READ = frozenset(b"ECZtS")         # the backend messages whose body _on_backend reads (the rest: by type alone)
SKIPPED = frozenset((b"P", b"B", b"E", b"D", b"C", b"H"))
BATCH = frozenset((b"P", b"B", b"E", b"D", b"C"))          # extended-protocol messages a Sync ends
COPY_MESSAGES = frozenset((b"d", b"c", b"f"))
# Messages the server answers (or that end a COPY): what was queued goes out with them. Anything else goes out
# when the client has sent nothing more yet, or past FLUSH_BYTES (COPY data).
ANSWERED = frozenset((b"S", b"H", b"Q", b"F", b"c", b"f"))
FLUSH_BYTES = 1 << 16

DECIDED = frozenset((b"Q", b"P", b"B", b"F"))


def kind_ends_copy(tag: str) -> bool:
    return tag.startswith("COPY")
