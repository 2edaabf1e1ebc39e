"""Signed aws-chunked bodies: AWS's own published example checks; re-signing writes a chain the real key verifies;
any byte changed, a chunk too large, a cut body: SigV4Error. Fed in any split, the output is the same."""
from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.sigv4 import EMPTY_SHA256, SigV4Error, signing_key
from broker.sigv4_chunks import ChunkResigner

# "Signature Calculations for the Authorization Header: Transferring Payload in Multiple Chunks" (Amazon S3 API
# reference): its example PUT of 66,560 bytes of 'a', in a 65,536-byte and a 1,024-byte chunk.
DOC_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
DOC_TS, DOC_SCOPE = "20130524T000000Z", "20130524/us-east-1/s3/aws4_request"
DOC_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
DOC_SIGS = ["ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
            "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
            "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"]
KEY = signing_key(DOC_SECRET, "20130524", "us-east-1", "s3")
REAL_KEY = signing_key("the real secret", "20130524", "us-east-1", "s3")


def doc_body() -> bytes:
    chunks = [b"a" * 65536, b"a" * 1024, b""]
    return b"".join(b"%x;chunk-signature=%s\r\n%s\r\n" % (len(c), s.encode(), c) for c, s in zip(chunks, DOC_SIGS))


def resigner(**kw) -> ChunkResigner:
    args = dict(timestamp_in=DOC_TS, timestamp_out=DOC_TS, scope_in=DOC_SCOPE, scope_out=DOC_SCOPE, key_in=KEY,
                key_out=KEY, seed_in=DOC_SEED, seed_out=DOC_SEED, max_chunk=1 << 20)
    args.update(kw)
    return ChunkResigner(**args)


def run(r: ChunkResigner, body: bytes, step: int = 1000) -> bytes:
    out = b"".join(r.feed(body[i:i + step]) for i in range(0, len(body), step))
    r.finish()
    return out


def test_aws_example_verifies_and_signing_with_the_same_key_gives_it_back() -> None:
    assert run(resigner(), doc_body()) == doc_body()


def test_resigned_chain_verifies_with_the_real_key() -> None:
    out = run(resigner(key_out=REAL_KEY, seed_out="1" * 64), doc_body())
    assert len(out) == len(doc_body())
    checker = resigner(key_in=REAL_KEY, seed_in="1" * 64, key_out=REAL_KEY, seed_out="1" * 64)
    assert run(checker, out) == out                 # a checker holding the real key accepts it
    assert not any(sig.encode() in out for sig in DOC_SIGS)


@pytest.mark.parametrize("where", [10, 200, 65600, len(doc_body()) - 70])
def test_any_changed_byte_is_refused(where: int) -> None:
    body = bytearray(doc_body())
    body[where] = body[where] ^ 1 if body[where] not in b"\r\n;" else body[where]
    if bytes(body) == doc_body():
        body[where + 1] ^= 1
    with pytest.raises(SigV4Error):
        run(resigner(), bytes(body))


def test_wrong_key_cut_body_and_large_chunks_are_refused() -> None:
    with pytest.raises(SigV4Error, match="does not match"):
        run(resigner(key_in=REAL_KEY), doc_body())
    with pytest.raises(SigV4Error, match="ended early"):
        run(resigner(), doc_body()[:-10])
    with pytest.raises(SigV4Error) as too_large:
        run(resigner(max_chunk=1024), doc_body())
    assert too_large.value.code == "secret.body_too_large"
    with pytest.raises(SigV4Error, match="after"):
        run(resigner(), doc_body() + b"x")
    with pytest.raises(SigV4Error, match="malformed"):
        run(resigner(), b"zz;chunk-signature=" + b"0" * 64 + b"\r\n")


def sign(key: bytes, kind: str, prev: str, digest: str) -> str:
    parts = [f"AWS4-HMAC-SHA256-{kind}", DOC_TS, DOC_SCOPE, prev] + ([EMPTY_SHA256] if kind == "PAYLOAD" else [])
    return hmac.new(key, "\n".join(parts + [digest]).encode(), hashlib.sha256).hexdigest()


def trailer_body(key: bytes, seed: str, chunks: list[bytes]) -> bytes:
    out, prev = b"", seed
    for data in chunks + [b""]:
        prev = sign(key, "PAYLOAD", prev, hashlib.sha256(data).hexdigest())
        out += b"%x;chunk-signature=%s\r\n" % (len(data), prev.encode()) + (data + b"\r\n" if data else b"")
    trailer = b"x-amz-checksum-crc32:sOO8/Q=="
    prev = sign(key, "TRAILER", prev, hashlib.sha256(trailer + b"\n").hexdigest())
    return out + trailer + b"\r\nx-amz-trailer-signature:" + prev.encode() + b"\r\n\r\n"


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.binary(min_size=1, max_size=300), max_size=5), step=st.integers(1, 400))
def test_signed_trailer_any_split(chunks: list[bytes], step: int) -> None:
    body = trailer_body(KEY, DOC_SEED, chunks)
    out = run(resigner(trailer=True, key_out=REAL_KEY, seed_out="2" * 64), body, step)
    assert out == trailer_body(REAL_KEY, "2" * 64, chunks)
    with pytest.raises(SigV4Error):
        run(resigner(trailer=True), body.replace(b"sOO8", b"sOO9"), step)
