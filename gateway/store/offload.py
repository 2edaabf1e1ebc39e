"""The writer process: audit rows (their hash chain) and decision-log rows (their redaction, their JSON) written by
a process of their own, outside the gateway's interpreter.

Why: the gateway's throughput is bound by its one interpreter lock. Writing the rows on its threads (the store's
writer: each audit row's stored values, canonical JSON, SHA-256 and INSERT; the decision log's redaction and
serialisation) took 140-190 µs of that lock a tool call or a PostgreSQL statement, and every hand-over of the lock
cost the event loop a switch. Here the gateway sends each batch down a pipe as one marshal'd message of plain
values, made on a thread (the audit rows as they were recorded; the decision rows' inputs without their history,
not yet redacted, and the references to their history entries), and this process does the rest: redaction
(gateway/store/redact.py), the chain (gateway/store/chain.py) and the INSERTs (gateway/store/rowsql.py), on its own
connection (sqlite3 or psycopg: no SQLAlchemy, so it starts in ~40 ms). `serve` uses it with
SANDGATE_WRITER=process (docs/performance.md: what it saves and what it costs).

What stays as it was (gateway/runtime/batches.py runs both writers unchanged): a batch is acknowledged only once
this process has committed it, so `flush()` still returns with every row stored and readable by the gateway's
own connection, and `close()` still writes everything before the gateway stops; the rows not yet acknowledged
stay in the gateway's queues (the audit log's readers see them there). One request at a time, in order.

When this process dies (killed, out of memory, a bug), the write in flight fails like a write to an unreachable
store: the batch goes back to the front of its queue, the audit log reports "degraded", and the next flush starts
a new process and writes the batch again (a batch committed just before the death, its acknowledgement lost, is
written twice: audit rows then appear twice, each chained, and decision rows twice). Decisions go on only while
the audit log accepts rows: once `max_pending` audit rows wait unwritten, the gateway refuses requests (503
`audit.unavailable`), as it does with the store down. The process ignores SIGINT and SIGTERM (a signal to the
whole process group must not stop it before the gateway's last flush) and ends when its stdin closes: at
`close()`, or when the gateway dies.
"""
from __future__ import annotations

import asyncio
import json
import marshal
import os
import signal
import struct
import sys
from typing import Any

