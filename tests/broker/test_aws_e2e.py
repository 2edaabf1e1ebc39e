"""`kind = "aws"` end to end: moto's server behind TLS checks every SigV4 signature (INITIAL_NO_AUTH_ACTION_COUNT=3:
an IAM user, its policy and its access key are made unauthenticated, nothing after). The real `aws` CLI and boto3 run
in a session that holds only placeholder keys, through sandgate, which checks their signatures with the placeholder
secret and signs again with the real keys. The real key id and secret are looked for in every response, output, log
line and audit row, and never found."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.conftest import LOOPBACK_CONFIG
from tests.support.gateway import Sandgate
from tests.support.leaks import leaked
from tests.support.moto import REGION, Moto, aws_cli
from tests.support.upstream import Upstream, make_cert

pytestmark = pytest.mark.timeout(600)
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("aws")
    cert = make_cert(tmp / "certs", ["moto.test", "other.test", "presign.test"])
    moto = Moto(tmp, cert)
    try:
        iam = moto.client("iam", "AKIAANYTHING00000000", "anything")
        iam.create_user(UserName="sandgate")                                       # 1 (unauthenticated)
        iam.put_user_policy(UserName="sandgate", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))  # 2
        key = iam.create_access_key(UserName="sandgate")["AccessKey"]               # 3
        real = (key["AccessKeyId"], key["SecretAccessKey"])
        with Upstream(tls=cert) as other, Upstream(tls=cert) as echo:
            resolve = {**LOOPBACK_CONFIG["egress"]["resolve"], "presign.test": ["127.0.0.1"]}
            cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert, "resolve": resolve},
                   "secrets": {"aws": {"kind": "aws", "access_key_id": "env:SG_AWS_KEY",
                                       "secret_access_key": "env:SG_AWS_SECRET",
                                       "hosts": ["127.0.0.1", "presign.test"]}}}
            with Sandgate(tmp / "gw", cfg, env={"SG_AWS_KEY": real[0], "SG_AWS_SECRET": real[1]}) as sg:
                sg.echo = echo
                yield sg, moto, real, other, tmp
    finally:
        moto.stop()


def sandbox_env(sess: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= sess["env"] | {"AWS_CA_BUNDLE": sess["ca_file"], "AWS_DEFAULT_REGION": REGION,
                          "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent",
                          "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    return env


OUTPUTS: list[bytes] = []


def cli(sess: dict, moto: Moto, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The `aws` CLI, forked from a zygote that has imported it (aws_cli); the `s3 rm` and ec2 terminate tests run
    it exec'd, as a shell does."""
    proc = aws_cli(["--endpoint-url", moto.url, *args], sandbox_env(sess))
    OUTPUTS.extend([proc.stdout, proc.stderr])
    if check:
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def session(sg: Sandgate) -> dict:
    sess = sg.session(allow=["127.0.0.1", "other.test", "presign.test"], secrets=["aws"])
    env = sess["env"]
    assert env["AWS_ACCESS_KEY_ID"].startswith("AKIA") and len(env["AWS_ACCESS_KEY_ID"]) == 20
    assert len(env["AWS_SECRET_ACCESS_KEY"]) == 40 and "AWS_CA_BUNDLE" in env
    return sess


def test_moto_checks_signatures(aws):
    _sg, moto, real, _other, _tmp = aws
    import botocore.exceptions
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        moto.client("s3", real[0], "not-the-secret").list_buckets()
    assert bad.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    moto.client("s3", real[0], real[1]).list_buckets()


def test_cli_s3_through_sandgate(aws):
    sg, moto, real, _other, tmp = aws
    sess = session(sg)
    cli(sess, moto, "s3", "mb", "s3://bkt")
    big = tmp / "big.bin"
    big.write_bytes(os.urandom(20 * 1024 * 1024))
    cli(sess, moto, "s3", "cp", str(big), "s3://bkt/dir/big.bin")
    small = tmp / "small.txt"
    small.write_text("hello through sandgate")
    cli(sess, moto, "s3", "cp", str(small), "s3://bkt/small key+x.txt")
    listing = cli(sess, moto, "s3", "ls", "s3://bkt", "--recursive").stdout.decode()
    assert "dir/big.bin" in listing and "small key+x.txt" in listing
    direct = moto.client("s3", *real)
    assert direct.head_object(Bucket="bkt", Key="dir/big.bin")["ContentLength"] == 20 * 1024 * 1024
    assert direct.get_object(Bucket="bkt", Key="dir/big.bin")["Body"].read() == big.read_bytes()



