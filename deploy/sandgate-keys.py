#!/usr/bin/env python3
"""Make, once, the key material every sandgate replica shares, and the CA bundle sandboxes trust.

    sandgate-keys KEYS_DIR [--ca-bundle FILE]
    sandgate-keys --k8s-secret NAME [--namespace NS] [--ca-bundle FILE] | kubectl apply -f -

KEYS_DIR gets `signing.key` (the token signing key), `audit.key` (the audit checkpoints' signing key) and
`mitmproxy-ca.pem` (the egress CA's private key and certificate), all mode 0600, and `mitmproxy-ca-cert.pem` (the certificate alone). Files already there are kept,
so running it again changes nothing: delete them to rotate. `--ca-bundle FILE` writes what sandboxes trust (the
CA certificate followed by the public roots, the same bundle a session's `ca_pem` carries), mode 0644: it holds
no secret, unlike KEYS_DIR, which must never be mounted into a sandbox.

`--k8s-secret NAME` writes nothing secret to disk: it prints a Kubernetes Secret (JSON) holding a new `signing.key`,
`audit.key` and `mitmproxy-ca.pem`, for `kubectl apply -f -`, so the CA's private key never lands on the operator's disk.
It refuses to print to a terminal.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
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


def new_ca() -> tuple[bytes, bytes]:
    """A new egress CA, named as `sandgate serve` names its own: (private key and certificate PEM, certificate)."""
    key, cert = create_ca(organization="sandgate", cn="sandgate egress CA", key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                            serialization.NoEncryption())
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    return pem + cert_pem, cert_pem


def new_audit_key() -> bytes:
    """The audit checkpoints' Ed25519 key, as `sandgate serve` makes its own (PKCS8 PEM)."""
    return Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption())


def k8s_secret(name: str, namespace: str) -> tuple[str, str]:
    """A Secret manifest (JSON) with new key material, and the CA certificate; nothing is written anywhere."""
    ca, cert = new_ca()
    data = {"signing.key": secrets.token_hex(32).encode(), "audit.key": new_audit_key(), "mitmproxy-ca.pem": ca}
    doc = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
           "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "sandgate"}},
           "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    return json.dumps(doc, indent=2) + "\n", cert.decode()


def ensure_keys(keys: Path) -> str:
    """Create what is missing in `keys`; return the CA certificate (PEM)."""
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    signing = keys / "signing.key"
    if not signing.exists():
        write_new(signing, secrets.token_hex(32).encode(), 0o600)
    if not (keys / "audit.key").exists():
        write_new(keys / "audit.key", new_audit_key(), 0o600)
    ca_file = keys / "mitmproxy-ca.pem"
    if not ca_file.exists():
        write_new(ca_file, new_ca()[0], 0o600)
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
    parser.add_argument("--k8s-secret", metavar="NAME", help="print a Kubernetes Secret with new key material "
                                                             "instead of writing KEYS_DIR")
    parser.add_argument("--namespace", default="sandgate", help="the Secret's namespace (default sandgate)")
    args = parser.parse_args(argv)
    if args.k8s_secret:
        if sys.stdout.isatty():
            print("sandgate-keys: --k8s-secret prints private keys: pipe it (| kubectl apply -f -)", file=sys.stderr)
            return 2
        manifest, cert = k8s_secret(args.k8s_secret, args.namespace)
        try:
            if args.ca_bundle:
                write_new(Path(args.ca_bundle), sandbox_bundle(cert).encode(), 0o644)
        except OSError as exc:
            print(f"sandgate-keys: {exc}", file=sys.stderr)
            return 1
        sys.stdout.write(manifest)
        print(f"sandgate-keys: Secret {args.namespace}/{args.k8s_secret} printed (nothing secret written)",
              file=sys.stderr)
        return 0
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
