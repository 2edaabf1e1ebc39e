"""`sandgate audit verify` on real stores: rows written by the real audit writer (one chain over every row, across
writers), signed checkpoints by the real checkpoint writer, then the trail tampered with as an attacker with
database access would, with the sqlite3 shell or psql: an edited row, a deleted row, a swapped pair, an inserted
row, a cut tail (after the last checkpoint, and under it with the head rewound), a forged checkpoint. Each is
named (row id, session, seq); an untouched trail passes, also checked with only the public key.

The untouched trail is checked by real `sandgate audit` processes, forked from the test process's zygote (the
command's wiring: its exit code and output; verify, pubkey and verify --pubkey once each); each tampered trail, and another key's, by the same command run in
this process (`run_cli`: `gateway.cli.main`, the same argv, environment and output): a CLI process costs about 2 s
of CPU importing, and the tampering tests ran fourteen."""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import uuid

import pytest
from sqlalchemy import create_engine, text

from gateway.audit.checkpoints import CheckpointWriter, load_or_create_audit_key
from gateway.store import Store
from tests.conftest import need, need_binary
from tests.support.cli import run_cli
from tests.support.gateway import gateway_cli
from tests.support.pg import PG_DSN, PG_URL, pg_available

pytestmark = pytest.mark.timeout(600)        # real CLI processes and two writers; slow on a loaded machine


def event(sid: str | None, i: int) -> dict:
    return {"session": sid, "step": i, "kind": "egress" if i % 3 else "toolcall", "action": "allow" if i % 4 else "deny",
            "reasons": [f"reason {i}"], "codes": ["egress.allowed"], "request_id": f"r{i}", "method": "GET",
            "host": "example.com", "path": f"/p/{i}?q=\u00e9", "http_status": 200, "bytes_in": i, "bytes_out": 2 * i,
            "policy_rev": "rev1", "detail": {"i": i, "nested": {"b": [1, 2.5, None], "a": "x"}}, "ts": 1_700_000_000.25 + i}


class World:
    def __init__(self, kind: str, tmp, url: str, schema: str | None):
        self.kind, self.tmp, self.url, self.schema = kind, tmp, url, schema
        self.data = tmp / "data"
        self.env = {**os.environ, "SANDGATE_STORE__URL": url}

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """A real `sandgate audit` process, forked from the test process's zygote (tests/support/zygote.py)."""
        return gateway_cli("audit", *args, "--data-dir", str(self.data), timeout=120, env=self.env)

    def verify(self) -> subprocess.CompletedProcess:
        """`sandgate audit verify` in this process (tests/support/cli.py), with the same argv and store URL."""
        return run_cli("audit", "verify", "--data-dir", str(self.data), env={"SANDGATE_STORE__URL": self.url})

    def sql(self, statement: str) -> str:
        """Tamper as an attacker with database access: the sqlite3 shell, or psql."""
        if self.kind == "sqlite":
            out = subprocess.run([need_binary("sqlite3"), str(self.data / "sandgate.db"), statement],
                                 capture_output=True, text=True, timeout=30)
        else:
            out = subprocess.run([need_binary("psql"), PG_DSN, "-v", "ON_ERROR_STOP=1", "-At", "-c",
                                  f"SET search_path TO {self.schema}; {statement}"], capture_output=True, text=True,
                                 timeout=30)
        assert out.returncode == 0, out.stderr
        return "\n".join(line for line in out.stdout.strip().splitlines() if line != "SET")

    def rows(self) -> list[tuple]:
        """(id, session, seq, chain_n) in id order."""
        out = self.sql("SELECT id, session, seq, chain_n FROM events ORDER BY id")
        return [tuple(line.split("|")) for line in out.splitlines() if line]


async def write_trail(url: str, data, batches: int = 6, per_batch: int = 40, checkpoint_every: int = 100) -> None:
    """Two writers (as two replicas) append batches at once; the checkpoint writer signs as the server would."""
    one, two = Store(url), Store(url)
    await one.open()
    await two.open()
    try:
        key = load_or_create_audit_key(data)
        writer = CheckpointWriter(one, key, checkpoint_every, 3600)
        for b in range(batches):
            sid_a, sid_b = f"s-a{b % 2}", f"s-b{b % 3}"
            await asyncio.gather(one.append_events([event(sid_a, b * per_batch + i) for i in range(per_batch)]),
                                 two.append_events([event(sid_b if i % 5 else None, b * per_batch + i)
                                                    for i in range(per_batch)]))
            if b < batches - 1:
                await writer.write()            # the last batch stays after the last checkpoint (as between two)
    finally:
        one.close()
        two.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request, tmp_path):
    if request.param == "sqlite":
        (tmp_path / "data").mkdir()
        w = World("sqlite", tmp_path, f"sqlite:///{tmp_path / 'data' / 'sandgate.db'}", None)
        asyncio.run(write_trail(w.url, w.data))
        yield w
        return
    need(pg_available(), "PostgreSQL at 127.0.0.1:5432")
    schema = "audit_" + uuid.uuid4().hex[:10]
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        (tmp_path / "data").mkdir()
        w = World("postgresql", tmp_path, f"{PG_URL}?options=-csearch_path%3D{schema}", schema)
        asyncio.run(write_trail(w.url, w.data))
        yield w
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def broken_at(out: subprocess.CompletedProcess) -> tuple[int, str, str, str]:
    assert out.returncode == 1, out.stdout + out.stderr
    m = re.match(r"sandgate: audit trail broken at row id (\d+) \(session (\S+), seq (\S+)\): (.*)", out.stdout)
    assert m, out.stdout
    return int(m.group(1)), m.group(2), m.group(3), m.group(4)


