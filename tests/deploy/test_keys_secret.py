"""`sandgate-keys --k8s-secret`: the replicas' key material made straight into a Kubernetes Secret (for
`kubectl apply -f -`), never written to the operator's disk; only the public CA bundle is a file."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import kubernetes_validate
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from gateway.auth.tokens import load_or_create_key
from gateway.egress.proxy import CA_COMMON_NAME
from tests.deploy.recipes import DEPLOY, K8S_VERSION, k8s

KEYS = [sys.executable, str(DEPLOY / "sandgate-keys.py")]


def test_the_secret_is_printed_valid_and_nothing_secret_is_written(tmp_path):
    proc = subprocess.run([*KEYS, "--k8s-secret", "sandgate-keys", "--ca-bundle", "ca-bundle.pem"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca-bundle.pem"]       # the public bundle only
    doc = json.loads(proc.stdout)
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    template = k8s("Secret", "sandgate-keys")
    assert (doc["metadata"]["name"], doc["metadata"]["namespace"]) == ("sandgate-keys", "sandgate")
    assert set(doc["data"]) == set(template["stringData"])             # what the Deployment mounts
    data = {k: base64.b64decode(v) for k, v in doc["data"].items()}
    keydir = tmp_path / "mounted"                                      # as the kubelet would mount it
    keydir.mkdir()
    (keydir / "signing.key").write_bytes(data["signing.key"])
    assert len(load_or_create_key(keydir)) >= 32
    cert = x509.load_pem_x509_certificates(data["mitmproxy-ca.pem"])[0]
    serialization.load_pem_private_key(data["mitmproxy-ca.pem"], None)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == CA_COMMON_NAME
    bundle = (tmp_path / "ca-bundle.pem").read_text()
    assert bundle.startswith(cert.public_bytes(serialization.Encoding.PEM).decode())
    assert "PRIVATE KEY" not in bundle
    again = json.loads(subprocess.run([*KEYS, "--k8s-secret", "x"], capture_output=True, text=True,
                                      timeout=60, cwd=tmp_path).stdout)
    assert again["data"]["signing.key"] != doc["data"]["signing.key"]   # fresh material each time


def test_it_refuses_to_print_keys_to_a_terminal(tmp_path):
    tty = subprocess.run(["script", "-qec", " ".join([*KEYS, "--k8s-secret", "sandgate-keys"]), "/dev/null"],
                         capture_output=True, timeout=60, cwd=tmp_path)
    assert b"pipe it" in tty.stdout + tty.stderr and b"PRIVATE KEY" not in tty.stdout
