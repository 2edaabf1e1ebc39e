"""A bare uvloop TCP byte relay (no parsing): the ceiling of a Python relay on this machine, for
tests/bench/postgres.py. Usage: python tests/bench/pgrelay.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT
[--tls CERT KEY UPSTREAM_CA].

Plain, it carries the client's TLS end to end and encrypts nothing. With `--tls` it does what the gateway does
with TLS and nothing else: answers the client's SSLRequest with `S` and ends its TLS (CERT, KEY), sends an
SSLRequest upstream and begins TLS there (verified against UPSTREAM_CA), then relays the bytes in between: the
like-with-like ceiling for the gateway's two TLS legs."""
from __future__ import annotations

import asyncio
import ssl
import sys

import uvloop

SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def main(port: int, host: str, up_port: int, tls: list[str]) -> None:
    server_ctx = client_ctx = None
    if tls:
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(tls[0], tls[1])
        client_ctx = ssl.create_default_context(cafile=tls[2])

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if server_ctx is not None and client_ctx is not None:
                if await reader.readexactly(8) != SSL_REQUEST:
                    writer.close()
                    return
                writer.write(b"S")
                await writer.drain()
                await writer.start_tls(server_ctx)
                up_reader, up_writer = await asyncio.open_connection(host, up_port)
                up_writer.write(SSL_REQUEST)
                if await up_reader.readexactly(1) != b"S":
                    writer.close()
                    up_writer.close()
                    return
                await up_writer.start_tls(client_ctx, server_hostname=host)
            else:
                up_reader, up_writer = await asyncio.open_connection(host, up_port)
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("relay ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    extra = sys.argv[4:]
    uvloop.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), extra[1:4] if extra[:1] == ["--tls"] else []))
