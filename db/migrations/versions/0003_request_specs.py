"""request specs stored once per request, shared by its allocations

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 07:10:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(
    mysql.DATETIME(fsp=6), "mysql")
JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mariadb").with_variant(
    mysql.MEDIUMTEXT(), "mysql")


def upgrade() -> None:
    op.create_table('request_specs',
                    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
                    sa.Column('spec', JSON_TEXT, nullable=False),
                    sa.Column('created_at', TIMESTAMP, nullable=False),
                    sa.PrimaryKeyConstraint('id'))
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('request_spec_id', sa.Integer(), nullable=True))
        batch_op.create_index('ix_allocations_request_spec_id', ['request_spec_id'],
                              unique=False)
        batch_op.create_foreign_key('allocations_request_spec_id_fkey', 'request_specs',
                                    ['request_spec_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.drop_constraint('allocations_request_spec_id_fkey', type_='foreignkey')
        batch_op.drop_index('ix_allocations_request_spec_id')
        batch_op.drop_column('request_spec_id')
    op.drop_table('request_specs')
