"""node_changes: each claim and release on a node, for the host-state caches

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 06:30:00

A claim or a release writes one row in the transaction that bumps the node's
generation: what it took or gave back. A scheduler whose cache is a
generation behind applies it instead of reading the whole node again.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'node_changes',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('compute_node_id', sa.Integer(), nullable=False),
        sa.Column('generation', sa.Integer(), nullable=False),
        sa.Column('at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql', 'mariadb'),
                  nullable=False),
        sa.Column('change', sa.Text().with_variant(mysql.MEDIUMTEXT(), 'mysql', 'mariadb'),
                  nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('node_changes_at_idx', 'node_changes', ['at'])


def downgrade() -> None:
    op.drop_index('node_changes_at_idx', table_name='node_changes')
    op.drop_table('node_changes')
