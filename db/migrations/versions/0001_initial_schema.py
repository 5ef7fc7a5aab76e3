"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-12-02 14:36:21.013317
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None

# Microsecond timestamps and long JSON text on MariaDB/MySQL (as in db/models.py).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(
    mysql.DATETIME(fsp=6), "mysql")
JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mariadb").with_variant(
    mysql.MEDIUMTEXT(), "mysql")


def upgrade() -> None:
    op.create_table('aggregates',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('deleted', sa.Integer(), nullable=False),
    sa.Column('deleted_at', TIMESTAMP, nullable=True),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.Column('updated_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name', 'deleted', name='uniq_aggregates0name0deleted'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('aggregates', schema=None) as batch_op:
        batch_op.create_index('aggregates_updated_at_idx', ['updated_at'], unique=False)

    op.create_table('compute_nodes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('hypervisor_hostname', sa.String(length=255), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('memory_mb', sa.BigInteger(), nullable=False),
    sa.Column('local_gb', sa.BigInteger(), nullable=False),
    sa.Column('vcpus_used', sa.Integer(), nullable=False),
    sa.Column('memory_mb_used', sa.BigInteger(), nullable=False),
    sa.Column('disk_mb_used', sa.BigInteger(), nullable=False),
    sa.Column('running_vms', sa.Integer(), nullable=False),
    sa.Column('current_workload', sa.Integer(), nullable=False),
    sa.Column('failed_builds', sa.Integer(), nullable=False),
    sa.Column('cpu_allocation_ratio', sa.Float(), nullable=False),
    sa.Column('ram_allocation_ratio', sa.Float(), nullable=False),
    sa.Column('disk_allocation_ratio', sa.Float(), nullable=False),
    sa.Column('reserved_host_memory_mb', sa.Integer(), nullable=False),
    sa.Column('reserved_host_disk_mb', sa.Integer(), nullable=False),
    sa.Column('reserved_host_cpus', sa.Integer(), nullable=False),
    sa.Column('hypervisor_type', sa.String(length=255), nullable=True),
    sa.Column('hypervisor_version', sa.BigInteger(), nullable=True),
    sa.Column('host_ip', sa.String(length=64), nullable=True),
    sa.Column('cpu_info', JSON_TEXT, nullable=True),
    sa.Column('supported_instances', JSON_TEXT, nullable=True),
    sa.Column('numa_topology', JSON_TEXT, nullable=True),
    sa.Column('stats', JSON_TEXT, nullable=True),
    sa.Column('metrics', JSON_TEXT, nullable=True),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('disabled_reason', sa.String(length=255), nullable=True),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('deleted', sa.Integer(), nullable=False),
    sa.Column('deleted_at', TIMESTAMP, nullable=True),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.Column('updated_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('hypervisor_hostname', 'deleted',
                        name='uniq_compute_nodes0hypervisor_hostname0deleted'),
    sa.UniqueConstraint('uuid')
    )
    with op.batch_alter_table('compute_nodes', schema=None) as batch_op:
        batch_op.create_index('compute_nodes_host_idx', ['host'], unique=False)
        batch_op.create_index('compute_nodes_updated_at_idx', ['updated_at'], unique=False)

    op.create_table('services',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('binary', sa.String(length=255), nullable=False),
    sa.Column('last_seen_up', TIMESTAMP, nullable=True),
    sa.Column('report_count', sa.Integer(), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('disabled_reason', sa.String(length=255), nullable=True),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.Column('updated_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('host', 'binary', name='uniq_services0host0binary')
    )
    with op.batch_alter_table('services', schema=None) as batch_op:
        batch_op.create_index('services_updated_at_idx', ['updated_at'], unique=False)

    op.create_table('aggregate_hosts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('aggregate_id', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['aggregate_id'], ['aggregates.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('aggregate_id', 'host', name='uniq_aggregate_hosts0aggregate_id0host')
    )
    with op.batch_alter_table('aggregate_hosts', schema=None) as batch_op:
        batch_op.create_index('aggregate_hosts_host_idx', ['host'], unique=False)

    op.create_table('aggregate_metadata',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('aggregate_id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('value', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['aggregate_id'], ['aggregates.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('aggregate_id', 'key', name='uniq_aggregate_metadata0aggregate_id0key')
    )
    op.create_table('allocations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('instance_uuid', sa.String(length=36), nullable=False),
    sa.Column('compute_node_id', sa.Integer(), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('memory_mb', sa.BigInteger(), nullable=False),
    sa.Column('disk_mb', sa.BigInteger(), nullable=False),
    sa.Column('numa_cells', JSON_TEXT, nullable=True),
    sa.Column('pci_devices', JSON_TEXT, nullable=True),
    sa.Column('project_id', sa.String(length=255), nullable=True),
    sa.Column('user_id', sa.String(length=255), nullable=True),
    sa.Column('instance_group', sa.String(length=36), nullable=True),
    sa.Column('request_spec', JSON_TEXT, nullable=True),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['compute_node_id'], ['compute_nodes.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('instance_uuid')
    )
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.create_index('allocations_compute_node_id_idx', ['compute_node_id'], unique=False)
        batch_op.create_index('allocations_instance_group_idx', ['instance_group'], unique=False)

    op.create_table('pci_devices',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('compute_node_id', sa.Integer(), nullable=False),
    sa.Column('address', sa.String(length=12), nullable=False),
    sa.Column('vendor_id', sa.String(length=4), nullable=False),
    sa.Column('product_id', sa.String(length=4), nullable=False),
    sa.Column('dev_type', sa.String(length=8), nullable=False),
    sa.Column('parent_addr', sa.String(length=12), nullable=True),
    sa.Column('numa_node', sa.Integer(), nullable=True),
    sa.Column('physical_network', sa.String(length=255), nullable=True),
    sa.Column('tags', JSON_TEXT, nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('instance_uuid', sa.String(length=36), nullable=True),
    sa.Column('request_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.Column('updated_at', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['compute_node_id'], ['compute_nodes.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('compute_node_id', 'address',
                        name='uniq_pci_devices0compute_node_id0address')
    )
    with op.batch_alter_table('pci_devices', schema=None) as batch_op:
        batch_op.create_index('pci_devices_instance_uuid_idx', ['instance_uuid'], unique=False)
        batch_op.create_index('pci_devices_node_pool_idx',
                              ['compute_node_id', 'status', 'vendor_id', 'product_id',
                               'dev_type', 'numa_node', 'physical_network'], unique=False)
        batch_op.create_index('pci_devices_pool_idx',
                              ['status', 'compute_node_id', 'vendor_id', 'product_id',
                               'dev_type', 'numa_node', 'physical_network'], unique=False)

