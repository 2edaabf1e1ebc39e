"""The SigV4 core against botocore itself: what botocore signs with the placeholder secret verifies; anything changed
does not; what sandgate signs again verifies with the real secret (checked by the same pure verifier, and by
botocore recomputing the signature)."""
from __future__ import annotations

import hashlib
import time

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.sigv4 import (STREAMING_UNSIGNED_TRAILER, UNSIGNED_PAYLOAD, Credentials, Request, SigV4Error,
                          parse_signature, payload_hash, resign, verify)

PH_KEY, PH_SECRET = "AKIAPLACEHOLDER00001", "placeholder/secret+value0000000000000000"
REAL = Credentials("AKIAREALREALREAL0001", "real/secret+REAL000000000000000000000000")


def to_request(aws: AWSRequest) -> Request:
    scheme, _, rest = aws.url.partition("://")
    netloc, slash, path = rest.partition("/")
    headers = tuple((k, v if isinstance(v, str) else v.decode()) for k, v in aws.headers.items())
    if not any(k.lower() == "host" for k, _ in headers):
        headers = (("Host", netloc),) + headers
    return Request(method=aws.method, scheme=scheme, host=netloc, path="/" + path, headers=headers)


def signed(signer, url: str, method: str = "GET", headers=None, body: bytes = b"", context=None) -> AWSRequest:
    aws = AWSRequest(method=method, url=url, headers=headers or {}, data=body)
    aws.context.update(context or {})
    aws.prepare()  # type: ignore[attr-defined]
    signer.add_auth(aws)
    return aws


def ph(token: str | None = None) -> BotoCredentials:
    return BotoCredentials(PH_KEY, PH_SECRET, token)


def check(aws: AWSRequest, secret: str = PH_SECRET, body: bytes | None = b"", now: float | None = None) -> Request:
    req = to_request(aws)
    sig = parse_signature(req)
    assert sig is not None
    verify(req, sig, secret, payload_hash(req, sig, body), now or time.time())
    return req


S3_URLS = ["https://s3.us-east-1.amazonaws.com/bucket/key.txt", "https://bucket.s3.amazonaws.com/a%20b/c%2Bd",
           "https://127.0.0.1:4566/bkt/dir/file?uploads", "https://bucket.s3.eu-west-1.amazonaws.com/k?partNumber=1&uploadId=abc",
           "https://s3.amazonaws.com/b/key//double/./dot?list-type=2&prefix=a%2Fb&delimiter=%2F"]


@pytest.mark.parametrize("url", S3_URLS)
@pytest.mark.parametrize("payload", ["body", "unsigned", "trailer"])
def test_s3_head_signature_verifies_and_resigns(url: str, payload: str) -> None:
    body = b"hello world" if payload == "body" else b""
    headers = {"Content-Type": "text/plain", "X-Amz-Meta-Note": "  two   spaces "}
    context = {}
    if payload == "unsigned":
        context = {"client_config": type("C", (), {"s3": {"payload_signing_enabled": False}})()}
    if payload == "trailer":
        context = {"checksum": {"request_algorithm": {"in": "trailer", "name": "x-amz-checksum-crc32"}}}
    aws = signed(S3SigV4Auth(ph(), "s3", "us-east-1"), url, "PUT", headers, body, context)
    req = check(aws, body=body)
    sig = parse_signature(req)
    expected = {"body": hashlib.sha256(body).hexdigest(), "unsigned": UNSIGNED_PAYLOAD,
                "trailer": STREAMING_UNSIGNED_TRAILER}[payload]
    assert payload_hash(req, sig, None) == expected
    out = resign(req, sig, REAL, expected, time.time())
    new = apply(req, out)
    new_sig = parse_signature(new)
    assert new_sig.access_key == REAL.access_key and new_sig.signed_headers == sig.signed_headers
    verify(new, new_sig, REAL.secret_key, payload_hash(new, new_sig, body), time.time())
    with pytest.raises(SigV4Error):
        verify(new, new_sig, PH_SECRET, payload_hash(new, new_sig, body), time.time())
    assert PH_KEY not in repr(out) and PH_SECRET not in repr(out)


