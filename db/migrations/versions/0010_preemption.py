"""preemption: a consumer's priority, whether it may be preempted, and when it was

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 23:45:00

``priority`` and ``preemptible`` are what the request that made the consumer
asked (``berth:priority``, ``berth:preemptible``); a consumer that another
request preempted is of type ``preempted``, names that request's instance in
``preempted_by`` and keeps its allocation rows (what it held) until the
caller releases it; they no longer count in the inventories' ``used``.
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('priority', sa.Integer(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('preemptible', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))
        batch_op.add_column(sa.Column('preempted_by', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('preempted_at', sa.DateTime().with_variant(
            sa.dialects.mysql.DATETIME(fsp=6), 'mysql', 'mariadb'), nullable=True))
        batch_op.create_index('consumers_preemptible_idx',
                              ['preemptible', 'priority', 'compute_node_id'], unique=False)
        batch_op.create_index('consumers_preempted_idx',
                              ['consumer_type', 'compute_node_id', 'preempted_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.drop_index('consumers_preempted_idx')
        batch_op.drop_index('consumers_preemptible_idx')
        batch_op.drop_column('preempted_at')
        batch_op.drop_column('preempted_by')
        batch_op.drop_column('preemptible')
        batch_op.drop_column('priority')
