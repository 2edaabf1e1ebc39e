"""OAuth2 secrets: the newest access token and rotated refresh token of each (encrypted), and the refresh lease.

Revision ID: 0007
Revises: 0006
"""
from alembic import op
import sqlalchemy as sa

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oauth2_tokens",
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("access", sa.Text(), nullable=False),
        sa.Column("refresh_at", sa.Float(), nullable=False),
        sa.Column("refresh_token", sa.Text(), nullable=False),
        sa.Column("lease_owner", sa.String(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("oauth2_tokens")
