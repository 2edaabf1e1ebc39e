"""Protocol framing and the SCRAM server (pure)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import struct

import pytest
from hypothesis import given, strategies as st

from gateway.postgres import wire
from gateway.sessions.database import ScramError, ScramServer, database_url, make_verifier, new_password
from gateway.config import parse_database, parse_databases


def test_startup_packets():
    st_ = wire.parse_startup(wire.startup_message({"user": "u", "database": "d"})[4:])
    assert st_.code == wire.PROTOCOL_V3 and st_.params == {"user": "u", "database": "d"}
    assert wire.parse_startup(wire.ssl_request()[4:]).code == wire.SSL_REQUEST
    assert wire.parse_startup(wire.cancel_request(7, -3)[4:]).cancel == (7, -3)
    for bad in (b"", b"\0\0", struct.pack("!i", 2 << 16), struct.pack("!i", wire.PROTOCOL_V3) + b"user\0",
                struct.pack("!ii", wire.CANCEL_REQUEST, 1)):
        with pytest.raises(wire.ProtocolError):
            wire.parse_startup(bad)


@given(st.binary(max_size=64))
def test_parsers_raise_only_protocol_errors(data):
    for parse in (wire.parse_startup, wire.parse_bind, wire.parse_parse, wire.parse_query, wire.parse_execute,
                  wire.parse_describe_or_close, wire.parse_sasl_initial, wire.parse_parameter_description):
        try:
            parse(data)
        except wire.ProtocolError:
            pass


def test_bind_round_trip_and_formats():
    body = (wire.cstr("p") + wire.cstr("s") + struct.pack("!hh", 1, 1) + struct.pack("!h", 2)
            + struct.pack("!i", 4) + struct.pack("!i", 9) + struct.pack("!i", -1) + struct.pack("!h", 0))
    bind = wire.parse_bind(body)
    assert bind.params == (struct.pack("!i", 9), None) and bind.format_of(1) == 1
    with pytest.raises(wire.ProtocolError):
        wire.parse_bind(wire.cstr("") + wire.cstr("") + struct.pack("!hhh", 2, 0, 0) + struct.pack("!h", 3))


def test_read_message_bounds():
    async def go(data: bytes, limit: int):
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await wire.read_message(reader, limit)
    assert asyncio.run(go(wire.message(b"Q", b"x\0"), 10)) == (b"Q", b"x\0")
    with pytest.raises(wire.ProtocolError):
        asyncio.run(go(wire.message(b"Q", b"x" * 20), 10))
    with pytest.raises(wire.ProtocolError):
        asyncio.run(go(b"Q" + struct.pack("!i", 3), 10))


def test_message_reader_frames_what_read_message_frames():
    """Messages split anywhere across reads, several in one read, a body longer than one read, the same bounds
    and the same end of stream as read_message."""
    big = b"x" * (wire.READ_BYTES * 2 + 7)
    msgs = [wire.message(b"B", b"\0s\0" + big[:40]), wire.message(b"E", b"\0\0\0\0\0"), wire.message(b"S"),
            wire.message(b"d", big), wire.message(b"Q", b"select 1\0")]
    data = b"".join(msgs)

    async def go(chunks: list[bytes], limit: int = wire.MAX_MESSAGE_BYTES) -> list:
        reader = asyncio.StreamReader()
        messages = wire.MessageReader(reader, limit)
        out = []

        async def feed():
            for chunk in chunks:
                reader.feed_data(chunk)
                await asyncio.sleep(0)
            reader.feed_eof()
        feeding = asyncio.ensure_future(feed())
        try:
            while True:
                out.append(await messages.next())
        except asyncio.IncompleteReadError as exc:
            out.append(("end", exc.partial))
        except wire.ProtocolError:
            out.append(("error",))
        await feeding
        return out
    want = [(m[:1], m[5:]) for m in msgs] + [("end", b"")]
    for cut in (1, 3, 5, 6, 17, 4096, len(data)):
        chunks = [data[i:i + cut] for i in range(0, len(data), cut)] if cut < 1000 else [data[:cut], data[cut:]]
        assert asyncio.run(go(chunks)) == want, cut
    assert asyncio.run(go([data[:-3]]))[-1] == ("end", msgs[-1][:-3])
    assert asyncio.run(go([wire.message(b"Q", b"x" * 20)], 10)) == [("error",)]
    assert asyncio.run(go([b"Q" + struct.pack("!i", 3)], 10)) == [("error",)]
    assert asyncio.run(go([b"Q" + struct.pack("!i", -1)], 10)) == [("error",)]


def _exchange(verifier_password: str, client_password: str, gs2: str = "n") -> str:
    """A SCRAM-SHA-256 client as libpq runs it (empty user name in the exchange), against the gateway's server."""
    server = ScramServer(make_verifier(verifier_password))
    client_first_bare = "n=,r=" + base64.b64encode(b"client-nonce-123").decode()
    server_first = server.client_first(f"{gs2},,{client_first_bare}")
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", client_password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(client_key).digest()
    without = f"c={base64.b64encode((gs2 + ',,').encode()).decode()},r={attrs['r']}"
    auth = f"{client_first_bare},{server_first},{without}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored, auth, hashlib.sha256).digest()))
    return server.client_final(f"{without},p={base64.b64encode(proof).decode()}")


