"""The restore drill (deploy/sandgate-backup.py, deploy/README.md "Backup and restore"): a running sandgate on
SQLite with a pending approval and a local secret is backed up through an encryptor (the stream never touches the
disk in the clear), restored into a fresh data dir, and a sandgate started there sees the same approval pending,
accepts tokens minted before the backup, keeps its CA, and injects the local secret."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests

from tests.conftest import LOOPBACK_CONFIG
from tests.deploy.recipes import DEPLOY
from tests.gateway.web.conftest import file_toolcall
from tests.support.gateway import Sandgate

pytestmark = pytest.mark.e2e

BACKUP = [sys.executable, str(DEPLOY / "sandgate-backup.py")]
REAL = "ghp_" + "R" * 36
CFG = {**LOOPBACK_CONFIG, "egress": {**LOOPBACK_CONFIG["egress"], "resolve": {"bound.test": ["127.0.0.1"]}},
       "secrets": {"internal": {"source": "local:internal", "hosts": ["bound.test"], "format": "ghp_:40",
                                "allow_plaintext": True}}}
ENV = {**os.environ, "BACKUP_PASSPHRASE": "drill-passphrase"}
ENCRYPT = ["openssl", "enc", "-aes-256-cbc", "-pbkdf2", "-salt", "-pass", "env:BACKUP_PASSPHRASE"]


def piped(first: list[str], second: list[str], stdin=None, stdout=None) -> None:
    """`first | second` with no file in between; both must succeed."""
    a = subprocess.Popen(first, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    b = subprocess.Popen(second, stdin=a.stdout, stdout=stdout, stderr=subprocess.PIPE, env=ENV)
    a.stdout.close()
    _, err_b = b.communicate(timeout=120)
    err_a = a.stderr.read()
    assert a.wait(30) == 0, err_a.decode()
    assert b.returncode == 0, err_b.decode()


def test_the_restore_drill(tmp_path, upstream):
    old = Sandgate(tmp_path / "old", CFG).start()
    try:
        approver = old.token("approver", "alice", ttl_s=3600)
        admin = old.token("admin", "ops", ttl_s=3600)
        put = subprocess.run([sys.executable, "-m", "gateway", "secrets", "put", "internal", "--hosts", "bound.test",
                              "--from-stdin", "--api-url", old.api, "--token", admin],
                             input=REAL, capture_output=True, text=True, timeout=60)
        assert put.returncode == 0, put.stderr
        sess = old.session(allow=["bound.test"])
        aid = file_toolcall(old, sess["id"], {"target": "production"})
        ca_before = (old.data_dir / "mitmproxy-ca-cert.pem").read_text()

        # Backed up while it runs (WAL and all), straight into the encryptor.
        archive = tmp_path / "backup.tar.enc"
        with open(archive, "wb") as out:
            piped([*BACKUP, "create", str(old.data_dir)], ENCRYPT, stdout=out)
    finally:
        old.stop()
    blob = archive.read_bytes()
    for clear in (b"PRIVATE KEY", b"sandgate.db", (old.data_dir / "signing.key").read_bytes().strip()):
        assert clear not in blob                            # nothing in the clear on disk

    # A fresh data dir, restored from the encrypted archive.
    new_root = tmp_path / "new"
    new_data = new_root / "data"
    with open(archive, "rb") as src:
        piped([*ENCRYPT, "-d"], [*BACKUP, "restore", str(new_data)], stdin=src)
    assert oct(new_data.stat().st_mode & 0o777) == "0o700"
    for name in ("signing.key", "audit.key", "mitmproxy-ca.pem", "secrets.key", "sandgate.db"):
        assert (new_data / name).stat().st_mode & 0o077 == 0, name
    assert not (new_data / "harness.token").exists()

    with Sandgate(new_root, CFG) as new:
        assert new.data_dir == new_data
        item = new.call("GET", f"/v1/approvals/{aid}", approver)        # a token minted before the backup
        assert item.status_code == 200 and item.json()["status"] == "pending"
        assert item.json()["session"] == sess["id"]
        assert (new_data / "mitmproxy-ca-cert.pem").read_text() == ca_before
        fresh = new.session(allow=["bound.test"], secrets=["internal"])
        placeholder = fresh["env"]["INTERNAL"]
        r = requests.get(f"http://bound.test:{upstream.port}/x", proxies=fresh["proxies"], timeout=30,
                         headers={"Authorization": f"Bearer {placeholder}"})
        assert r.status_code == 200
        assert upstream.recorder.requests[-1].headers["authorization"] == f"Bearer {REAL}"
        audit = subprocess.run([sys.executable, "-m", "gateway", "audit", "verify", "--config", str(new.config_path),
                                "--data-dir", str(new_data)], capture_output=True, text=True, timeout=120)
        assert audit.returncode == 0, audit.stdout + audit.stderr


def test_restore_refuses_a_used_data_dir_and_a_damaged_stream(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "signing.key").write_text("a" * 64)
    made = subprocess.run([*BACKUP, "create", str(data), "--no-db"], capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    again = subprocess.run([*BACKUP, "restore", str(data)], input=made.stdout, capture_output=True, timeout=60)
    assert again.returncode == 1 and b"refusing to overwrite" in again.stderr
    damaged = bytearray(made.stdout)
    at = damaged.index(b"a" * 64)
    damaged[at] = ord("b")
    bad = subprocess.run([*BACKUP, "restore", str(tmp_path / "fresh")], input=bytes(damaged),
                         capture_output=True, timeout=60)
    assert bad.returncode == 1 and b"digest mismatch" in bad.stderr
    assert not (tmp_path / "fresh" / "signing.key").exists()
    tty = subprocess.run(["script", "-qec", " ".join([*BACKUP, "create", str(data), "--no-db"]), "/dev/null"],
                         capture_output=True, timeout=60)
    assert b"pipe it into an encryptor" in tty.stdout + tty.stderr