def test_cli_presign_through_sandgate(aws):
    """moto checks no presigned URL (it reads only an Authorization header), so the URL sandgate signs again goes to
    a recording server; botocore's own presigner, at the same time stamp with the real keys, gives its signature."""
    sg, moto, real, _other, _tmp = aws
    sess = session(sg)
    echo = sg.echo
    endpoint = f"https://presign.test:{echo.port}"
    env = sandbox_env(sess)
    argv = ["--endpoint-url", endpoint, "s3", "presign", "s3://echo/a key+x.txt", "--expires-in", "300"]
    v2 = aws_cli(argv, env, timeout=120).stdout.decode().strip()
    assert "AWSAccessKeyId=" in v2                 # the CLI's default here: Signature Version 2, refused
    resp = requests.get(v2, proxies=sess["proxies"], verify=sess["ca_file"], timeout=60)
    assert resp.status_code == 403 and resp.json()["code"] == "secret.bad_signature"
    config = _tmp / "aws-config"
    config.write_text("[default]\ns3 =\n    signature_version = s3v4\n")
    proc = aws_cli(argv, env | {"AWS_CONFIG_FILE": str(config)}, timeout=120)
    url = proc.stdout.decode().strip()
    assert proc.returncode == 0 and sess["env"]["AWS_ACCESS_KEY_ID"] in url and real[0] not in url
    resp = requests.get(url, proxies=sess["proxies"], verify=sess["ca_file"], timeout=60)
    OUTPUTS.append(resp.content + repr(resp.headers).encode())
    assert resp.status_code == 200, resp.text
    assert sess["env"]["AWS_ACCESS_KEY_ID"] in resp.text          # the echoed URL: the real key id scrubbed back
    seen = echo.recorder.requests[-1]
    assert real[0] in seen.path and sess["env"]["AWS_ACCESS_KEY_ID"] not in seen.path
    from urllib.parse import parse_qsl
    query = dict(parse_qsl(seen.path.partition("?")[2]))
    from unittest import mock

    import botocore.auth
    from botocore.auth import S3SigV4QueryAuth
    import datetime
    stamp = datetime.datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=stamp):
        req = AWSRequest(method="GET", url=endpoint + seen.path.partition("?")[0])
        S3SigV4QueryAuth(Credentials(*real), "s3", REGION, expires=int(query["X-Amz-Expires"])).add_auth(req)
    assert req.url.rpartition("X-Amz-Signature=")[2] == query["X-Amz-Signature"]


def test_cli_uses_are_audited(aws):
    sg, moto, _real, _other, _tmp = aws
    sess = session(sg)
    cli(sess, moto, "s3", "ls")
    uses = [e for e in sg.events(sess["id"]) if e["kind"] == "secret.use"]
    assert uses and all(e["detail"]["where"] == ["sigv4"] for e in uses)


def test_boto3_through_sandgate(aws):
    sg, moto, real, _other, _tmp = aws
    sess = session(sg)
    script = f"""
import boto3
s3 = boto3.client("s3", endpoint_url={moto.url!r})
s3.create_bucket(Bucket="boto")
s3.put_object(Bucket="boto", Key="k/one.txt", Body=b"one")
print(s3.get_object(Bucket="boto", Key="k/one.txt")["Body"].read().decode())
print(sorted(o["Key"] for o in s3.list_objects_v2(Bucket="boto")["Contents"]))
ec2 = boto3.client("ec2", endpoint_url={moto.url!r})
print(len(ec2.describe_instances()["Reservations"]))
print(boto3.client("sts", endpoint_url={moto.url!r}).get_caller_identity()["Arn"]) if False else None
"""
    proc = subprocess.run([sys.executable, "-c", script], env=sandbox_env(sess), capture_output=True, timeout=300)
    OUTPUTS.extend([proc.stdout, proc.stderr])
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout.decode().split("\n")[:2] == ["one", "['k/one.txt']"]


def signed_request(url: str, key: str, secret: str, service: str = "s3") -> AWSRequest:
    req = AWSRequest(method="GET", url=url)
    SigV4Auth(Credentials(key, secret), service, REGION).add_auth(req)
    return req


