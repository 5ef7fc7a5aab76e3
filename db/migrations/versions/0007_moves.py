"""moves: an instance consumer remembers its last move and how it stands

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 22:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('move_id', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('move_state', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.drop_column('move_state')
        batch_op.drop_column('move_id')
