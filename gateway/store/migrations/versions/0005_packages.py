"""The package firewall: malicious-package entries, site exceptions, and their revision counter.

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "package_advisories",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("advisory", sa.String(), nullable=False),
        sa.Column("ecosystem", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("affected", sa.Text(), nullable=False),
        sa.Column("summary", sa.String(), nullable=False),
        sa.Column("modified", sa.String(), nullable=False),
        sa.Column("withdrawn", sa.Boolean(), nullable=False),
        sa.Column("rev", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("advisory", "ecosystem", "name", name="uq_package_advisories"),
    )
    op.create_index("ix_package_advisories_rev", "package_advisories", ["rev"])
    op.create_table(
        "package_exceptions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ecosystem", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("added_by", sa.String(), nullable=False),
        sa.Column("added_at", sa.Float(), nullable=False),
        sa.Column("removed", sa.Boolean(), nullable=False),
        sa.Column("rev", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("ecosystem", "name", "version", name="uq_package_exceptions"),
    )
    op.create_index("ix_package_exceptions_rev", "package_exceptions", ["rev"])
    op.create_table(
        "package_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("rev", sa.BigInteger(), nullable=False),
    )
    op.execute("INSERT INTO package_revisions (id, rev) VALUES (1, 0)")


def downgrade() -> None:
    op.drop_table("package_revisions")
    op.drop_table("package_exceptions")
    op.drop_table("package_advisories")
