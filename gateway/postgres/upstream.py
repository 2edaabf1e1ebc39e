"""The gateway's login to the real database: TCP to the configured address (an endpoint the operator configured:
no `egress.private_allow` check), TLS per the database's `tls`, then the real role's password.

Below `verify-full` only SCRAM-SHA-256 is answered: a server that asks for md5 or a cleartext password may be a
spoofed one, and gets nothing. Whatever fails is an `UpstreamError` with a SQLSTATE and a message that never
carries the password.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import ssl
import struct
from dataclasses import dataclass, field

import certifi
from scramp import ScramClient

from gateway.postgres import wire
from gateway.config import DatabaseSettings

CONNECT_TIMEOUT_S = 10.0
# start-up parameters of the sandbox's client passed on to the server (never `options`: `-c` settings there
# would change the session with no statement to decide)
# client_encoding is always UTF8: the gateway reads statements as UTF-8 (another encoding, SJIS say, lexes the
# same bytes differently: a backslash inside a multibyte character can end a string early)
PASSED_PARAMS = ("application_name", "DateStyle", "TimeZone", "IntervalStyle", "extra_float_digits")


class UpstreamError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Upstream:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    pid: int = 0
    key: int = 0
    parameters: dict[str, str] = field(default_factory=dict)
    status: bytes = b"I"


@functools.lru_cache(maxsize=64)
def tls_context(db: DatabaseSettings) -> ssl.SSLContext | None:
    """The client TLS context for a database, built once (loading the public roots takes tens of ms)."""
    if db.tls == "disable":
        return None
    if db.tls == "require":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context(cafile=certifi.where())
    if db.upstream_ca:
        ctx.load_verify_locations(cafile=db.upstream_ca)
    return ctx


async def connect(db: DatabaseSettings, password: str, client_params: dict[str, str]) -> Upstream:
    try:
        return await asyncio.wait_for(_connect(db, password, client_params), CONNECT_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise UpstreamError("08006", f"the database {db.name} did not answer in time") from None
    except (OSError, asyncio.IncompleteReadError, wire.ProtocolError, ssl.SSLError) as exc:
        kind = "certificate" if isinstance(exc, ssl.SSLCertVerificationError) else type(exc).__name__
        raise UpstreamError("08006", f"cannot reach the database {db.name} ({kind})") from None


async def _connect(db: DatabaseSettings, password: str, client_params: dict[str, str]) -> Upstream:
    reader, writer = await asyncio.open_connection(db.host, db.port, limit=2 ** 20)
    try:
        ctx = tls_context(db)
        if ctx is not None:
            writer.write(wire.ssl_request())
            await writer.drain()
            answer = await reader.readexactly(1)
            if answer != b"S":
                raise UpstreamError("08006", f"the database {db.name} does not offer TLS (tls = {db.tls})")
            await writer.start_tls(ctx, server_hostname=db.host)
        params = {"user": db.user, "database": db.dbname, "client_encoding": "UTF8"}
        params |= {k: v for k, v in client_params.items() if k in PASSED_PARAMS}
        writer.write(wire.startup_message(params))
        await writer.drain()
        up = Upstream(reader, writer)
        await _login(up, db, password)
        return up
    except BaseException:
        writer.close()
        raise


async def _login(up: Upstream, db: DatabaseSettings, password: str) -> None:
    scram: ScramClient | None = None
    while True:
        kind, body = await wire.read_message(up.reader, 1 << 20)
        if kind == b"E":
            fields = wire.parse_fields(body)
            code = fields.get("C", "08006")
            raise UpstreamError(code if code in ("53300", "57P03", "3D000") else "08006",
                                f"the database {db.name} refused sandgate's login ({code})")
        if kind == b"R":
            (method,) = struct.unpack_from("!i", body)
            if method == 0:
                continue
            if method == 10:
                mechs = [m for m in body[4:].split(b"\0") if m]
                if b"SCRAM-SHA-256" not in mechs:
                    raise UpstreamError("08006", f"the database {db.name} offers no SCRAM-SHA-256")
                scram = ScramClient(["SCRAM-SHA-256"], db.user, password)
                up.writer.write(wire.sasl_initial("SCRAM-SHA-256", scram.get_client_first().encode()))
            elif method == 11 and scram is not None:
                # the client proof derives the password's key (PBKDF2, thousands of rounds): off the loop
                final = await asyncio.to_thread(_client_final, scram, body[4:].decode())
                up.writer.write(wire.message(b"p", final.encode()))
            elif method == 12 and scram is not None:
                try:
                    scram.set_server_final(body[4:].decode())
                except Exception:  # noqa: BLE001 - a server that cannot prove it knows the password
                    raise UpstreamError("08006", f"the database {db.name} failed SCRAM server proof") from None
                continue
            elif method in (3, 5) and db.tls == "verify-full":
                if method == 3:
                    up.writer.write(wire.message(b"p", wire.cstr(password)))
                else:
                    salt = body[4:8]
                    inner = hashlib.md5((password + db.user).encode()).hexdigest()
                    outer = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
                    up.writer.write(wire.message(b"p", wire.cstr(outer)))
            else:
                raise UpstreamError("08006", f"the database {db.name} asked for an authentication sandgate will "
                                    f"not answer with tls = {db.tls} (only SCRAM-SHA-256 below verify-full)")
            await up.writer.drain()
        elif kind == b"S":
            parts = body.split(b"\0")
            up.parameters[parts[0].decode()] = parts[1].decode() if len(parts) > 1 else ""
        elif kind == b"K":
            up.pid, up.key = struct.unpack_from("!ii", body)
        elif kind == b"N":
            continue
        elif kind == b"Z":
            up.status = body[:1]
            return
        elif kind == b"v":
            continue          # NegotiateProtocolVersion: the server speaks 3.0 without our (nonexistent) options
        else:
            raise UpstreamError("08P01", f"the database {db.name} sent an unexpected message during login")


def _client_final(scram: ScramClient, server_first: str) -> str:
    scram.set_server_first(server_first)
    return scram.get_client_final()


async def send_cancel(db: DatabaseSettings, pid: int, key: int) -> None:
    """A CancelRequest for the real backend (its own short connection; the server answers nothing)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(db.host, db.port), CONNECT_TIMEOUT_S)
    except (OSError, asyncio.TimeoutError):
        return
    try:
        writer.write(wire.cancel_request(pid, key))
        await writer.drain()
        await asyncio.wait_for(reader.read(1), 2.0)
    except (OSError, asyncio.TimeoutError):
        pass
    finally:
        writer.close()
