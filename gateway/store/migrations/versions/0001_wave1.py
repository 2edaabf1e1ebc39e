"""Baseline: the wave-1 schema (sessions, approvals, events).

A store created by wave 1 (tables made on open, no alembic_version table) already has these tables: each is
created only when missing, so the upgrade of such a store starts here and keeps its data.

Revision ID: 0001
Revises:
"""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = set(sa.inspect(op.get_bind()).get_table_names())
    if "sessions" not in have:
        _sessions()
    if "approvals" not in have:
        _approvals()
    if "events" not in have:
        _events()


def _sessions() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("workload", sa.String(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("allow", sa.JSON(), nullable=False),
        sa.Column("secrets", sa.JSON(), nullable=False),
        sa.Column("placeholders", sa.JSON(), nullable=False),
        sa.Column("workspace", sa.String(), nullable=False),
        sa.Column("ca_path", sa.String(), nullable=False),
        sa.Column("frozen", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("deleted_at", sa.Float(), nullable=True),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def _approvals() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("session", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("binding", sa.String(), nullable=False),
        sa.Column("summary", sa.String(), nullable=False),
        sa.Column("action", sa.JSON(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.Column("decided_by", sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("votes", sa.JSON(), nullable=False),
        sa.Column("quorum", sa.Integer(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
        sa.Column("requested_by", sa.String(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )
    op.create_index("ix_approvals_binding", "approvals", ["binding"])
    op.create_index("ix_approvals_session", "approvals", ["session"])
    op.create_index("ix_approvals_status", "approvals", ["status"])


def _events() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("session", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("codes", sa.JSON(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=True),
        sa.Column("method", sa.String(), nullable=True),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("path", sa.String(), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("bytes_in", sa.Integer(), nullable=True),
        sa.Column("bytes_out", sa.Integer(), nullable=True),
        sa.Column("policy_rev", sa.String(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
    )
    op.create_index("ix_events_session_seq", "events", ["session", "seq"])


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("approvals")
    op.drop_table("sessions")
