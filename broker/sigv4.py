"""AWS Signature Version 4: check the sandbox's signature with its placeholder secret, sign again with the real one.

Pure functions of plain values (no I/O, no mitmproxy; the clock is passed in, except that botocore's signers stamp
the new signature with the current time). Checking follows botocore's canonical request (`SigV4Auth`,
`S3SigV4Auth`: S3 paths are not normalised, other services' are, and encoded once more); a request an SDK spelled
the specification's way (each query key and value encoded with `-_.~` kept) is accepted too. Signing again is
botocore's own: `SigV4Auth` / `S3SigV4Auth` for a signed head, `SigV4QueryAuth` / `S3SigV4QueryAuth` for a
presigned URL, with the payload hash the sandbox signed (a body hash, `UNSIGNED-PAYLOAD`, a streaming value).
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

ALGORITHM = "AWS4-HMAC-SHA256"
AMZ_DATE = re.compile(r"(\d{8})T\d{6}Z\Z")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING = frozenset({STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER})
SIGNED_CHUNKS = frozenset({STREAMING_SIGNED, STREAMING_SIGNED_TRAILER})
S3_SERVICES = frozenset({"s3", "s3-object-lambda", "s3-outposts"})
MAX_SKEW_S = 15 * 60                      # a signed head's X-Amz-Date: at most this far from now (AWS's own window)
MAX_PRESIGN_S = 7 * 24 * 3600             # a presigned URL lives at most a week (AWS's own limit)
BAD_SIGNATURE = "secret.bad_signature"
AUTH_QUERY = frozenset({"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires", "x-amz-signedheaders",
                        "x-amz-signature", "x-amz-security-token"})
AUTH_HEADERS = frozenset({"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"})
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_HASH = re.compile(r"[0-9a-fA-F]{64}\Z")
_SCOPE_PART = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_KEY_ID = re.compile(r"[A-Za-z0-9]{16,128}\Z")


class SigV4Error(ValueError):
    """A signature that is absent, malformed, stale or wrong. `code` is stable; the message carries no secret."""

    def __init__(self, message: str, code: str = BAD_SIGNATURE) -> None:
        super().__init__(message)
        self.code = code


class Credentials(NamedTuple):
    access_key: str
    secret_key: str
    token: str | None = None


@dataclass(frozen=True)
class Request:
    """A request as the sandbox sent it: the raw path and query, every header field in order."""

    method: str
    scheme: str
    host: str                                  # the Host header (or HTTP/2 authority) as sent
    path: str                                  # raw, with the query ("/bucket/key?uploads")
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name]
        return ",".join(values) if values else None

    @property
    def raw_path(self) -> str:
        return self.path.partition("?")[0] or "/"

    @property
    def raw_query(self) -> str:
        return self.path.partition("?")[2]


@dataclass(frozen=True)
class Signature:
    """The SigV4 signature a request carries (in its Authorization header or its presigned query)."""

    access_key: str
    timestamp: str                             # X-Amz-Date, "20260101T000000Z"
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    presigned: bool = False
    expires: int = 0                           # presigned: X-Amz-Expires

    @property
    def scope(self) -> str:
        return f"{self.timestamp[:8]}/{self.region}/{self.service}/aws4_request"

    @property
    def s3(self) -> bool:
        return self.service in S3_SERVICES


# ---------------------------------------------------------------- parsing

def _query_pairs(query: str) -> list[tuple[str, str]]:
    return [(k, v) for k, _, v in (p.partition("=") for p in query.split("&")) if k or v] if query else []


def _credential(text: str) -> tuple[str, str, str, str, str]:
    parts = text.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise SigV4Error("the credential scope is not KEY/DATE/REGION/SERVICE/aws4_request")
    key, date, region, service, _ = parts
    if not _KEY_ID.match(key) or not re.fullmatch(r"\d{8}", date) or not _SCOPE_PART.match(region) \
            or not _SCOPE_PART.match(service):
        raise SigV4Error("the credential scope is malformed")
    return key, date, region, service, _


def _signed_headers(text: str) -> tuple[str, ...]:
    names = tuple(text.split(";"))
    if not names or any(not n or n != n.strip().lower() for n in names) or list(names) != sorted(set(names)):
        raise SigV4Error("SignedHeaders is not a sorted list of lower-case names")
    return names


def parse_signature(req: Request) -> Signature | None:
    """The SigV4 signature of `req`; None when it carries none (no `AWS4-HMAC-SHA256` Authorization, no
    `X-Amz-Algorithm` query). SigV4Error when it carries one that is malformed, or more than one."""
    auth = [v for k, v in req.headers if k.lower() == "authorization"]
    query = {unquote(k).lower(): (k, v) for k, v in _query_pairs(req.raw_query)}
    presigned = "x-amz-algorithm" in query or "x-amz-signature" in query or "x-amz-credential" in query
    aws_auth = [v for v in auth if v.strip().startswith(ALGORITHM)]
    if not aws_auth and not presigned:
        if any(v.strip().upper().startswith("AWS ") or v.strip().startswith("AWS4-") for v in auth) or (
                "awsaccesskeyid" in query and "signature" in query):
            raise SigV4Error("only AWS4-HMAC-SHA256 (SigV4) signatures are accepted, not Signature Version 2 "
                             "(for `aws s3 presign`: s3 signature_version = s3v4)")
        return None
    if len(auth) > 1 or (aws_auth and presigned):
        raise SigV4Error("a request carries one signature")
    if aws_auth:
        fields: dict[str, str] = {}
        for part in aws_auth[0].strip()[len(ALGORITHM):].split(","):
            name, eq, value = part.strip().partition("=")
            if not eq or name in fields:
                raise SigV4Error("the Authorization header is malformed")
            fields[name] = value.strip()
        if set(fields) != {"Credential", "SignedHeaders", "Signature"}:
            raise SigV4Error("the Authorization header is malformed")
        key, date, region, service, _ = _credential(fields["Credential"])
        stamp = req.header("x-amz-date") or ""
        signed = _signed_headers(fields["SignedHeaders"])
        signature = fields["Signature"]
        expires = 0
    else:
        values = {name: unquote(v) for name, (_k, v) in query.items() if name in AUTH_QUERY}
        if len([1 for k, _ in _query_pairs(req.raw_query) if unquote(k).lower() in AUTH_QUERY]) != len(values):
            raise SigV4Error("a presigned URL names an authentication parameter twice")
        if values.get("x-amz-algorithm") != ALGORITHM:
            raise SigV4Error("only AWS4-HMAC-SHA256 presigned URLs are accepted")
        key, date, region, service, _ = _credential(values.get("x-amz-credential", ""))
        stamp = values.get("x-amz-date", "")
        signed = _signed_headers(values.get("x-amz-signedheaders", ""))
        signature = values.get("x-amz-signature", "")
        expires_text = values.get("x-amz-expires", "")
        if not expires_text.isdigit() or not 1 <= int(expires_text) <= MAX_PRESIGN_S:
            raise SigV4Error(f"X-Amz-Expires must be 1 to {MAX_PRESIGN_S} seconds")
        expires = int(expires_text)
    match = AMZ_DATE.match(stamp)
    if not match or match.group(1) != date:
        raise SigV4Error("X-Amz-Date is missing, malformed or not the credential scope's date")
    if not _HEX64.match(signature):
        raise SigV4Error("the signature is not 64 lower-case hex digits")
    if "host" not in signed:
        raise SigV4Error("the Host header must be signed")
    return Signature(access_key=key, timestamp=stamp, region=region, service=service, signed_headers=signed,
                     signature=signature, presigned=not aws_auth, expires=expires)


def parse_timestamp(stamp: str) -> float:
    """X-Amz-Date ("20260101T000000Z") as seconds since the epoch."""
    return float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))


# ---------------------------------------------------------------- the payload hash

def declared_payload(req: Request, sig: Signature) -> str | None:
    """The payload hash the request declares (x-amz-content-sha256), None when it declares none. SigV4Error for a
    value that is neither a SHA-256 nor one of the unsigned or streaming values."""
    value = req.header("x-amz-content-sha256")
    if value is None:
        return UNSIGNED_PAYLOAD if sig.presigned and sig.s3 else None
    value = value.strip()
    if value in STREAMING or value == UNSIGNED_PAYLOAD:
        return value
    if _HASH.match(value):
        return value
    raise SigV4Error("x-amz-content-sha256 is not a SHA-256, UNSIGNED-PAYLOAD or a streaming value")


def payload_hash(req: Request, sig: Signature, body: bytes | None) -> str:
    """The payload hash the signature covers: the declared one, else the SHA-256 of the body (SigV4Error when the
    body is not at hand: it was too large to hold)."""
    declared = declared_payload(req, sig)
    if declared is not None:
        return declared
    if body is None:
        raise SigV4Error("the request body is too large to check its signature", code="secret.body_too_large")
    return hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256


# ---------------------------------------------------------------- checking

def _trim(value: str) -> str:
    return " ".join(value.split())


def _canonical_headers(req: Request, names: Sequence[str]) -> str:
    lines = []
    for name in names:
        values = [v for k, v in req.headers if k.lower() == name]
        if name == "host" and not values:
            values = [req.host]
        if not values:
            raise SigV4Error(f"the signed header {name!r} is missing")
        lines.append(f"{name}:{','.join(_trim(v) for v in values)}")
    return "\n".join(lines) + "\n"


def _query_botocore(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _query_spec(pairs: list[tuple[str, str]]) -> str:
    encoded = [(quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~")) for k, v in pairs]
    return "&".join(f"{k}={v}" for k, v in sorted(encoded))


def _path_botocore(path: str, s3: bool) -> str:
    return path if s3 else quote(_botocore().normalize_url_path(path), safe="/~")


def _path_spec(path: str, s3: bool) -> str:
    decoded = unquote(path)
    if not s3:
        decoded = _botocore().normalize_url_path(decoded)
        return quote(quote(decoded, safe="/~"), safe="/~")
    return quote(decoded, safe="/~")


def canonical_requests(req: Request, sig: Signature, payload: str) -> list[str]:
    """The canonical requests the sandbox may have signed: botocore's spelling first, then the specification's
    when it differs."""
    pairs = _query_pairs(req.raw_query)
    if sig.presigned:
        pairs = [(k, v) for k, v in pairs if unquote(k).lower() != "x-amz-signature"]
    head = _canonical_headers(req, sig.signed_headers)
    signed = ";".join(sig.signed_headers)
    out = []
    for path, query in ((_path_botocore(req.raw_path, sig.s3), _query_botocore(pairs)),
                        (_path_spec(req.raw_path, sig.s3), _query_spec(pairs))):
        text = "\n".join([req.method.upper(), path, query, head, signed, payload])
        if text not in out:
            out.append(text)
    return out


@functools.lru_cache(maxsize=256)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def string_to_sign(sig: Signature, canonical: str) -> str:
    return "\n".join([ALGORITHM, sig.timestamp, sig.scope, hashlib.sha256(canonical.encode()).hexdigest()])


def check_time(sig: Signature, now: float) -> None:
    """SigV4Error when the signature is stale: a head signed more than 15 minutes from now, a presigned URL past
    its expiry (or dated more than 15 minutes ahead)."""
    signed_at = parse_timestamp(sig.timestamp)
    if signed_at - now > MAX_SKEW_S:
        raise SigV4Error("the signature is dated in the future")
    if sig.presigned:
        if now > signed_at + sig.expires:
            raise SigV4Error("the presigned URL has expired")
    elif now - signed_at > MAX_SKEW_S:
        raise SigV4Error("the signature has expired")


def verify(req: Request, sig: Signature, secret: str, payload: str, now: float) -> None:
    """Raise SigV4Error unless `sig` is a current, correct signature of `req` by `secret`."""
    check_time(sig, now)
    key = signing_key(secret, sig.timestamp[:8], sig.region, sig.service)
    for canonical in canonical_requests(req, sig, payload):
        expected = hmac.new(key, string_to_sign(sig, canonical).encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, sig.signature):
            return
    raise SigV4Error("the signature does not match")


# ---------------------------------------------------------------- signing again

def _fixed_payload(base: type[SigV4Auth]) -> type[SigV4Auth]:
    class Signer(base):  # type: ignore[misc, valid-type]
        """botocore's signer, with the payload hash the sandbox signed (never re-read from a body)."""

        def __init__(self, credentials: Any, service: str, region: str, payload: str, **kwargs: int) -> None:
            super().__init__(credentials, service, region, **kwargs)
            self._payload = payload

        def payload(self, request: AWSRequest) -> str:
            return self._payload

    Signer.__name__ = base.__name__
    return Signer


