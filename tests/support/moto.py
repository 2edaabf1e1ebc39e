"""moto's server (test-only) on loopback over TLS: an AWS endpoint that checks every SigV4 signature after its first
three calls (INITIAL_NO_AUTH_ACTION_COUNT=3: an IAM user, its policy and its access key are made unauthenticated)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.support.upstream import free_port

REGION = "us-east-1"
AWS_BIN = shutil.which("aws", path=str(Path(sys.executable).parent)) or "aws"
# What the `aws` CLI imports before it reads its command line (awscli's driver and its handlers, which import the
# customizations) and as it runs the s3 commands (s3transfer); what those imports read from the environment beyond
# zygote.IMPORT_TIME_ENV (`python -m tests.support.zygote --audit-env awscli.clidriver,...`).
AWS_PRELOAD = ("awscli.clidriver", "awscli.handlers", "s3transfer.manager", "awscli.customizations.s3.subcommands")
AWS_IMPORT_TIME_ENV = ("AWS_DATA_PATH", "AWS_NEW_RETRIES_2026")


def aws_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`subprocess.run([aws, *args], env=env, capture_output=True, timeout=timeout)`: the real CLI's code in a
    process of its own, forked from a zygote that has imported awscli (about 0.8 s of CPU of the CLI's 1.2 s) where
    it can be (tests/support/forked.py), else exec'd. A forked one leaves without tearing its modules down
    (SANDGATE_TEST_QUICK_EXIT, docs/testing.md) unless `env` sets that variable: its effects are its output and its
    HTTP calls, answered before it returns (awscli, botocore and s3transfer register no atexit callback, and
    botocore's one `__del__` does nothing)."""
    from tests.support.forked import run_script

    if not os.path.isabs(AWS_BIN):
        return subprocess.run([AWS_BIN, *args], env=env, capture_output=True, timeout=timeout)
    return run_script(AWS_BIN, args, {"SANDGATE_TEST_QUICK_EXIT": "1", **env}, AWS_PRELOAD, AWS_IMPORT_TIME_ENV,
                      timeout)


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
