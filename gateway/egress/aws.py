"""AWS requests of a session holding an `aws` secret: the sandbox's SigV4 signature checked, the request signed again.

The mitmproxy side of `broker.sigv4`. The sandbox signs with its placeholder keys; on a bound host (the screen has
refused any other) the signature is checked with the placeholder secret — a wrong, stale or malformed one is 403
`secret.bad_signature` — and the request is signed again with the real credentials. A signed aws-chunked body is
checked and signed again chunk by chunk as it streams; an unsigned or trailer-checksummed one passes as it is (its
hash was the signed value). A request signed with any other key id is left alone: it carries no placeholder.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Callable
from urllib.parse import parse_qsl

from mitmproxy import http

from broker.aws_ops import Call, ServiceIndex, ambiguous, needs_body, operation_of, resource_of
from broker.broker import AWS_SECRET_PART, Broker
from broker.sigv4 import (SIGNED_CHUNKS, STREAMING_SIGNED_TRAILER, Credentials, Request, Signature, SigV4Error,
                          parse_signature, payload_hash, resign, signing_key, verify)
from broker.sigv4_chunks import ChunkResigner
from gateway.egress.flows import StreamFilter
from gateway.egress.proxy import close_client

log = logging.getLogger("sandgate.egress")


@dataclass(frozen=True)
class AwsFacts:
    """Service and region of a request signed with the session's placeholder key id (its credential scope)."""

    service: str
    region: str


@dataclass(frozen=True)
class AwsCall:
    """What the policy is told about an AWS call; `needs_body`: its operation is named in the body, not read yet."""

    service: str
    region: str
    operation: str
    resource: str
    needs_body: bool = False
    ambiguous: bool = False                             # names its operation twice, differently: refused

    def facts(self) -> dict:
        return {"service": self.service, "region": self.region, "operation": self.operation,
                "resource": self.resource}


def aws_facts(flow: http.HTTPFlow, key_id: str) -> AwsFacts | None:
    """The credential scope of the request's signature when it is signed with `key_id`; None otherwise (a
    malformed signature included: the credential addon refuses it)."""
    if not key_id:
        return None
    try:
        sig = parse_signature(sigv4_request(flow))
    except SigV4Error:
        return None
    if sig is None or sig.access_key != key_id:
        return None
    return AwsFacts(sig.service, sig.region)


def describe_call(index: ServiceIndex | None, facts: AwsFacts, flow: http.HTTPFlow, body: bytes | None) -> AwsCall:
    """The operation and resource of the call (from botocore's model `index`)."""
    req = flow.request
    headers = {k.lower(): v for k, v in req.headers.items(multi=True)}
    call = Call(service=facts.service, method=req.method, host=headers.get("host") or req.host,
                path=req.path.partition("?")[0] or "/",
                query=tuple(parse_qsl(req.path.partition("?")[2], keep_blank_values=True)), headers=headers,
                body=body)
    if body is None and needs_body(index, req.method, headers):
        return AwsCall(facts.service, facts.region, "", "", needs_body=True)
    names = [k.lower() for k, _v in req.headers.items(multi=True)]
    twice = [n for n in set(names) if names.count(n) > 1]
    return AwsCall(facts.service, facts.region, operation_of(index, call), resource_of(index, call),
                   ambiguous=ambiguous(call, twice))


@dataclass(frozen=True)
class Checked:
    """A request whose signature by the session's placeholder checked out."""

    sig: Signature
    payload: str


def sigv4_request(flow: http.HTTPFlow) -> Request:
    req = flow.request
    host = req.headers.get("host") or req.host_header or req.host
    return Request(method=req.method, scheme=req.scheme, host=host, path=req.path,
                   headers=tuple(req.headers.items(multi=True)))


