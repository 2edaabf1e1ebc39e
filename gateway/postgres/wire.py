"""PostgreSQL frontend/backend protocol v3: message framing, encoders and decoders. Pure (bytes in, bytes out),
except `read_message` / `read_startup`, which read one bounded message from an asyncio stream, and `MessageReader`,
which reads a connection's messages a read's worth at a time.

Every message after start-up is a type byte, an Int32 length (counting itself) and a body. Start-up packets
(StartupMessage, SSLRequest, GSSENCRequest, CancelRequest) have no type byte.
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import NamedTuple

PROTOCOL_V3 = 196608          # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

MAX_STARTUP_BYTES = 10_000    # the server's own limit for a start-up packet
MAX_MESSAGE_BYTES = 64 * 1024 * 1024   # a message larger than this is refused (bounded buffers)

_I32 = struct.Struct("!i")
_I16 = struct.Struct("!h")
_HDR = struct.Struct("!ci")


class ProtocolError(Exception):
    """The peer broke the protocol: the connection is closed (after an error message where possible)."""


@dataclass(frozen=True)
class Startup:
    """A start-up packet: `code` says which (PROTOCOL_V3, SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST)."""
    code: int
    params: dict[str, str]        # StartupMessage parameters (user, database, options, application_name, ...)
    cancel: tuple[int, int] | None = None   # CancelRequest: (process id, secret key)


def parse_startup(body: bytes) -> Startup:
    """The packet after its length word. ProtocolError when malformed."""
    if len(body) < 4:
        raise ProtocolError("start-up packet too short")
    (code,) = _I32.unpack_from(body)
    if code == CANCEL_REQUEST:
        if len(body) != 12:
            raise ProtocolError("malformed CancelRequest")
        pid, key = struct.unpack_from("!ii", body, 4)
        return Startup(code, {}, (pid, key))
    if code in (SSL_REQUEST, GSSENC_REQUEST):
        if len(body) != 4:
            raise ProtocolError("malformed start-up request")
        return Startup(code, {})
    if code >> 16 != 3:
        raise ProtocolError(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}")
    parts = body[4:].split(b"\0")
    if len(parts) < 2 or parts[-1] != b"" or parts[-2] != b"":
        raise ProtocolError("malformed StartupMessage")
    parts = parts[:-2]
    if len(parts) % 2:
        raise ProtocolError("malformed StartupMessage")
    try:
        params = {parts[i].decode(): parts[i + 1].decode() for i in range(0, len(parts), 2)}
    except UnicodeDecodeError:
        raise ProtocolError("StartupMessage is not UTF-8") from None
    return Startup(code, params)


async def read_startup(reader: asyncio.StreamReader) -> Startup:
    head = await reader.readexactly(4)
    (length,) = _I32.unpack(head)
    if not 8 <= length <= MAX_STARTUP_BYTES:
        raise ProtocolError("bad start-up packet length")
    return parse_startup(await reader.readexactly(length - 4))


async def read_message(reader: asyncio.StreamReader, limit: int = MAX_MESSAGE_BYTES) -> tuple[bytes, bytes]:
    """(type byte, body) of the next message. ProtocolError for a length out of bounds; IncompleteReadError at
    end of stream."""
    head = await reader.readexactly(5)
    kind, length = _HDR.unpack(head)
    if length < 4 or length - 4 > limit:
        raise ProtocolError(f"message {kind!r} of {length} bytes is out of bounds")
    return kind, (await reader.readexactly(length - 4) if length > 4 else b"")


READ_BYTES = 1 << 16


class MessageReader:
    """The messages of a stream, as `read_message` reads them (the same bounds, IncompleteReadError at end of
    stream), taken a read's worth at a time: the messages of one round trip (Bind, Execute, Sync) cost one read
    instead of two awaited `readexactly` each. A message longer than what is read is completed with one
    `readexactly` of its remainder."""
    __slots__ = ("_reader", "_buf", "_pos", "limit")

    def __init__(self, reader: asyncio.StreamReader, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._reader = reader
        self._buf = b""
        self._pos = 0
        self.limit = limit

    def buffered(self) -> bool:
        """Whether bytes of a next message have arrived already (read here, or waiting in the stream's buffer;
        a stream without one counts as empty)."""
        return self._pos < len(self._buf) or bool(getattr(self._reader, "_buffer", None))

    async def next(self) -> tuple[bytes, bytes]:
        buf, pos = self._buf, self._pos
        while True:
            size = len(buf)
            if size - pos >= 5:
                length = int.from_bytes(buf[pos + 1:pos + 5], "big", signed=True)
                if length < 4 or length - 4 > self.limit:
                    raise ProtocolError(f"message {buf[pos:pos + 1]!r} of {length} bytes is out of bounds")
                end = pos + 1 + length
                if end <= size:
                    self._pos = end
                    return buf[pos:pos + 1], buf[pos + 5:end]
                need = end - size
            else:
                need = 5 - (size - pos)
            if need > READ_BYTES:
                data = await self._reader.readexactly(need)
            else:
                data = await self._reader.read(READ_BYTES)
                if not data:
                    raise asyncio.IncompleteReadError(buf[pos:], need)
            buf = buf[pos:] + data if pos < size else data
            pos = 0
            self._buf, self._pos = buf, pos


def message(kind: bytes, body: bytes = b"") -> bytes:
    return _HDR.pack(kind, len(body) + 4) + body


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


# -- backend messages -----------------------------------------------------------------------------------

def auth_ok() -> bytes:
    return message(b"R", _I32.pack(0))


def auth_sasl(mechanisms: list[str]) -> bytes:
    return message(b"R", _I32.pack(10) + b"".join(cstr(m) for m in mechanisms) + b"\0")


def auth_sasl_continue(data: bytes) -> bytes:
    return message(b"R", _I32.pack(11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return message(b"R", _I32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key(pid: int, key: int) -> bytes:
    return message(b"K", struct.pack("!ii", pid, key))


def ready_for_query(status: bytes) -> bytes:
    return message(b"Z", status)


def error_fields(fields: dict[bytes, str]) -> bytes:
    return b"".join(k + cstr(v) for k, v in fields.items()) + b"\0"


def error_response(code: str, text: str, detail: str = "", severity: str = "ERROR") -> bytes:
    fields = {b"S": severity, b"V": severity, b"C": code, b"M": text}
    if detail:
        fields[b"D"] = detail
    return message(b"E", error_fields(fields))


def parse_fields(body: bytes) -> dict[str, str]:
    """ErrorResponse / NoticeResponse fields: {"C": "42501", "M": "...", ...}."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(body) and body[pos] != 0:
        end = body.index(b"\0", pos + 1)
        out[chr(body[pos])] = body[pos + 1:end].decode("utf-8", "replace")
        pos = end + 1
    return out