def test_an_untouched_trail_passes_also_with_only_the_public_key(world):
    out = world.cli("verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.match(r"sandgate: audit trail intact: 480 rows checked; \d+ signed checkpoints?, the last at row id \d+; "
                    r"\d+ rows after it",
                    out.stdout), out.stdout
    pub = world.cli("pubkey")
    assert pub.returncode == 0 and "BEGIN PUBLIC KEY" in pub.stdout and "PRIVATE" not in pub.stdout
    (world.tmp / "audit.pub").write_text(pub.stdout)
    shutil.move(world.data / "audit.key", world.tmp / "audit.key.moved")       # the auditor has no private key
    assert world.cli("verify", "--pubkey", str(world.tmp / "audit.pub")).returncode == 0
    other = world.tmp / "other"
    load_or_create_audit_key(other)
    # another deployment's key: the same commands, in process (each form ran as a real process above)
    other_pub = run_cli("audit", "pubkey", "--data-dir", str(other)).stdout
    (world.tmp / "other.pub").write_text(other_pub)
    wrong = run_cli("audit", "verify", "--pubkey", str(world.tmp / "other.pub"), "--data-dir", str(world.data),
                    env={"SANDGATE_STORE__URL": world.url})
    assert wrong.returncode == 1 and "no valid signature" in wrong.stdout


def test_an_edited_row_is_named(world):
    rid, sid, seq, _n = world.rows()[123]
    world.sql(f"UPDATE events SET action = 'allow', reasons = '[\"nothing to see\"]' WHERE id = {rid}")
    broken = broken_at(world.verify())
    assert broken[:3] == (int(rid), sid or "-", seq)
    assert "edited" in broken[3]


def test_a_deleted_row_is_found(world):
    rows = world.rows()
    world.sql(f"DELETE FROM events WHERE id = {rows[200][0]}")
    rid, sid, seq, what = broken_at(world.verify())
    assert (rid, sid, seq) == (int(rows[201][0]), rows[201][1] or "-", rows[201][2])
    assert what.startswith("1 row before it deleted")


def test_a_swapped_pair_is_found(world):
    rows = world.rows()
    a, b = rows[300][0], rows[301][0]
    world.sql(f"UPDATE events SET id = -1 WHERE id = {a}; UPDATE events SET id = {a} WHERE id = {b}; "
              f"UPDATE events SET id = {b} WHERE id = -1")
    rid, _sid, _seq, what = broken_at(world.verify())
    assert rid == int(a) and "reordered" in what


def test_an_inserted_row_is_found(world):
    rows = world.rows()
    world.sql("INSERT INTO events (seq, ts, session, kind, action, reasons, codes, detail) "
              "VALUES (999, 1.0, 's-a0', 'egress', 'allow', '[]', '[]', '{}')")
    rid, sid, seq, what = broken_at(world.verify())
    assert rid > int(rows[-1][0]) and (sid, seq) == ("s-a0", "999") and "inserted" in what


def test_a_tail_cut_after_the_last_checkpoint_is_found(world):
    rows = world.rows()
    world.sql(f"DELETE FROM events WHERE id > {rows[-11][0]}")                     # the last 10 rows
    rid, _sid, _seq, what = broken_at(world.verify())
    assert rid == int(rows[-11][0]) and "cut from the end" in what and "chain head counts 480" in what


def test_a_tail_cut_under_a_checkpoint_with_the_head_rewound_is_found(world):
    rows = world.rows()
    keep = rows[-200]                                       # under the last checkpoint (place 320)
    last_point = world.sql("SELECT max(count) FROM audit_checkpoints WHERE kind = 'signed'")
    assert int(last_point) > int(keep[3])
    world.sql(f"DELETE FROM events WHERE id > {keep[0]}; UPDATE audit_chain SET count = {keep[3]}, "
              f"last_id = {keep[0]}, hash = (SELECT hash FROM events WHERE id = {keep[0]})")
    rid, _sid, _seq, what = broken_at(world.verify())
    assert rid == int(keep[0]) and "last signed checkpoint covers" in what


def test_a_forged_checkpoint_is_found(world):
    world.sql("UPDATE audit_checkpoints SET hash = 'ab' || substr(hash, 3) WHERE id = (SELECT max(id) FROM "
              "audit_checkpoints)")
    out = world.verify()
    assert out.returncode == 1 and "no valid signature" in out.stdout