def check(flow: http.HTTPFlow, key_id: str, secret: str, body: bytes | None, now: float) -> Checked | None:
    """The checked signature when the request is signed with the session's placeholder key id; None when it carries
    no SigV4 signature of that key; SigV4Error when the signature is malformed, stale or wrong."""
    req = sigv4_request(flow)
    try:
        sig = parse_signature(req)
    except SigV4Error:
        if key_id not in req.path and not any(key_id in v for k, v in req.headers if k.lower() == "authorization"):
            return None                             # some other key's signature: not ours to judge
        raise
    if sig is None or sig.access_key != key_id:
        return None
    payload = payload_hash(req, sig, body)
    verify(req, sig, secret, payload, now)
    return Checked(sig, payload)


class AwsSigning:
    """Check and sign again; the broker gives the real credentials (from its cache when fresh, else awaited)."""

    def __init__(self, broker: Broker, max_chunk: int) -> None:
        self._broker = broker
        self._max_chunk = max_chunk

    async def credentials(self, name: str) -> Credentials:
        creds = self._broker.fresh_aws_credentials(name)
        if creds is None:
            creds = await asyncio.wait_for(self._broker.aws_credentials(name), self._broker.lookup_timeout_s + 1)
        return creds

    def check(self, flow: http.HTTPFlow, name: str, placeholders: dict[str, str], body: bytes | None,
              now: float) -> Checked | None:
        """Before anything in the request changes: the checked signature of the session's placeholder key (None when
        the request carries none). SigV4Error for a bad one."""
        key_id, secret = placeholders.get(name, ""), placeholders.get(name + AWS_SECRET_PART, "")
        if not key_id or not secret:
            return None
        return check(flow, key_id, secret, body, now)

    def apply(self, flow: http.HTTPFlow, checked: Checked, secret: str, creds: Credentials, now: float) -> None:
        """After every other change to the head: sign the request again with `creds` (`secret` is the placeholder
        secret, which checks the chunks of a signed aws-chunked body)."""
        out = resign(sigv4_request(flow), checked.sig, creds, checked.payload, now)
        if out.path != flow.request.path:
            flow.request.path = out.path
        for header in out.drop:
            flow.request.headers.pop(header, None)
        for header, value in out.set:
            flow.request.headers[header] = value
        if checked.payload in SIGNED_CHUNKS:
            sig = checked.sig
            resigner = ChunkResigner(
                timestamp_in=sig.timestamp, timestamp_out=out.timestamp, scope_in=sig.scope,
                scope_out=f"{out.timestamp[:8]}/{sig.region}/{sig.service}/aws4_request",
                key_in=signing_key(secret, sig.timestamp[:8], sig.region, sig.service),
                key_out=signing_key(creds.secret_key, out.timestamp[:8], sig.region, sig.service),
                seed_in=sig.signature, seed_out=out.signature, max_chunk=self._max_chunk,
                trailer=checked.payload == STREAMING_SIGNED_TRAILER)
            if callable(flow.request.stream):
                flow.request.stream = _chunk_filter(flow.request.stream, resigner,
                                                    functools.partial(close_client, flow.client_conn))
            else:
                body_out = resigner.feed(flow.request.raw_content or b"")
                resigner.finish()
                flow.request.raw_content = body_out


def _chunk_filter(first: StreamFilter, resigner: ChunkResigner, close: Callable[[], None]) -> StreamFilter:
    """A stream filter: what `first` passes, its aws-chunked chunks signed again (the end checks the body was
    whole). At a bad chunk nothing more is passed and `close` closes the client connection: the upload never
    completes upstream, and the client is cut off at once. (Raising here instead left mitmproxy's connection
    neither reading nor closed: the client's send stalled until its own timeout.)"""
    failed = False

    def run(chunk: bytes) -> list[bytes]:
        nonlocal failed
        if not failed:
            out = first(chunk)
            pieces = [out] if isinstance(out, (bytes, bytearray)) else list(out)
            try:
                result = [resigner.feed(bytes(p)) for p in pieces if p]
                if not chunk:
                    resigner.finish()
                return [r for r in result if r]     # never an empty piece mid-stream (a chunked terminator)
            except SigV4Error as exc:
                failed = True
                log.warning("an aws-chunked upload was cut: %s", exc)
                close()
        if not chunk:       # the body's end never reaches the upstream: mitmproxy drops the connection
            raise SigV4Error("the aws-chunked body was cut")
        return []
    return run
