"""The upstream CA bundle in the data directory is replaced whole: `serve --workers N` starts N processes that each
write it while the others load it (a worker that loaded it half written failed to start with "[X509] PEM lib")."""
from __future__ import annotations

import ssl
import threading

from gateway.egress.tls import public_roots, write_upstream_bundle


def test_a_reader_never_sees_the_bundle_half_written(tmp_path):
    path = write_upstream_bundle(tmp_path, "")
    stop, errors = threading.Event(), []

    def rewrite() -> None:
        while not stop.is_set():
            write_upstream_bundle(tmp_path, "")

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        for _ in range(40):
            try:
                ssl.create_default_context(cafile=str(path))
            except ssl.SSLError as exc:
                errors.append(exc)
    finally:
        stop.set()
        writer.join()
    assert not errors
    assert path.read_text() == public_roots()
    assert [p.name for p in tmp_path.iterdir()] == ["upstream-ca.pem"]            # no temporary file left behind
