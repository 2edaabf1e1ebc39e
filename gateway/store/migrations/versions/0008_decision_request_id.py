"""The decision log links to what users hold: each decision row carries the proxy's request id (in every 403 body)
or the tool call's id, indexed with the session for `sandgate audit export --request-id/--session`.

Revision ID: 0008
Revises: 0007
"""
from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("request_id", sa.String(), nullable=True))
    op.create_index("ix_decisions_request_id", "decisions", ["request_id"])
    op.create_index("ix_decisions_session", "decisions", ["session"])


def downgrade() -> None:
    op.drop_index("ix_decisions_session", "decisions")
    op.drop_index("ix_decisions_request_id", "decisions")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("request_id")
