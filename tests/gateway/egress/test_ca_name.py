"""One name for the egress CA: what `sandgate serve` makes at its first start is named as what
deploy/sandgate-keys.py provisions (never mitmproxy's default "mitmproxy")."""
from __future__ import annotations

import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from gateway.egress.proxy import CA_COMMON_NAME, CA_ORGANIZATION, ensure_ca
from tests.support.gateway import ROOT, Sandgate


def names(pem: bytes) -> tuple[str, str]:
    cert = x509.load_pem_x509_certificate(pem)
    return (cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value,
            cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value)


@pytest.mark.e2e
def test_serve_and_sandgate_keys_name_the_ca_alike(tmp_path):
    with Sandgate(tmp_path / "gw") as sg:
        served = names((sg.data_dir / "mitmproxy-ca-cert.pem").read_bytes())
    keys = tmp_path / "keys"
    proc = subprocess.run([sys.executable, str(ROOT / "deploy" / "sandgate-keys.py"), str(keys)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    provisioned = names((keys / "mitmproxy-ca-cert.pem").read_bytes())
    assert served == provisioned == (CA_COMMON_NAME, CA_ORGANIZATION) == ("sandgate egress CA", "sandgate")


def test_an_existing_ca_is_kept(tmp_path):
    ensure_ca(tmp_path)
    key = (tmp_path / "mitmproxy-ca.pem").read_bytes()
    assert (tmp_path / "mitmproxy-ca.pem").stat().st_mode & 0o077 == 0          # the private key: owner only
    ensure_ca(tmp_path)
    assert (tmp_path / "mitmproxy-ca.pem").read_bytes() == key
