"""transitions: a consumer's last transition, kept after its row is gone

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 23:55:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'transitions',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('consumer_uuid', sa.String(length=36), nullable=False),
        sa.Column('instance_uuid', sa.String(length=36), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('compute_node_id', sa.Integer(), nullable=False),
        sa.Column('host', sa.String(length=255), nullable=True),
        sa.Column('project_id', sa.String(length=255), nullable=True),
        sa.Column('request_spec',
                  sa.Text().with_variant(mysql.MEDIUMTEXT(), 'mysql', 'mariadb'),
                  nullable=True),
        sa.Column('at', sa.DateTime().with_variant(mysql.DATETIME(fsp=6), 'mysql', 'mariadb'),
                  nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('transitions_consumer_uuid_idx', 'transitions', ['consumer_uuid'])
    op.create_index('transitions_at_idx', 'transitions', ['at'])


def downgrade() -> None:
    op.drop_index('transitions_at_idx', table_name='transitions')
    op.drop_index('transitions_consumer_uuid_idx', table_name='transitions')
    op.drop_table('transitions')
