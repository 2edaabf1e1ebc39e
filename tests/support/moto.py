"""moto's server (test-only) on loopback over TLS: an AWS endpoint that checks every SigV4 signature after its first
three calls (INITIAL_NO_AUTH_ACTION_COUNT=3: an IAM user, its policy and its access key are made unauthenticated)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.support.upstream import free_port

REGION = "us-east-1"


class Moto:
    """moto's server on loopback over TLS, checking signatures after its first three calls."""

    def __init__(self, tmp: Path, cert) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.cert = cert
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3", "MOTO_ALLOW_NONEXISTENT_REGION": "true"}
        self.log = open(tmp / "moto.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port),
                                      "-c", cert.cert, "-k", cert.key], stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                requests.get(self.url + "/moto-api/", verify=cert.cert, timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError("moto did not start")

    def client(self, service: str, key: str, secret: str):
        import boto3
        return boto3.client(service, region_name=REGION, endpoint_url=self.url, aws_access_key_id=key,
                            aws_secret_access_key=secret, verify=self.cert.cert)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def real_keys(moto: Moto) -> tuple[str, str]:
    """The three unauthenticated calls: a user, an allow-all policy, an access key (key id, secret)."""
    import json
    iam = moto.client("iam", "AKIAANYTHING00000000", "anything")
    iam.create_user(UserName="sandgate")
    iam.put_user_policy(UserName="sandgate", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="sandgate")["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]