def parse_command_tag(body: bytes) -> str:
    return body.rstrip(b"\0").decode("utf-8", "replace")


# -- frontend messages ----------------------------------------------------------------------------------

class Reader:
    """Cursor over a message body; every overrun is a ProtocolError."""

    def __init__(self, body: bytes):
        self.body, self.pos = body, 0

    def cstr(self) -> str:
        end = self.body.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string")
        text = self.body[self.pos:end]
        self.pos = end + 1
        try:
            return text.decode()
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None

    def int16(self) -> int:
        pos = self.pos
        if pos + 2 > len(self.body):
            raise ProtocolError("message too short")
        self.pos = pos + 2
        return _I16.unpack_from(self.body, pos)[0]

    def int32(self) -> int:
        pos = self.pos
        if pos + 4 > len(self.body):
            raise ProtocolError("message too short")
        self.pos = pos + 4
        return _I32.unpack_from(self.body, pos)[0]

    def bytes(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.body):
            raise ProtocolError("message too short")
        out = self.body[self.pos:self.pos + n]
        self.pos += n
        return out

    def done(self) -> None:
        if self.pos != len(self.body):
            raise ProtocolError("trailing bytes in message")


@dataclass(frozen=True)
class Parse:
    name: str
    query: str
    param_types: tuple[int, ...]


