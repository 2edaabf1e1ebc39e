"""aws-chunked uploads with signed chunks (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`), checked and signed again
chunk by chunk.

Each chunk's signature chains from the one before it, starting at the request's own signature ("seed"). The
sandbox's chain is checked with the placeholder's signing key; a new chain is written from the re-signed request's
seed with the real key. Signatures are 64 hex digits either way, so every chunk keeps its length and the request its
Content-Length. A chunk is held until it is whole (its header must carry the signature of its data), never more
than `max_chunk` bytes: beyond, SigV4Error. Pure: bytes in, bytes out.
"""
from __future__ import annotations

import hashlib
import hmac
import re

from broker.sigv4 import EMPTY_SHA256, SigV4Error

_HEAD = re.compile(rb"([0-9a-fA-F]{1,16});chunk-signature=([0-9a-f]{64})\r\n")
_MAX_HEAD = 16 + 17 + 64 + 2
_MAX_TRAILER = 16 * 1024


class ChunkResigner:
    """Feed the body as it comes; each call returns the bytes that may go on (the chunks finished so far)."""

    def __init__(self, *, timestamp_in: str, timestamp_out: str, scope_in: str, scope_out: str, key_in: bytes,
                 key_out: bytes, seed_in: str, seed_out: str, max_chunk: int, trailer: bool = False) -> None:
        self._ts, self._ts_out = timestamp_in, timestamp_out
        self._scope_in, self._scope_out = scope_in, scope_out
        self._key_in, self._key_out = key_in, key_out
        self._prev_in, self._prev_out = seed_in, seed_out
        self._max = max_chunk
        self._trailer = trailer
        self._buf = bytearray()
        self._state = "head"                        # head -> data -> (head ...) -> trailer -> done
        self._need = 0
        self._pending_sig = ""

    def _sign(self, key: bytes, kind: str, ts: str, scope: str, prev: str, digest: str) -> str:
        sts = "\n".join([f"AWS4-HMAC-SHA256-{kind}", ts, scope, prev] +
                        ([EMPTY_SHA256] if kind == "PAYLOAD" else []) + [digest])
        return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()

    def _chunk(self, data: bytes, sig_in: str) -> bytes:
        digest = hashlib.sha256(data).hexdigest()
        expected = self._sign(self._key_in, "PAYLOAD", self._ts, self._scope_in, self._prev_in, digest)
        if not hmac.compare_digest(expected, sig_in):
            raise SigV4Error("a chunk signature does not match")
        self._prev_in = sig_in
        self._prev_out = self._sign(self._key_out, "PAYLOAD", self._ts_out, self._scope_out, self._prev_out, digest)
        return b"%x;chunk-signature=%s\r\n" % (len(data), self._prev_out.encode())

    def feed(self, chunk: bytes) -> bytes:
        self._buf += chunk
        out = bytearray()
        while True:
            if self._state == "head":
                match = _HEAD.match(self._buf)
                if match is None:
                    if len(self._buf) >= _MAX_HEAD or b"\n" in self._buf[:_MAX_HEAD]:
                        raise SigV4Error("an aws-chunked chunk header is malformed")
                    return bytes(out)
                size = int(match.group(1), 16)
                if size > self._max:
                    raise SigV4Error("an aws-chunked chunk is larger than sandgate holds", code="secret.body_too_large")
                self._pending_sig = match.group(2).decode()
                del self._buf[:match.end()]
                self._need = size
                self._state = "data" if size else "last"
            if self._state == "data":
                if len(self._buf) < self._need + 2:
                    return bytes(out)
                if self._buf[self._need:self._need + 2] != b"\r\n":
                    raise SigV4Error("an aws-chunked chunk is not followed by CRLF")
                data = bytes(self._buf[:self._need])
                del self._buf[:self._need + 2]
                out += self._chunk(data, self._pending_sig) + data + b"\r\n"
                self._state = "head"
                continue
            if self._state == "last":
                out += self._chunk(b"", self._pending_sig)
                self._state = "trailer" if self._trailer else "end"
            if self._state == "end":
                if len(self._buf) < 2:
                    return bytes(out)
                if self._buf[:2] != b"\r\n" or len(self._buf) > 2:
                    raise SigV4Error("data after the last aws-chunked chunk")
                del self._buf[:2]
                self._state = "done"
                return bytes(out + b"\r\n")
            if self._state == "trailer":
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > _MAX_TRAILER:
                        raise SigV4Error("the aws-chunked trailer is too large")
                    return bytes(out)
                out += self._trailers(bytes(self._buf[:end]))
                if len(self._buf) > end + 4:
                    raise SigV4Error("data after the aws-chunked trailer")
                del self._buf[:end + 4]
                self._state = "done"
                return bytes(out)
            if self._state == "done":
                if self._buf:
                    raise SigV4Error("data after the end of an aws-chunked body")
                return bytes(out)

    def _trailers(self, block: bytes) -> bytes:
        lines = block.split(b"\r\n")
        fields = [line for line in lines if not line.lower().startswith(b"x-amz-trailer-signature:")]
        sigs = [line.split(b":", 1)[1].strip().decode() for line in lines if line not in fields]
        if len(sigs) != 1 or not fields:
            raise SigV4Error("the aws-chunked trailer carries no single signature")
        canonical = b"".join(line.split(b":", 1)[0].strip().lower() + b":" + line.split(b":", 1)[1].strip() + b"\n"
                             for line in fields if b":" in line)
        digest = hashlib.sha256(canonical).hexdigest()
        expected = self._sign(self._key_in, "TRAILER", self._ts, self._scope_in, self._prev_in, digest)
        if not hmac.compare_digest(expected, sigs[0]):
            raise SigV4Error("the trailer signature does not match")
        new = self._sign(self._key_out, "TRAILER", self._ts_out, self._scope_out, self._prev_out, digest)
        return b"\r\n".join(fields) + b"\r\nx-amz-trailer-signature:" + new.encode() + b"\r\n\r\n"

    def finish(self) -> None:
        """SigV4Error unless the whole body was seen (a cut upload is not passed on as complete)."""
        if self._state != "done":
            raise SigV4Error("the aws-chunked body ended early")
