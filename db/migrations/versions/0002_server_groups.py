"""server groups: the row a claim locks to enforce a hard group policy

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 22:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('server_groups',
                    sa.Column('uuid', sa.String(length=36), nullable=False),
                    sa.Column('generation', sa.Integer(), nullable=False),
                    sa.PrimaryKeyConstraint('uuid'))


def downgrade() -> None:
    op.drop_table('server_groups')