class Bind(NamedTuple):
    """A Bind message (a named tuple: one is made for every statement a prepared statement runs, and a frozen
    dataclass took ~4 us to make)."""
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]

    def format_of(self, i: int) -> int:
        if not self.param_formats:
            return 0
        return self.param_formats[0] if len(self.param_formats) == 1 else self.param_formats[i]


def parse_query(body: bytes) -> str:
    r = Reader(body)
    text = r.cstr()
    r.done()
    return text


def parse_parse(body: bytes) -> Parse:
    r = Reader(body)
    name, query = r.cstr(), r.cstr()
    types = tuple(r.int32() for _ in range(r.int16()))
    r.done()
    return Parse(name, query, types)


def encode_parse(p: Parse) -> bytes:
    return message(b"P", cstr(p.name) + cstr(p.query) + struct.pack("!h", len(p.param_types))
                   + b"".join(struct.pack("!I", t & 0xFFFFFFFF) for t in p.param_types))


def parse_bind(body: bytes) -> Bind:
    r = Reader(body)
    portal, statement = r.cstr(), r.cstr()
    nformats = r.int16()
    formats = tuple([r.int16() for _ in range(nformats)]) if nformats else ()
    count = r.int16()
    if formats and len(formats) not in (1, count):
        raise ProtocolError("Bind: parameter format count does not match")
    for f in formats:
        if f not in (0, 1):
            raise ProtocolError("Bind: unknown parameter format")
    params: list[bytes | None] = []
    for _ in range(count):
        n = r.int32()
        params.append(None if n == -1 else r.bytes(n))
    nresults = r.int16()
    results = tuple([r.int16() for _ in range(nresults)]) if nresults else ()
    r.done()
    return Bind(portal, statement, formats, tuple(params), results)


def encode_bind_to(statement: str) -> bytes:
    """A Bind of the unnamed portal to `statement` with no parameters (the refusal stand-in: see poison)."""
    return message(b"B", cstr("") + cstr(statement) + struct.pack("!hhh", 0, 0, 0))


def parse_describe_or_close(body: bytes) -> tuple[str, str]:
    """('S' or 'P', name) of a Describe or Close."""
    r = Reader(body)
    what = r.bytes(1).decode("latin-1")
    name = r.cstr()
    r.done()
    if what not in ("S", "P"):
        raise ProtocolError("Describe/Close must name 'S' or 'P'")
    return what, name


def parse_execute(body: bytes) -> tuple[str, int]:
    r = Reader(body)
    portal = r.cstr()
    rows = r.int32()
    r.done()
    return portal, rows


def parse_parameter_description(body: bytes) -> tuple[int, ...]:
    r = Reader(body)
    return tuple(r.int32() & 0xFFFFFFFF for _ in range(r.int16()))


def parse_sasl_initial(body: bytes) -> tuple[str, bytes]:
    r = Reader(body)
    mech = r.cstr()
    n = r.int32()
    data = b"" if n == -1 else r.bytes(n)
    r.done()
    return mech, data


def sasl_initial(mechanism: str, data: bytes) -> bytes:
    return message(b"p", cstr(mechanism) + _I32.pack(len(data)) + data)


def startup_message(params: dict[str, str]) -> bytes:
    body = _I32.pack(PROTOCOL_V3) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\0"
    return _I32.pack(len(body) + 4) + body


def ssl_request() -> bytes:
    return struct.pack("!ii", 8, SSL_REQUEST)


def cancel_request(pid: int, key: int) -> bytes:
    return struct.pack("!iiii", 16, CANCEL_REQUEST, pid, key)