def test_bad_signature_and_unbound_host(aws):
    sg, moto, real, other, _tmp = aws
    sess = session(sg)
    key = sess["env"]["AWS_ACCESS_KEY_ID"]
    for secret in ("a-wrong-secret", sess["env"]["AWS_SECRET_ACCESS_KEY"] + "x"):
        req = signed_request(moto.url + "/", key, secret)
        resp = requests.get(moto.url + "/", headers=dict(req.headers), proxies=sess["proxies"],
                            verify=sess["ca_file"], timeout=30)
        OUTPUTS.append(resp.content)
        assert resp.status_code == 403 and resp.json()["code"] == "secret.bad_signature"
    url = f"https://other.test:{other.port}/"
    req = signed_request(url, key, sess["env"]["AWS_SECRET_ACCESS_KEY"])
    resp = requests.get(url, headers=dict(req.headers), proxies=sess["proxies"], verify=sess["ca_file"], timeout=30)
    OUTPUTS.append(resp.content)
    assert resp.status_code == 403 and resp.json()["code"] == "secret.exfiltration"
    assert other.recorder.requests == []
    rows = [e for e in sg.events(sess["id"]) if e["kind"] == "exfiltration"]
    assert rows and rows[-1]["detail"]["secrets"] == ["aws"]
    # the correct placeholder signature passes and is signed again
    req = signed_request(moto.url + "/", key, sess["env"]["AWS_SECRET_ACCESS_KEY"])
    resp = requests.get(moto.url + "/", headers=dict(req.headers), proxies=sess["proxies"], verify=sess["ca_file"],
                        timeout=30)
    OUTPUTS.append(resp.content + repr(resp.headers).encode())
    assert resp.status_code == 200, resp.text


def pending(sg: Sandgate, sid: str) -> list[dict]:
    resp = sg.call("GET", f"/v1/approvals?status=pending&session={sid}", sg.approver)
    assert resp.status_code == 200, resp.text
    return resp.json()


def approve_until(sg: Sandgate, sid: str, proc: subprocess.Popen, seen: list[dict], timeout: float = 240) -> None:
    """Approve every pending approval of the session as it appears, until `proc` ends."""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        for item in pending(sg, sid):
            seen.append(item)
            resp = sg.call("POST", f"/v1/approvals/{item['id']}/approve", sg.approver, json={})
            assert resp.status_code in (200, 409), resp.text
        time.sleep(0.3)


