"""pending claims (confirmed by the caller or released after claim_ttl) and leases

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 13:40:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(
    mysql.DATETIME(fsp=6), "mysql")


def upgrade() -> None:
    # Allocations written before this release were handed out to callers that
    # never confirm: they count as confirmed (server default false).
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pending', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.create_index('allocations_pending_idx', ['pending', 'created_at'],
                              unique=False)
    op.create_table('leases',
                    sa.Column('name', sa.String(length=64), nullable=False),
                    sa.Column('holder', sa.String(length=255), nullable=False),
                    sa.Column('expires_at', TIMESTAMP, nullable=False),
                    sa.PrimaryKeyConstraint('name'))


def downgrade() -> None:
    op.drop_table('leases')
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.drop_index('allocations_pending_idx')
        batch_op.drop_column('pending')