def load_botocore() -> None:
    """Import what signing uses of botocore now: blocking (about a tenth of a second of CPU), so a server with
    AWS credentials calls it on a thread at start-up rather than let its first signed request import it on the
    event loop."""
    _botocore()


@functools.cache
def _botocore() -> SimpleNamespace:
    """What this module uses of botocore, loaded at the first AWS request a secret is injected into (botocore
    and the urllib3 it imports cost a `serve` start about a tenth of a second of CPU)."""
    from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth, SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import ReadOnlyCredentials
    from botocore.utils import normalize_url_path

    return SimpleNamespace(
        head_signer={True: _fixed_payload(S3SigV4Auth), False: _fixed_payload(SigV4Auth)},
        query_signer={True: _fixed_payload(S3SigV4QueryAuth), False: _fixed_payload(SigV4QueryAuth)},
        AWSRequest=AWSRequest, ReadOnlyCredentials=ReadOnlyCredentials, normalize_url_path=normalize_url_path)


def _aws_request(method: str, url: str, headers: list[tuple[str, str]]) -> AWSRequest:
    aws = _botocore().AWSRequest(method=method, url=url)
    for name, value in headers:
        aws.headers[name] = value               # an HTTPMessage: a repeated name is kept, in order
    return aws


@dataclass(frozen=True)
class Resigned:
    """What to change in the request: its path (with query), the header fields to drop, those to set."""

    path: str
    drop: frozenset[str]                       # lower-case names
    set: tuple[tuple[str, str], ...]
    signature: str                             # the new seed signature (the first chunk's predecessor)
    timestamp: str