def apply(req: Request, out) -> Request:
    headers = tuple((k, v) for k, v in req.headers if k.lower() not in out.drop) + out.set
    return Request(method=req.method, scheme=req.scheme, host=req.host, path=out.path, headers=headers)


@pytest.mark.parametrize("service,url,body", [
    ("ec2", "https://ec2.us-east-1.amazonaws.com/", b"Action=TerminateInstances&InstanceId.1=i-123&Version=2016-11-15"),
    ("iam", "https://iam.amazonaws.com/", b"Action=ListUsers&Version=2010-05-08"),
    ("dynamodb", "https://dynamodb.us-east-1.amazonaws.com/", b'{"TableName": "t"}'),
    ("execute-api", "https://x.execute-api.us-east-1.amazonaws.com/a/../b/%7Euser/c d", b""),
    ("sqs", "https://127.0.0.1:9000/?Action=ListQueues&QueueNamePrefix=a%20b", b""),
])
def test_other_services_sign_the_body_hash(service: str, url: str, body: bytes) -> None:
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    aws = signed(SigV4Auth(ph(), service, "us-east-1"), url, "POST", headers, body)
    req = check(aws, body=body)
    sig = parse_signature(req)
    with pytest.raises(SigV4Error) as bad:
        payload_hash(req, sig, None)                # the body must be at hand
    assert bad.value.code == "secret.body_too_large"
    with pytest.raises(SigV4Error):
        verify(req, sig, PH_SECRET, payload_hash(req, sig, body + b"x"), time.time())
    out = resign(req, sig, REAL, payload_hash(req, sig, body), time.time())
    new = apply(req, out)
    verify(new, parse_signature(new), REAL.secret_key, payload_hash(new, parse_signature(new), body), time.time())


def test_session_token_goes_in_when_the_real_credentials_have_one() -> None:
    aws = signed(SigV4Auth(ph(), "sts", "us-east-1"), "https://sts.amazonaws.com/", "POST", {}, b"Action=GetCallerIdentity")
    req = check(aws, body=b"Action=GetCallerIdentity")
    sig = parse_signature(req)
    creds = Credentials(REAL.access_key, REAL.secret_key, "FwoGZXIvYXdzEXAMPLETOKEN")
    new = apply(req, resign(req, sig, creds, payload_hash(req, sig, b"Action=GetCallerIdentity"), time.time()))
    assert new.header("x-amz-security-token") == "FwoGZXIvYXdzEXAMPLETOKEN"
    assert "x-amz-security-token" in parse_signature(new).signed_headers
    # a token the sandbox sent itself never survives (the real credentials have none)
    aws = signed(SigV4Auth(ph("sandbox-token"), "sts", "us-east-1"), "https://sts.amazonaws.com/", "POST", {}, b"")
    req = check(aws, body=b"")
    new = apply(req, resign(req, parse_signature(req), REAL, payload_hash(req, parse_signature(req), b""), time.time()))
    assert new.header("x-amz-security-token") is None


@pytest.mark.parametrize("s3", [True, False])
def test_presigned_urls(s3: bool) -> None:
    cls = S3SigV4QueryAuth if s3 else SigV4QueryAuth
    url = "https://bucket.s3.amazonaws.com/some/key%20x.txt?response-content-type=text%2Fplain" if s3 else \
        "https://sqs.us-east-1.amazonaws.com/?Action=ListQueues"
    aws = signed(cls(ph(), "s3" if s3 else "sqs", "us-east-1", expires=300), url)
    req = check(aws, body=None if s3 else b"")
    sig = parse_signature(req)
    assert sig.presigned and sig.expires == 300
    with pytest.raises(SigV4Error, match="expired"):
        verify(req, sig, PH_SECRET, payload_hash(req, sig, b""), time.time() + 301)
    out = resign(req, sig, Credentials(REAL.access_key, REAL.secret_key, "TOKEN/x+y"), payload_hash(req, sig, b""),
                 time.time())
    new = apply(req, out)
    new_sig = parse_signature(new)
    assert new_sig.presigned and 1 <= new_sig.expires <= 300 and "X-Amz-Security-Token=TOKEN%2Fx%2By" in new.path
    assert PH_KEY not in new.path
    verify(new, new_sig, REAL.secret_key, payload_hash(new, new_sig, b""), time.time())


