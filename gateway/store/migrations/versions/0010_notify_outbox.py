"""The notification outbox: approval events waiting to be POSTed to `notify.webhook_url`.

Revision ID: 0010
Revises: 0009
"""
from alembic import op
import sqlalchemy as sa

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notify_outbox",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("delivery", sa.String(), nullable=False),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.Column("lease_owner", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("last_error", sa.String(), nullable=False),
        sa.UniqueConstraint("delivery"),
    )


def downgrade() -> None:
    op.drop_table("notify_outbox")
