"""PCI device tags: an indexed, byte-compared column that the pools GROUP BY includes

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 15:00:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mariadb").with_variant(
    mysql.MEDIUMTEXT(), "mysql")
TAGS = sa.String(255).with_variant(
    mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mariadb").with_variant(
    mysql.VARCHAR(255, charset="utf8mb4", collation="utf8mb4_bin"), "mysql")
POOL = ['vendor_id', 'product_id', 'dev_type', 'numa_node', 'physical_network']


def _indexes(batch_op, with_tags: bool) -> None:
    extra = ['tags'] if with_tags else []
    batch_op.create_index('pci_devices_node_pool_idx',
                          ['compute_node_id', 'status', *POOL, *extra], unique=False)
    batch_op.create_index('pci_devices_pool_idx',
                          ['status', 'compute_node_id', *POOL, *extra], unique=False)


def upgrade() -> None:
    # The column was never written before this revision: every row holds NULL.
    with op.batch_alter_table('pci_devices', schema=None) as batch_op:
        batch_op.drop_index('pci_devices_pool_idx')
        batch_op.drop_index('pci_devices_node_pool_idx')
        batch_op.alter_column('tags', existing_type=JSON_TEXT, type_=TAGS,
                              existing_nullable=True)
        _indexes(batch_op, with_tags=True)


def downgrade() -> None:
    with op.batch_alter_table('pci_devices', schema=None) as batch_op:
        batch_op.drop_index('pci_devices_pool_idx')
        batch_op.drop_index('pci_devices_node_pool_idx')
        batch_op.alter_column('tags', existing_type=TAGS, type_=JSON_TEXT,
                              existing_nullable=True)
        _indexes(batch_op, with_tags=False)
