"""The tamper-evident audit trail: every event row gets its place in one chain and a hash; the chain head; signed
checkpoints. Rows already in the store are chained here, in id order, and sealed by a genesis checkpoint.

Revision ID: 0006
Revises: 0005
"""
import time

from alembic import op
import sqlalchemy as sa

from gateway.store.chain import GENESIS_PREV, canonical_read, link

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLS = ("id", "seq", "ts", "session", "step", "kind", "action", "reasons", "codes", "request_id", "method", "host",
        "path", "http_status", "bytes_in", "bytes_out", "policy_rev", "detail")
JSON = ("reasons", "codes", "detail")
CHUNK = 5000


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("chain_n", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("hash", sa.String(), nullable=True))
    op.create_table(
        "audit_chain",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(), nullable=False),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("count", sa.BigInteger(), nullable=False, unique=True),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("key_id", sa.String(), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
    )
    # Chain the rows written before the upgrade (their hashes computed from what the store gives back) and seal
    # them with a genesis checkpoint; sandgate's signed checkpoints then cover them too.
    bind = op.get_bind()
    count, last_id, prev = 0, 0, GENESIS_PREV
    # JSON columns as their stored text, hashed verbatim (as verify reads them: gateway/store/trail.py)
    cols = [f"CAST({c} AS TEXT) AS {c}" if c in JSON and bind.dialect.name == "postgresql" else c for c in COLS]
    while True:
        rows = bind.execute(sa.text(f"SELECT {', '.join(cols)} FROM events WHERE id > :after ORDER BY id LIMIT {CHUNK}"),
                            {"after": last_id}).mappings().all()
        if not rows:
            break
        updates = []
        for row in rows:
            count += 1
            prev = link(prev, canonical_read({**row, "chain_n": count}))
            updates.append({"n": count, "h": prev, "i": row["id"]})
            last_id = int(row["id"])
        bind.execute(sa.text("UPDATE events SET chain_n = :n, hash = :h WHERE id = :i"), updates)
    bind.execute(sa.text("INSERT INTO audit_chain (id, count, last_id, hash) VALUES (1, :c, :l, :h)"),
                 {"c": count, "l": last_id, "h": prev})
    if count:
        bind.execute(sa.text("INSERT INTO audit_checkpoints (count, last_id, hash, ts, key_id, signature, kind) "
                             "VALUES (:c, :l, :h, :t, '', '', 'genesis')"),
                     {"c": count, "l": last_id, "h": prev, "t": time.time()})


def downgrade() -> None:
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_chain")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("hash")
        batch.drop_column("chain_n")
