"""The decision log stores each history entry once: `decisions.history` references entries of `decision_history`
(gateway/store/decisions.py) instead of every input copying the session's last 20 tool calls.

Revision ID: 0011
Revises: 0010
"""
from alembic import op
import sqlalchemy as sa

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decision_history",
        sa.Column("ref", sa.String(), primary_key=True),
        sa.Column("entry", sa.Text(), nullable=False),
    )
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("history", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("history")
    op.drop_table("decision_history")
