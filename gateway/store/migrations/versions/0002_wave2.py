"""Wave 2: token revocations, session paths, the decision log, and per-session audit sequence counters.

Idempotent over a store that a wave-2 build created before migrations existed (tables made on open): a table or
column already there is left alone.

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def upgrade() -> None:
    have = _tables()
    # An early wave-1 store may predate sessions.updated_at (wave 1 added it on open).
    if "updated_at" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("sessions")}:
        with op.batch_alter_table("sessions") as batch:
            batch.add_column(sa.Column("updated_at", sa.Float(), nullable=False, server_default="0"))
    if "revocations" not in have:
        op.create_table(
            "revocations",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("jti", sa.String(), nullable=False),
            sa.Column("revoked_at", sa.Float(), nullable=False),
            sa.Column("revoked_by", sa.String(), nullable=False),
        )
        op.create_index("ix_revocations_jti", "revocations", ["jti"], unique=True)
    if "session_paths" not in have:
        op.create_table(
            "session_paths",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("session", sa.String(), nullable=False),
            sa.Column("path", sa.String(), nullable=False),
            sa.Column("kind", sa.String(), nullable=False),
            sa.Column("target", sa.String(), nullable=True),
            sa.Column("content", sa.Text(), nullable=True),
            sa.Column("ts", sa.Float(), nullable=False),
        )
        op.create_index("ix_session_paths_session", "session_paths", ["session", "id"])
    if "decisions" not in have:
        op.create_table(
            "decisions",
            sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("id", sa.String(), nullable=False),
            sa.Column("ts", sa.Float(), nullable=False),
            sa.Column("kind", sa.String(), nullable=False),
            sa.Column("session", sa.String(), nullable=True),
            sa.Column("input", sa.JSON(), nullable=False),
            sa.Column("result", sa.JSON(), nullable=False),
            sa.Column("policy_rev", sa.String(), nullable=False),
            sa.Column("engine", sa.String(), nullable=False),
            sa.Column("latency_us", sa.Integer(), nullable=False),
        )
        op.create_index("ix_decisions_id", "decisions", ["id"])
        op.create_index("ix_decisions_ts", "decisions", ["ts"])
    if "policy_divergences" not in have:
        op.create_table(
            "policy_divergences",
            sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("decision_id", sa.String(), nullable=False),
            sa.Column("ts", sa.Float(), nullable=False),
            sa.Column("kind", sa.String(), nullable=False),
            sa.Column("session", sa.String(), nullable=True),
            sa.Column("input", sa.JSON(), nullable=False),
            sa.Column("live", sa.JSON(), nullable=False),
            sa.Column("shadow", sa.JSON(), nullable=False),
            sa.Column("live_rev", sa.String(), nullable=False),
            sa.Column("shadow_rev", sa.String(), nullable=False),
        )
        op.create_index("ix_policy_divergences_ts", "policy_divergences", ["ts"])
    if "audit_seqs" not in have:
        op.create_table(
            "audit_seqs",
            sa.Column("session", sa.String(), primary_key=True),
            sa.Column("last", sa.Integer(), nullable=False),
        )
        # Continue every existing trail from its highest number (the writer would do it lazily too).
        op.execute("INSERT INTO audit_seqs (session, last) SELECT COALESCE(session, ''), MAX(seq) FROM events "
                   "GROUP BY COALESCE(session, '')")


def downgrade() -> None:
    for name in ("audit_seqs", "policy_divergences", "decisions", "session_paths", "revocations"):
        op.drop_table(name)
