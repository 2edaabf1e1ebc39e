"""Session counters shared by all replicas (`session.stats` in policy input summed over every replica).

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COUNTERS = ("requests", "denied", "asked", "bytes_out", "bytes_in", "toolcalls")


def upgrade() -> None:
    op.create_table(
        "session_stats",
        sa.Column("session", sa.String(), primary_key=True),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTERS),
    )


def downgrade() -> None:
    op.drop_table("session_stats")
