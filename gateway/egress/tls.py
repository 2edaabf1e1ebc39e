"""CA bundles: the one the sandbox trusts (sandgate CA + public roots) and the one used upstream."""
from __future__ import annotations

import os
from pathlib import Path

import certifi


def public_roots() -> str:
    return Path(certifi.where()).read_text()


def sandbox_bundle(ca_cert_pem: str) -> str:
    """What the harness writes at ca_path: sandgate's CA first, then the public roots."""
    return ca_cert_pem.strip() + "\n" + public_roots()


def write_upstream_bundle(data_dir: Path, extra_ca: str) -> Path:
    """mitmproxy's ssl_verify_upstream_trusted_ca replaces its roots, so merge public roots + extra CA."""
    text = public_roots()
    if extra_ca:
        text += "\n" + Path(extra_ca).read_text()
    path = data_dir / "upstream-ca.pem"
    # Whole or not at all: `serve --workers N` starts N processes that each write it while the others read it (a
    # worker that read it half written failed to start: "[X509] PEM lib").
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