def test_scram_server_accepts_the_placeholder_and_nothing_else():
    pw = new_password()
    assert _exchange(pw, pw).startswith("v=")
    assert _exchange(pw, pw, gs2="y").startswith("v=")
    with pytest.raises(ScramError):
        _exchange(pw, pw + "x")
    with pytest.raises(ScramError):
        ScramServer(make_verifier(pw)).client_first("p=tls-server-end-point,,n=,r=abc")


def test_database_url_quotes_and_pins_verify_full():
    url = database_url("s_1", "p@ss/word", "db.example:6432", "prod", "/etc/sandgate/ca.pem")
    assert url == ("postgresql://s_1:p%40ss%2Fword@db.example:6432/prod?sslmode=verify-full"
                   "&sslrootcert=/etc/sandgate/ca.pem")


@pytest.mark.parametrize("raw, error", [
    ({"upstream": "db:5432", "dbname": "a", "user": "u"}, "password"),
    ({"upstream": "db", "dbname": "a", "user": "u", "password": "env:X"}, "HOST:PORT"),
    ({"upstream": "db:5432", "dbname": "a", "user": "u", "password": "plain"}, "password"),
    ({"upstream": "db:5432", "dbname": "a", "user": "u", "password": "env:X", "tls": "prefer"}, "tls"),
    ({"upstream": "db:5432", "dbname": "a", "user": "u", "password": "env:X", "bogus": 1}, "bogus"),
    ({"upstream": "db:5432", "dbname": "a", "user": "u", "password": "env:X",
      "max_connections_per_session": 0}, "max_connections_per_session"),
])
def test_database_settings_refuse_bad_values(raw, error):
    with pytest.raises(ValueError, match=error):
        parse_database("prod", raw)


def test_database_settings_defaults():
    db = parse_database("prod", {"upstream": "[::1]:5432", "dbname": "a", "user": "u", "password": "vault:s/db#pw"})
    assert (db.host, db.port, db.tls, db.env_name, db.max_connections_per_session, db.hold_timeout_s) == \
        ("::1", 5432, "verify-full", "PROD_DATABASE_URL", 10, 60.0)
    with pytest.raises(ValueError, match="same env"):
        parse_databases({"a": {"upstream": "h:1", "dbname": "a", "user": "u", "password": "env:X", "env": "V"},
                         "b": {"upstream": "h:1", "dbname": "a", "user": "u", "password": "env:X", "env": "V"}})
    with pytest.raises(ValueError, match="name"):
        parse_database("Prod", {})
