"""Signed checkpoints of the audit chain, and the key that signs them.

The key is Ed25519, `DATA_DIR/audit.key` (PEM, mode 0600; made at the first start; replicas share it like
`signing.key`); `sandgate audit pubkey` prints its public half for auditors. A background task of every serve
process looks at the chain's head about once a second and writes a checkpoint (count, last row id, hash, time,
key id, signature) once `audit.checkpoint_rows` rows have been chained since the last one, or
`audit.checkpoint_interval_s` has passed with rows in between, and once more at a clean stop. Each checkpoint is
also logged, so a copy lives outside the store. Rows rewritten with recomputed hashes, or a tail cut, cannot match
a signature made without the key.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gateway.store.chain import Checkpoint, checkpoint_message
from gateway.store.trail import TrailStore

if TYPE_CHECKING:
    from gateway.store import Store

log = logging.getLogger("sandgate.audit")
KEY_FILE = "audit.key"
POLL_S = 1.0


def _read_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


def load_or_create_audit_key(data_dir: Path) -> Ed25519PrivateKey:
    """The data dir's audit key, made (mode 0600, never briefly readable by others) when there is none. Processes
    starting together agree: the file is created exclusively, and a loser reads the winner's."""
    path = data_dir / KEY_FILE
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = data_dir / f".{KEY_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)                      # atomic, and fails when another process made it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return _read_key(path)


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_keys(text: str) -> list[Ed25519PublicKey]:
    """Public keys from PEM blocks (one or more, as `audit pubkey` prints them) or raw base64 lines."""
    keys: list[Ed25519PublicKey] = []
    for block in text.split("-----END PUBLIC KEY-----"):
        if "-----BEGIN PUBLIC KEY-----" in block:
            key = serialization.load_pem_public_key((block.strip() + "\n-----END PUBLIC KEY-----\n").encode())
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError("not an Ed25519 public key")
            keys.append(key)
        else:
            for line in block.split():
                if line.startswith("#"):
                    continue
                keys.append(Ed25519PublicKey.from_public_bytes(base64.b64decode(line, validate=True)))
    if not keys:
        raise ValueError("no public key in the file")
    return keys


def sign_checkpoint(key: Ed25519PrivateKey, count: int, last_id: int, chain_hash: str, ts: float) -> Checkpoint:
    kid = key_id(key.public_key())
    signature = key.sign(checkpoint_message(count, last_id, chain_hash, ts, kid))
    return Checkpoint(count, last_id, chain_hash, ts, kid, base64.b64encode(signature).decode(), "signed")


def signature_ok(point: Checkpoint, keys: list[Ed25519PublicKey]) -> bool:
    try:
        signature = base64.b64decode(point.signature, validate=True)
    except ValueError:
        return False
    message = checkpoint_message(point.count, point.last_id, point.hash, point.ts, point.key_id)
    for key in keys:
        if key_id(key) != point.key_id:
            continue
        try:
            key.verify(signature, message)
            return True
        except Exception:  # noqa: BLE001 - cryptography's InvalidSignature
            return False
    return False


class CheckpointWriter:
    def __init__(self, store: Store, key: Ed25519PrivateKey, every_rows: int, every_s: float):
        self._trail = TrailStore(store)
        self._store = store
        self._key = key
        self._every_rows = every_rows
        self._every_s = every_s
        self._last: tuple[int, float] | None = None       # (count, when) of the newest checkpoint seen

    def _maybe_write(self, now: float, force: bool) -> Checkpoint | None:
        if self._last is None:
            points = self._trail.checkpoints_sync()
            self._last = (points[-1].count, points[-1].ts) if points else (0, now)
        count, last_id, chain_hash = self._trail.head_sync()
        done, when = self._last
        if count <= done:
            return None
        if not force and count - done < self._every_rows and now - when < self._every_s:
            return None
        point = sign_checkpoint(self._key, count, last_id, chain_hash, now)
        written = self._trail.put_checkpoint_sync(point)
        self._last = (count, now)
        return point if written else None

    async def write(self, force: bool = False) -> Checkpoint | None:
        point = await self._store.run(self._maybe_write, time.time(), force)
        if point is not None:
            log.info("audit checkpoint: %d rows, last id %d, hash %s, key %s, signature %s", point.count,
                     point.last_id, point.hash, point.key_id, point.signature)
        return point

    async def run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self.write()
                failing = False
            except Exception as exc:  # noqa: BLE001 - the store is down: the next poll tries again
                if not failing:
                    log.warning("audit checkpoint not written (%s); retrying", exc.__class__.__name__)
                failing = True

    async def close(self) -> None:
        """At a clean stop (after the audit log's last flush): seal what was written since the last checkpoint."""
        try:
            await self.write(force=True)
        except Exception as exc:  # noqa: BLE001
            log.error("sandgate stopped without a last audit checkpoint: %s", exc.__class__.__name__)