def test_s3_rm_recursive_asks_and_completes_once_approved(aws):
    sg, moto, real, _other, tmp = aws
    sg.approver = getattr(sg, "approver", None) or sg.token("approver", "alice")
    sess = session(sg)
    direct = moto.client("s3", *real)
    direct.create_bucket(Bucket="rmbkt")
    for i in range(3):
        direct.put_object(Bucket="rmbkt", Key=f"d/{i}.txt", Body=b"x")
    proc = subprocess.Popen([shutil.which("aws", path=str(BIN)) or "aws", "--endpoint-url", moto.url, "s3", "rm",
                             "s3://rmbkt/d", "--recursive"], env=sandbox_env(sess), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    seen: list[dict] = []
    deadline = time.time() + 60
    while not pending(sg, sess["id"]) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert pending(sg, sess["id"]), "the delete was not held for approval"
    assert direct.list_objects_v2(Bucket="rmbkt").get("KeyCount") == 3      # held: nothing deleted yet
    approve_until(sg, sess["id"], proc, seen)
    out, err = proc.communicate(timeout=60)
    OUTPUTS.extend([out, err])
    assert proc.returncode == 0, err.decode(errors="replace")
    assert direct.list_objects_v2(Bucket="rmbkt").get("KeyCount", 0) == 0
    ops = {(i["action"]["aws"]["service"], i["action"]["aws"]["operation"]) for i in seen}
    assert ops <= {("s3", "DeleteObject"), ("s3", "DeleteObjects")} and ops
    assert any("rmbkt/d/" in i["summary"] for i in seen)
    assert real[0] not in json.dumps(seen) and real[1] not in json.dumps(seen)


def test_ec2_terminate_asks_and_the_retry_finds_the_approval(aws):
    """The CLI gives up waiting (read timeout 5 s here, 60 s by default) and retries with a new signature and date:
    the approval stays pending across it, and the retry goes through once it is approved."""
    sg, moto, real, _other, _tmp = aws
    sg.approver = getattr(sg, "approver", None) or sg.token("approver", "alice")
    sess = session(sg)
    ec2 = moto.client("ec2", *real)
    # an Amazon Linux 2 image (all of moto's 1,301 images: about 1 s of its CPU serializing them)
    image = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*-x86_64-gp2"]}]
                                )["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    described = cli(sess, moto, "ec2", "describe-instances", "--instance-ids", instance).stdout.decode()
    assert instance in described                                            # reads are not asked
    proc = subprocess.Popen([shutil.which("aws", path=str(BIN)) or "aws", "--endpoint-url", moto.url,
                             "--cli-read-timeout", "5", "ec2", "terminate-instances", "--instance-ids", instance],
                            env=sandbox_env(sess), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while not pending(sg, sess["id"]) and time.time() < deadline:
        time.sleep(0.3)
    items = pending(sg, sess["id"])
    assert len(items) == 1 and items[0]["action"]["aws"]["operation"] == "TerminateInstances"
    assert instance in items[0]["summary"]
    # the CLI's first attempt timed out and it retried: a new connection (CONNECT) after the approval was filed
    def retried() -> bool:
        events = sg.events(sess["id"])
        filed = min(e["seq"] for e in events if e["kind"] == "approval.filed")
        return any(e["kind"] == "egress" and e["method"] == "CONNECT" and e["seq"] > filed for e in events)
    deadline = time.time() + 90
    while not retried():
        assert proc.poll() is None and time.time() < deadline, "the CLI never retried"
        time.sleep(0.3)
    assert [i["id"] for i in pending(sg, sess["id"])] == [items[0]["id"]]   # the retry found the same one
    state = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "running"
    resp = sg.call("POST", f"/v1/approvals/{items[0]['id']}/approve", sg.approver, json={})
    assert resp.status_code == 200, resp.text
    out, err = proc.communicate(timeout=120)
    OUTPUTS.extend([out, err])
    assert proc.returncode == 0, err.decode(errors="replace")
    state = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")


def test_credential_operations_are_denied(aws):
    sg, moto, _real, _other, _tmp = aws
    sess = session(sg)
    proc = cli(sess, moto, "iam", "create-access-key", "--user-name", "sandgate", check=False)
    assert proc.returncode != 0 and b"aws.credential_operation" in proc.stderr + proc.stdout or b"403" in proc.stderr
    proc = cli(sess, moto, "sts", "assume-role", "--role-arn", "arn:aws:iam::123456789012:role/x",
               "--role-session-name", "sess", check=False)
    assert proc.returncode != 0
    denied = [e for e in sg.events(sess["id"]) if "aws.credential_operation" in (e.get("codes") or [])]
    assert len(denied) >= 2


def _chunked(key: bytes, seed: str, stamp: str, scope: str, data: bytes, size: int) -> bytes:
    import hashlib
    import hmac
    empty = hashlib.sha256(b"").hexdigest()
    out, prev = b"", seed
    for chunk in [data[i:i + size] for i in range(0, len(data), size)] + [b""]:
        sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", stamp, scope, prev, empty, hashlib.sha256(chunk).hexdigest()])
        prev = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        out += b"%x;chunk-signature=%s\r\n%s\r\n" % (len(chunk), prev.encode(), chunk)
    return out


@pytest.mark.parametrize("size", [4096, 3 * 1024 * 1024])
def test_signed_chunks_are_signed_again(aws, size):
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD (signed aws-chunked, as the Java and Go SDKs send): held whole when small,
    streamed chunk by chunk when larger than inspect_max_bytes; what reaches the server is a chain the real key
    checks."""
    from broker.sigv4 import signing_key
    from broker.sigv4_chunks import ChunkResigner
    from botocore.auth import S3SigV4Auth
    sg, _moto, real, _other, _tmp = aws
    sess = session(sg)
    echo = sg.echo
    data = os.urandom(size)
    url = f"https://presign.test:{echo.port}/echo/chunked"

    class Streaming(S3SigV4Auth):
        def payload(self, request):
            return "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"

    chunk = 64 * 1024
    body_len = len(_chunked(b"k", "0" * 64, "20260101T000000Z", "s", data, chunk))
    req = AWSRequest(method="PUT", url=url, headers={"Content-Encoding": "aws-chunked", "Content-Length": str(body_len),
                                                     "X-Amz-Decoded-Content-Length": str(size)})
    Streaming(Credentials(sess["env"]["AWS_ACCESS_KEY_ID"], sess["env"]["AWS_SECRET_ACCESS_KEY"]), "s3",
              REGION).add_auth(req)
    stamp = req.headers["X-Amz-Date"]
    scope = f"{stamp[:8]}/{REGION}/s3/aws4_request"
    seed = req.headers["Authorization"].rpartition("Signature=")[2]
    body = _chunked(signing_key(sess["env"]["AWS_SECRET_ACCESS_KEY"], stamp[:8], REGION, "s3"), seed, stamp, scope,
                    data, chunk)
    echo.recorder.requests.clear()
    resp = requests.put(url, data=body, headers=dict(req.headers), proxies=sess["proxies"], verify=sess["ca_file"],
                        timeout=120)
    OUTPUTS.append(resp.content[:65536] + repr(resp.headers).encode())
    assert resp.status_code == 200, resp.text[:500]
    seen = echo.recorder.requests[-1]
    assert len(seen.body) == len(body) and seen.body != body
    auth = seen.headers["authorization"]
    assert real[0] in auth
    stamp_out = seen.headers["x-amz-date"]
    key_out = signing_key(real[1], stamp_out[:8], REGION, "s3")
    checker = ChunkResigner(timestamp_in=stamp_out, timestamp_out=stamp_out, scope_in=f"{stamp_out[:8]}/{REGION}/s3/"
                            "aws4_request", scope_out=f"{stamp_out[:8]}/{REGION}/s3/aws4_request", key_in=key_out,
                            key_out=key_out, seed_in=auth.rpartition("Signature=")[2],
                            seed_out=auth.rpartition("Signature=")[2], max_chunk=1 << 20)
    assert checker.feed(seen.body) == seen.body
    checker.finish()
    # a chunk signed with the wrong key is refused: held, 403; streamed, the upload is cut
    bad = _chunked(signing_key("wrong", stamp[:8], REGION, "s3"), seed, stamp, scope, data, chunk)
    try:
        # streamed, sandgate stops at the bad chunk and closes the connection: the client's send is reset
        resp = requests.put(url, data=bad, headers=dict(req.headers), proxies=sess["proxies"],
                            verify=sess["ca_file"], timeout=15)
        assert resp.status_code in (403, 502), resp.status_code
    except requests.RequestException:
        pass
    assert all(r.body != bad for r in echo.recorder.requests)


def test_an_operation_named_twice_is_refused(aws):
    """Action=TerminateInstances in the query, Action=DescribeInstances in the body: whichever a server reads, the
    policy cannot know which it decided, so sandgate refuses."""
    sg, moto, _real, _other, _tmp = aws
    sess = session(sg)
    url = moto.url + "/?Action=TerminateInstances&InstanceId.1=i-1"
    body = b"Action=DescribeInstances&Version=2016-11-15"
    req = AWSRequest(method="POST", url=url, data=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    SigV4Auth(Credentials(sess["env"]["AWS_ACCESS_KEY_ID"], sess["env"]["AWS_SECRET_ACCESS_KEY"]), "ec2",
              REGION).add_auth(req)
    resp = requests.post(url, data=body, headers=dict(req.headers), proxies=sess["proxies"], verify=sess["ca_file"],
                         timeout=30)
    OUTPUTS.append(resp.content)
    assert resp.status_code == 403 and resp.json()["code"] == "aws.ambiguous_operation"


def test_zz_real_secret_never_seen(aws):
    sg, moto, real, other, _tmp = aws
    texts = list(OUTPUTS) + [sg.log().encode(), json.dumps(sg.call("GET", "/v1/events?limit=10000").json()).encode()]
    for seen in other.recorder.requests:
        texts.append(repr(seen.headers).encode() + seen.body)
    assert len(texts) > 10
    for text in texts:
        assert not leaked(text, real[1]), "the real secret access key reached the sandbox side"
        assert not leaked(text, real[0]), "the real key id reached the sandbox side"