_LEN = struct.Struct(">I")
# An audit row on the wire: these fields in this order (gateway/audit/log.py's rows); a row that marshal cannot
# carry (a value of another type in its detail) goes as its stored values instead, with a trailing True.
WIRE_FIELDS = ("ts", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method", "host",
               "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
_JSON_FIELDS = ("reasons", "codes", "detail")
MAX_ENTRIES = 65536                     # history entries the process remembers having stored
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0


class WriterError(Exception):
    """The writer process refused a batch (the database refused it); the batch was not stored."""


class WriterGone(WriterError):
    """The writer process died, or could not start; the batch was not stored (or its acknowledgement was lost)."""


def target_of(store: Any) -> tuple[str, str] | None:
    """What the writer process connects to for this store: ("sqlite", file path) or ("postgresql", libpq URL);
    None for a store only this process can open (SQLite in memory)."""
    url = store.engine.url
    if store.engine.dialect.name == "sqlite":
        database = url.database
        if not database or database == ":memory:" or database.startswith("file:") or url.query:
            return None
        return "sqlite", os.path.abspath(database)
    if store.is_postgres:
        return "postgresql", store.libpq_url()
    return None


class WriterProcess:
    """The gateway's side: starts the process on first use (and again after it died), sends batches, waits for
    each one's acknowledgement."""

    def __init__(self, target: tuple[str, str]):
        self._target = target
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.starts = 0                         # processes started (a restart after a death counts)
        self.counts: dict[str, int] = {}        # text_batches: decision batches sent as JSON text (encode_decisions)
        self._closed = False

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def append_events(self, rows: list[dict]) -> None:
        """Chain and insert audit rows (as AuditLog records them); returns once they are committed. The message
        is made on a thread (the rows are not changed once recorded): the event loop only sends it."""
        await self.send(await asyncio.to_thread(encode_events, rows))

    async def send(self, data: bytes) -> None:
        """Send one message (encode_events, encode_decisions); returns once the process has committed it."""
        await self._call(data)

    async def _call(self, data: bytes) -> None:
        async with self._lock:
            proc = await self._running()
            reply = await self._exchange(proc, data)
        if not reply[0]:
            raise WriterError(f"the store's writer process: {reply[1]}")

    async def _exchange(self, proc: asyncio.subprocess.Process, data: bytes) -> Any:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_LEN.pack(len(data)))
            proc.stdin.write(data)
            await proc.stdin.drain()
            size = _LEN.unpack(await proc.stdout.readexactly(_LEN.size))[0]
            return marshal.loads(await proc.stdout.readexactly(size))
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            await self._lost(proc)
            raise WriterGone(f"the store's writer process is gone (exit status {proc.returncode})") from exc
        except BaseException:
            # cancelled half way: a request half written or a reply unread; the next call starts a new process
            await asyncio.shield(self._lost(proc))
            raise

    async def _running(self) -> asyncio.subprocess.Process:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            return proc
        if self._closed:
            raise WriterGone("the store's writer process is stopped")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.store.offload", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=env, cwd=root)
        self._proc = proc
        self.starts += 1
        try:
            reply = await asyncio.wait_for(self._exchange(proc, marshal.dumps(self._target)), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self._lost(proc)
            raise WriterGone("the store's writer process did not start") from None
        if not reply[0]:
            await self._lost(proc)
            raise WriterGone(f"the store's writer process could not open the store: {reply[1]}")
        return proc

    async def _lost(self, proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        await proc.wait()
        if self._proc is proc:
            self._proc = None

    async def close(self) -> None:
        """After the writers' last flush: the process ends once its stdin closes (it has acknowledged every batch
        it was sent)."""
        self._closed = True
        async with self._lock:
            proc, self._proc = self._proc, None
            if proc is None or proc.returncode is not None:
                return
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()


def encode_events(rows: list[dict]) -> bytes:
    """The message for a batch of audit rows (as AuditLog records them)."""
    wire = [tuple(map(row.get, WIRE_FIELDS)) for row in rows]
    try:
        return marshal.dumps(("e", wire))
    except ValueError:                          # a value marshal cannot carry: those rows as their stored values
        return marshal.dumps(("e", [_storable_wire(row, values) for row, values in zip(rows, wire)]))


def encode_decisions(rows: list[tuple], divergences: list[tuple], counts: dict | None = None) -> bytes:
    """The message for decision-log rows: (id, ts, kind, session, input, result, policy_rev, engine, latency_us,
    request_id, the history entries' refs, their ages), the input without its history and not redacted (the
    process redacts it), each ref (KEY, redacted JSON text, the reference's text up to the age, length) as
    gateway/policy/decisionlog.py's _entry_ref makes it; divergences as rows of rowsql.DIVERGENCE_COLS, redacted.
    An input or result marshal cannot carry sends the whole batch as JSON text instead (counted in `counts`)."""
    try:
        return marshal.dumps(("d", rows, divergences))
    except ValueError:
        if counts is not None:
            counts["text_batches"] = counts.get("text_batches", 0) + 1
        dumps = json.dumps
        return marshal.dumps(("D", [r[:4] + (dumps(r[4]), dumps(r[5])) + r[6:] for r in rows], divergences))


def _storable_wire(row: dict, wire: tuple) -> tuple:
    try:
        marshal.dumps(wire)
        return wire
    except ValueError:
        from gateway.store.chain import stored_values
        values = stored_values(row)            # JSON columns as their canonical text; raises what the store would
        return tuple(values[f] for f in WIRE_FIELDS) + (True,)


# -- the process ----------------------------------------------------------------------------------------------

class _Writer:
    def __init__(self, target: tuple[str, str]):
        self.kind, self._where = target
        self.mark = "?" if self.kind == "sqlite" else "%s"
        self._conn: Any = None
        self._seq_known: set[str] = set()
        self._entries: set[str] = set()        # history entries stored (past MAX_ENTRIES the set starts over)

    def connect(self) -> Any:
        if self._conn is None:
            if self.kind == "sqlite":
                import sqlite3
                conn = sqlite3.connect(self._where, timeout=30, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            else:
                import psycopg
                conn = psycopg.connect(self._where)
            self._conn = conn
        return self._conn

    def run(self, work: Any, *args: Any) -> Any:
        """`work(cursor, mark, *args)` in one transaction; rolled back on any error (then the connection is
        opened again for the next batch: it may be the connection that failed)."""
        conn = self.connect()
        try:
            cur = conn.cursor()
            if self.kind == "sqlite":
                cur.execute("BEGIN IMMEDIATE")
            result = work(cur, self.mark, *args)
            conn.commit() if self.kind != "sqlite" else cur.execute("COMMIT")
            cur.close()
            return result
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if self.kind == "sqlite" and conn.in_transaction:
                    conn.execute("ROLLBACK")
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection: nothing more to do with it
                pass

    def events(self, wire: list[tuple]) -> None:
        from gateway.store.chain import JSONText
        from gateway.store.rowsql import append_events
        rows = []
        n = len(WIRE_FIELDS)
        for values in wire:
            row = dict(zip(WIRE_FIELDS, values))
            if len(values) > n:                 # stored values: the JSON columns are their canonical text
                for field in _JSON_FIELDS:
                    row[field] = JSONText(row[field])
            rows.append(row)
        self._seq_known.update(self.run(append_events, rows, self._seq_known))

    def decisions(self, rows: list[tuple], divergences: list[tuple], texts: bool) -> None:
        """Redact and serialise each row's input, make its history's references, and insert the rows after the
        history entries not stored yet (each once: `_entries` remembers which; a new process stores them again,
        which the insert ignores)."""
        from gateway.store.redact import redacted_text
        from gateway.store.rowsql import append_decisions
        dumps, written, new, out = json.dumps, self._entries, {}, []
        for did, ts, kind, session, doc, result, rev, engine, latency, request_id, known, ages in rows:
            if known is not None:
                refs = "[" + ", ".join([k[2] + float.__repr__(a) + "]" for k, a in zip(known, ages)]) + "]"
                for k in known:
                    if k[0] not in written:
                        new[k[0]] = k[1]
            else:
                refs = None
            out.append((did, ts, kind, session, redacted_text(doc if texts else dumps(doc)),
                        result if texts else dumps(result), rev, engine, latency, request_id, refs))
        self.run(append_decisions, out, list(new.items()), divergences)
        if len(written) + len(new) > MAX_ENTRIES:
            written.clear()
        written.update(new)


def _read(stream: Any) -> Any:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    size = _LEN.unpack(head)[0]
    data = stream.read(size)
    if len(data) < size:
        return None
    return marshal.loads(data)


def _send(stream: Any, value: Any) -> None:
    data = marshal.dumps(value)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the gateway stops it (stdin closed) after its last flush
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr                          # nothing else may write to the pipe
    target = _read(inp)
    if target is None:
        return 0
    writer = _Writer(tuple(target))
    try:
        writer.connect()
    except Exception as exc:  # noqa: BLE001 - told to the gateway, which fails the write
        _send(out, (False, f"{exc.__class__.__name__}: {exc}"))
        return 1
    _send(out, (True, os.getpid()))
    while True:
        message = _read(inp)
        if message is None:
            break
        try:
            if message[0] == "e":
                writer.events(message[1])
            else:
                writer.decisions(message[1], message[2], message[0] == "D")
            reply: tuple = (True, None)
        except Exception as exc:  # noqa: BLE001 - the batch is not stored; the gateway keeps it and retries
            reply = (False, f"{exc.__class__.__name__}: {exc}")
        _send(out, reply)
    writer.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