def resign(req: Request, sig: Signature, creds: Credentials, payload: str, now: float) -> Resigned:
    """Sign `req` again with `creds` (botocore's signers), over the headers the sandbox signed."""
    keep = [(k, v) for k, v in req.headers if k.lower() in sig.signed_headers and k.lower() not in AUTH_HEADERS
            and k.lower() != "date"]
    if not any(k.lower() == "host" for k, _ in keep):
        keep.append(("host", req.host))
    botocore = _botocore()
    credentials = botocore.ReadOnlyCredentials(creds.access_key, creds.secret_key, creds.token or None)
    if sig.presigned:
        query = "&".join(f"{k}={v}" for k, v in _query_pairs(req.raw_query) if unquote(k).lower() not in AUTH_QUERY)
        url = f"{req.scheme}://{req.host}{req.raw_path}" + (f"?{query}" if query else "")
        remaining = int(parse_timestamp(sig.timestamp) + sig.expires - now)
        aws = _aws_request(req.method, url, keep)
        botocore.query_signer[sig.s3](credentials, sig.service, sig.region, payload,
                              expires=max(1, min(remaining, MAX_PRESIGN_S))).add_auth(aws)
        _scheme, _, rest = aws.url.partition("://")
        path = "/" + rest.partition("/")[2]
        stamp = dict(_query_pairs(path.partition("?")[2])).get("X-Amz-Date", "")
        signature = path.rpartition("X-Amz-Signature=")[2]
        return Resigned(path=path, drop=frozenset({"x-amz-security-token"}), set=(), signature=signature,
                        timestamp=stamp)
    if "x-amz-content-sha256" in sig.signed_headers or sig.s3:
        keep.append(("X-Amz-Content-SHA256", payload))
    aws = _aws_request(req.method, f"{req.scheme}://{req.host}{req.path}", keep)
    botocore.head_signer[sig.s3](credentials, sig.service, sig.region, payload).add_auth(aws)
    out = [(name, aws.headers[name]) for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token",
                                                  "X-Amz-Content-SHA256") if name in aws.headers]
    auth = aws.headers["Authorization"]
    return Resigned(path=req.path, drop=AUTH_HEADERS, set=tuple(out), signature=auth.rpartition("Signature=")[2],
                    timestamp=aws.headers["X-Amz-Date"])
