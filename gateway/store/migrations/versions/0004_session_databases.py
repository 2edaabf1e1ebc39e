"""The PostgreSQL gateway: a session's databases and the SCRAM verifier of its database password.

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("databases", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("db_login", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("db_login")
        batch.drop_column("databases")
