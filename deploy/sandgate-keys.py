#!/usr/bin/env python3
"""Make, once, the key material every sandgate replica shares, and the CA bundle sandboxes trust.

    sandgate-keys KEYS_DIR [--ca-bundle FILE]

KEYS_DIR gets `signing.key` (the token signing key) and `mitmproxy-ca.pem` (the egress CA's private key and
certificate), both mode 0600, and `mitmproxy-ca-cert.pem` (the certificate alone). Files already there are kept,
so running it again changes nothing: delete them to rotate. `--ca-bundle FILE` writes what sandboxes trust (the
CA certificate followed by the public roots, the same bundle a session's `ca_pem` carries), mode 0644: it holds
no secret, unlike KEYS_DIR, which must never be mounted into a sandbox.
"""
from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from mitmproxy.certs import create_ca

from gateway.egress.tls import sandbox_bundle


def write_new(path: Path, data: bytes, mode: int) -> None:
    """Write `path` with `mode` from the first byte (never briefly readable by others)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def ensure_keys(keys: Path) -> str:
    """Create what is missing in `keys`; return the CA certificate (PEM)."""
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    signing = keys / "signing.key"
    if not signing.exists():
        write_new(signing, secrets.token_hex(32).encode(), 0o600)
    ca_file = keys / "mitmproxy-ca.pem"
    if not ca_file.exists():
        key, cert = create_ca(organization="sandgate", cn="sandgate egress CA", key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption())
        write_new(ca_file, pem + cert.public_bytes(serialization.Encoding.PEM), 0o600)
    cert_pem = x509.load_pem_x509_certificates(ca_file.read_bytes())[0].public_bytes(
        serialization.Encoding.PEM)
    cert_file = keys / "mitmproxy-ca-cert.pem"
    if not cert_file.exists() or cert_file.read_bytes() != cert_pem:
        write_new(cert_file, cert_pem, 0o644)
    return cert_pem.decode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandgate-keys", description=__doc__.splitlines()[0])
    parser.add_argument("keys_dir", nargs="?", default=os.environ.get("SANDGATE_KEYS_DIR", "/etc/sandgate-keys"))
    parser.add_argument("--ca-bundle", help="also write the sandboxes' CA bundle here")
    args = parser.parse_args(argv)
    try:
        cert = ensure_keys(Path(args.keys_dir))
        if args.ca_bundle:
            write_new(Path(args.ca_bundle), sandbox_bundle(cert).encode(), 0o644)
    except (OSError, ValueError) as exc:
        print(f"sandgate-keys: {exc}", file=sys.stderr)
        return 1
    print(f"sandgate-keys: key material in {args.keys_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