def test_tampering_is_refused() -> None:
    aws = signed(S3SigV4Auth(ph(), "s3", "us-east-1"), S3_URLS[0], "PUT", {"X-Amz-Meta-A": "1"}, b"x")
    req = check(aws, body=b"x")
    sig = parse_signature(req)
    now = time.time()
    variants = [
        Request(req.method, req.scheme, req.host, req.path + "2", req.headers),
        Request("DELETE", req.scheme, req.host, req.path, req.headers),
        Request(req.method, req.scheme, req.host, req.path,
                tuple((k, "2" if k == "X-Amz-Meta-A" else v) for k, v in req.headers)),
        Request(req.method, req.scheme, "evil.example", req.path,
                tuple((k, "evil.example" if k.lower() == "host" else v) for k, v in req.headers)),
    ]
    for variant in variants:
        with pytest.raises(SigV4Error):
            verify(variant, parse_signature(variant), PH_SECRET, payload_hash(variant, sig, b"x"), now)
    with pytest.raises(SigV4Error):
        verify(req, sig, "another secret", payload_hash(req, sig, b"x"), now)
    with pytest.raises(SigV4Error, match="expired"):
        verify(req, sig, PH_SECRET, payload_hash(req, sig, b"x"), now + 16 * 60)
    with pytest.raises(SigV4Error, match="future"):
        verify(req, sig, PH_SECRET, payload_hash(req, sig, b"x"), now - 16 * 60)


@pytest.mark.parametrize("auth", [
    "AWS4-HMAC-SHA256 Credential=AKIA/x, SignedHeaders=host, Signature=00",
    "AWS4-HMAC-SHA256 Credential=AKIAPLACEHOLDER00001/20260101/us-east-1/s3/aws4_request, SignedHeaders=x-a;host, "
    "Signature=" + "0" * 64,
    "AWS4-HMAC-SHA256 Credential=AKIAPLACEHOLDER00001/20260101/us-east-1/s3/aws4_request, SignedHeaders=host",
    "AWS AKIAPLACEHOLDER00001:abc",
    "AWS4-ECDSA-P256-SHA256 Credential=x",
])
def test_malformed_signatures_raise(auth: str) -> None:
    req = Request("GET", "https", "h", "/", (("Host", "h"), ("Authorization", auth), ("X-Amz-Date", "20260101T000000Z")))
    with pytest.raises(SigV4Error):
        parse_signature(req)


def test_no_signature_is_none() -> None:
    assert parse_signature(Request("GET", "https", "h", "/?a=b", (("Host", "h"), ("Authorization", "Bearer x")))) \
        is None


_segment = st.text(alphabet="abcXYZ019-_.~ +%/!*'()&=:@", min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(s3=st.booleans(), segments=st.lists(_segment, min_size=1, max_size=4),
       params=st.lists(st.tuples(_segment, _segment), max_size=4), meta=_segment)
def test_whatever_botocore_signs_verifies(s3: bool, segments: list[str], params: list[tuple[str, str]],
                                          meta: str) -> None:
    """Any path, query and header value botocore's serializer could produce: verified, and signed again."""
    from botocore.utils import percent_encode, percent_encode_sequence
    path = "/" + "/".join(percent_encode(s, safe="/~") for s in segments)
    query = percent_encode_sequence(params) if params else ""
    url = f"https://{'s3' if s3 else 'svc'}.us-west-2.amazonaws.com{path}" + (f"?{query}" if query else "")
    signer = (S3SigV4Auth if s3 else SigV4Auth)(ph(), "s3" if s3 else "svc", "us-west-2")
    aws = signed(signer, url, "GET", {"X-Amz-Meta-X": meta.strip() or "x"})
    req = check(aws, body=b"")
    sig = parse_signature(req)
    new = apply(req, resign(req, sig, REAL, payload_hash(req, sig, b""), time.time()))
    verify(new, parse_signature(new), REAL.secret_key, payload_hash(new, parse_signature(new), b""), time.time())
