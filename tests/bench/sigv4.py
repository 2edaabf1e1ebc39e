"""AWS re-signing benchmark: signed S3 GETs through sandgate against moto direct, in one run.

Run from the repository root (everything listens on 127.0.0.1):

    .venv/bin/python tests/bench/sigv4.py             # 2,000 in-process rounds, 300 GETs each way
    .venv/bin/python tests/bench/sigv4.py --quick     # 500 rounds, 100 GETs

Figures:
- check + sign again, CPU per request (ms): in this process, `broker.sigv4` checking botocore's signature of an S3
  GetObject with the placeholder secret and signing it again with the real keys (botocore's S3SigV4Auth), CPU time
  (time.process_time) over the rounds; botocore's `add_auth` alone on the same request is the reference line.
  Goal: under 0.4 ms.
- signed S3 GET (requests/s, p50 ms): boto3 `get_object` of a 1 KiB object, one client, sequential, against moto's
  server over TLS: through `sandgate serve` (a session holding only placeholder keys) and direct with the real keys.
- sandgate CPU per GET (ms): CPU time of the sandgate process during the proxied run over the GETs made.

Nothing is asserted: it prints a table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials as BotoCredentials  # noqa: E402

from broker.sigv4 import Credentials, Request, parse_signature, payload_hash, resign, verify  # noqa: E402
from tests.conftest import LOOPBACK_CONFIG  # noqa: E402
from tests.support.gateway import Sandgate  # noqa: E402
from tests.support.moto import REGION, Moto, real_keys  # noqa: E402
from tests.support.upstream import make_cert  # noqa: E402


def signed_get() -> Request:
    aws = AWSRequest(method="GET", url="https://bucket.s3.us-east-1.amazonaws.com/dir/object.txt",
                     headers={"User-Agent": "aws-cli/1.44", "Accept-Encoding": "identity"})
    S3SigV4Auth(BotoCredentials("AKIAPLACEHOLDER00001", "p" * 40), "s3", REGION).add_auth(aws)
    headers = (("Host", "bucket.s3.us-east-1.amazonaws.com"),) + tuple(aws.headers.items())
    return Request("GET", "https", "bucket.s3.us-east-1.amazonaws.com", "/dir/object.txt", headers)


def cpu_per_request(rounds: int) -> tuple[float, float]:
    req = signed_get()
    real = Credentials("AKIAREALREALREAL0001", "r" * 40)
    start = time.process_time()
    for _ in range(rounds):
        sig = parse_signature(req)
        payload = payload_hash(req, sig, b"")
        verify(req, sig, "p" * 40, payload, time.time())
        resign(req, sig, real, payload, time.time())
    ours = (time.process_time() - start) / rounds * 1000
    start = time.process_time()
    for _ in range(rounds):
        aws = AWSRequest(method="GET", url="https://bucket.s3.us-east-1.amazonaws.com/dir/object.txt",
                         headers={"Host": "bucket.s3.us-east-1.amazonaws.com"})
        S3SigV4Auth(BotoCredentials(real.access_key, real.secret_key), "s3", REGION).add_auth(aws)
    return ours, (time.process_time() - start) / rounds * 1000


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gets(client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        client.get_object(Bucket="bench", Key="k")["Body"].read()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, n = (500, 100) if args.quick else (2000, 300)
    ours, botocore_only = cpu_per_request(rounds)
    rows = [("check + sign again, CPU per request (ms)", f"{ours:.3f}", f"{botocore_only:.3f} (botocore add_auth)")]
    import boto3
    from botocore.config import Config
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        cert = make_cert(tmp / "certs", ["moto.test"])
        moto = Moto(tmp, cert)
        try:
            real = real_keys(moto)
            direct = moto.client("s3", *real)
            direct.create_bucket(Bucket="bench")
            direct.put_object(Bucket="bench", Key="k", Body=os.urandom(1024))
            cfg = {"egress": {**LOOPBACK_CONFIG["egress"], "upstream_ca": cert.cert},
                   "secrets": {"aws": {"kind": "aws", "access_key_id": "env:SG_AWS_KEY",
                                       "secret_access_key": "env:SG_AWS_SECRET", "hosts": ["127.0.0.1"]}}}
            with Sandgate(tmp / "gw", cfg, env={"SG_AWS_KEY": real[0], "SG_AWS_SECRET": real[1]}) as sg:
                sess = sg.session(allow=["127.0.0.1"], secrets=["aws"])
                env = sess["env"]
                proxied = boto3.client("s3", region_name=REGION, endpoint_url=moto.url,
                                       aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                                       aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], verify=sess["ca_file"],
                                       config=Config(proxies={"https": sess["proxy_url"]}))
                bare = sg.session(allow=["127.0.0.1"])
                unsigned = boto3.client("s3", region_name=REGION, endpoint_url=moto.url, aws_access_key_id=real[0],
                                        aws_secret_access_key=real[1], verify=bare["ca_file"],
                                        config=Config(proxies={"https": bare["proxy_url"]}))
                gets(proxied, 20)
                gets(direct, 20)
                gets(unsigned, 20)
                cpu0 = proc_cpu(sg.proc.pid)
                through = gets(proxied, n)
                cpu = (proc_cpu(sg.proc.pid) - cpu0) / n * 1000
                plain = gets(direct, n)
                cpu0 = proc_cpu(sg.proc.pid)
                passed = gets(unsigned, n)
                cpu_passed = (proc_cpu(sg.proc.pid) - cpu0) / n * 1000
        finally:
            moto.stop()
    rows.append(("signed S3 GET (requests/s)", f"{n / sum(through):.0f}", f"{n / sum(plain):.0f} (moto direct)"))
    rows.append(("signed S3 GET p50 (ms)", f"{statistics.median(through) * 1000:.1f}",
                 f"{statistics.median(plain) * 1000:.1f} (moto direct)"))
    rows.append(("sandgate CPU per GET (ms)", f"{cpu:.2f}", f"{cpu_passed:.2f} (real keys in the sandbox: no check)"))
    rows.append(("signed S3 GET, real keys through sandgate (requests/s)", f"{n / sum(passed):.0f}", ""))
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'sandgate':>10}  baseline")
    for name, value, base in rows:
        print(f"{name:<{width}}  {value:>10}  {base}")


if __name__ == "__main__":
    main()
