"""the resource ledger: providers (with their traits), inventories, consumers, allocations

A node's fixed counters become inventories of its root provider (same uuid and
name as the node); an allocation row per instance becomes a consumer with one
allocations row per resource class. Figures are carried over exactly:

* VCPU: ``vcpus`` minus the CPUs the node's NUMA topology dedicates (its
  pcpusets), with ``reserved_host_cpus`` and the CPU ratio; PCPU: those
  dedicated CPUs, ratio 1. MEMORY_MB and DISK_GB from ``memory_mb`` and
  ``local_gb`` (reserved disk rounded up to whole GB). ``max_unit`` is the total.
* An instance's allocation: PCPU for every host CPU its fitted NUMA cells pin
  (vCPUs, an isolated emulator thread, idle siblings), VCPU for its other
  vCPUs, MEMORY_MB, and DISK_GB rounded up to whole GB.
* ``used`` of each inventory is the sum of the allocations against it. An
  allocation of a class the node now has no inventory of (e.g. disk on a node
  with ``local_gb: 0``) keeps an inventory of total 0, so that nothing is lost
  and the node shows as over capacity.

This mapping is written out here as it stood when the ledger was introduced, so
that later changes to the product's rules cannot change what an old database
becomes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 21:00:00
"""
import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mariadb").with_variant(
    mysql.DATETIME(fsp=6), "mysql")
JSON_TEXT = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mariadb").with_variant(
    mysql.MEDIUMTEXT(), "mysql")

_NODE_COLUMNS = ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used",
                 "disk_mb_used", "cpu_allocation_ratio", "ram_allocation_ratio",
                 "disk_allocation_ratio", "reserved_host_memory_mb", "reserved_host_disk_mb",
                 "reserved_host_cpus")


def _gb(mb: int) -> int:
    return -(-int(mb) // 1024)


def _dedicated_cpus(topology_text) -> int:
    try:
        cells = (json.loads(topology_text) or {}).get("cells") or [] if topology_text else []
    except (ValueError, AttributeError):
        return 0
    return sum(len(cell.get("pcpuset") or []) for cell in cells if isinstance(cell, dict))


def _node_inventories(node) -> dict:
    dedicated = min(_dedicated_cpus(node["numa_topology"]), node["vcpus"])
    out = {}

    def put(rc, total, reserved, ratio):
        if total > 0:
            out[rc] = {"total": total, "reserved": min(reserved, total), "min_unit": 1,
                       "max_unit": total, "step_size": 1, "allocation_ratio": ratio}

    put("VCPU", max(0, node["vcpus"] - dedicated), node["reserved_host_cpus"] or 0,
        node["cpu_allocation_ratio"])
    put("PCPU", dedicated, 0, 1.0)
    put("MEMORY_MB", node["memory_mb"], node["reserved_host_memory_mb"] or 0,
        node["ram_allocation_ratio"])
    put("DISK_GB", node["local_gb"], _gb(node["reserved_host_disk_mb"] or 0),
        node["disk_allocation_ratio"])
    return out


def _traits(node) -> str:
    """The traits an upgraded node starts with: its CPU flags that name a
    standard trait (as the next report or import would derive them) and
    HW_CPU_HYPERTHREADING when its NUMA cells list SMT siblings."""
    out = set()
    try:
        info = json.loads(node["cpu_info"]) if node["cpu_info"] else {}
        topology = json.loads(node["numa_topology"]) if node["numa_topology"] else {}
    except ValueError:
        return ""
    try:
        import os_traits
        known = set(os_traits.get_traits())
    except ImportError:
        known = set()
    arch = str((info or {}).get("arch") or "x86_64").lower()
    prefix = {"aarch64": "HW_CPU_AARCH64_"}.get(arch, "HW_CPU_X86_")
    for flag in (info or {}).get("features") or ():
        if isinstance(flag, str):
            name = flag.strip().upper().replace("-", "_").replace(".", "_")
            for candidate in (prefix + name, prefix + name.replace("_", "")):
                if candidate in known:
                    out.add(candidate)
                    break
    for cell in (topology or {}).get("cells") or ():
        if any(len(core) > 1 for core in cell.get("siblings") or ()):
            out.add("HW_CPU_HYPERTHREADING")
    return " ".join(sorted(out))


def _pinned(numa_cells_text) -> tuple[int, int]:
    """(guest vCPUs pinned, host CPUs pinned) by a fitted topology."""
    if not numa_cells_text:
        return 0, 0
    try:
        cells = (json.loads(numa_cells_text) or {}).get("cells") or []
    except (ValueError, AttributeError):
        return 0, 0
    guest = host = 0
    for cell in cells:
        pinning = cell.get("cpu_pinning") or {}
        guest += len(pinning)
        host += len(set(pinning.values()) | set(cell.get("cpuset_reserved") or [])
                    | set(cell.get("cpuset_isolated") or []))
    return guest, host


def _amounts(alloc) -> dict:
    guest_pinned, host_pinned = _pinned(alloc["numa_cells"])
    out = {"VCPU": max(0, alloc["vcpus"] - guest_pinned), "PCPU": host_pinned,
           "MEMORY_MB": alloc["memory_mb"], "DISK_GB": _gb(alloc["disk_mb"])}
    return {rc: n for rc, n in out.items() if n > 0}


def upgrade() -> None:
    op.create_table(
        'resource_providers',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=255), nullable=False),
        sa.Column('compute_node_id', sa.Integer(), nullable=False),
        sa.Column('parent_id', sa.Integer(), nullable=True),
        sa.Column('traits', JSON_TEXT, nullable=False),
        sa.Column('created_at', TIMESTAMP, nullable=False),
        sa.Column('updated_at', TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(['compute_node_id'], ['compute_nodes.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['parent_id'], ['resource_providers.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid'),
        sa.UniqueConstraint('compute_node_id', 'name',
                            name='uniq_resource_providers0compute_node_id0name'))
    op.create_table(
        'inventories',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('provider_id', sa.Integer(), nullable=False),
        sa.Column('resource_class', sa.String(length=255), nullable=False),
        sa.Column('total', sa.BigInteger(), nullable=False),
        sa.Column('reserved', sa.BigInteger(), nullable=False),
        sa.Column('min_unit', sa.BigInteger(), nullable=False),
        sa.Column('max_unit', sa.BigInteger(), nullable=False),
        sa.Column('step_size', sa.BigInteger(), nullable=False),
        sa.Column('allocation_ratio', sa.Float(), nullable=False),
        sa.Column('used', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['provider_id'], ['resource_providers.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('provider_id', 'resource_class',
                            name='uniq_inventories0provider_id0resource_class'))
    op.create_table(
        'consumers',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('uuid', sa.String(length=36), nullable=False),
        sa.Column('consumer_type', sa.String(length=16), server_default='instance',
                  nullable=False),
        sa.Column('instance_uuid', sa.String(length=36), nullable=False),
        sa.Column('compute_node_id', sa.Integer(), nullable=False),
        sa.Column('numa_cells', JSON_TEXT, nullable=True),
        sa.Column('pci_devices', JSON_TEXT, nullable=True),
        sa.Column('project_id', sa.String(length=255), nullable=True),
        sa.Column('user_id', sa.String(length=255), nullable=True),
        sa.Column('instance_group', sa.String(length=36), nullable=True),
        sa.Column('request_spec', JSON_TEXT, nullable=True),
        sa.Column('request_spec_id', sa.Integer(), nullable=True),
        sa.Column('pending', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('created_at', TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(['compute_node_id'], ['compute_nodes.id']),
        sa.ForeignKeyConstraint(['request_spec_id'], ['request_specs.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('uuid'))
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.create_index('consumers_compute_node_id_idx', ['compute_node_id'])
        batch_op.create_index('consumers_instance_group_idx', ['instance_group'])
        batch_op.create_index('consumers_instance_uuid_idx', ['instance_uuid'])
        batch_op.create_index('consumers_pending_idx', ['pending', 'created_at'])
        batch_op.create_index('ix_consumers_request_spec_id', ['request_spec_id'])

    bind = op.get_bind()
    meta = sa.MetaData()
    nodes = sa.Table('compute_nodes', meta, autoload_with=bind)
    old = sa.Table('allocations', meta, autoload_with=bind)
    providers = sa.Table('resource_providers', meta, autoload_with=bind)
    inventories = sa.Table('inventories', meta, autoload_with=bind)
    consumers = sa.Table('consumers', meta, autoload_with=bind)

    # Root providers and their inventories.
    root_of = {}
    node_inv = {}
    for node in bind.execute(sa.select(nodes).where(nodes.c.deleted == 0)).mappings():
        result = bind.execute(providers.insert().values(
            uuid=node["uuid"], name=node["hypervisor_hostname"], compute_node_id=node["id"],
            parent_id=None, traits=_traits(node), created_at=node["created_at"],
            updated_at=node["updated_at"]))
        root_of[node["id"]] = result.inserted_primary_key[0]
        node_inv[node["id"]] = _node_inventories(node)

    # Consumers, keeping the allocation rows' ids; their amounts by class.
    amounts = []
    used = {}
    rows = bind.execute(sa.select(old)).mappings().all()
    for alloc in rows:
        bind.execute(consumers.insert().values(
            id=alloc["id"], uuid=alloc["instance_uuid"], consumer_type="instance",
            instance_uuid=alloc["instance_uuid"], compute_node_id=alloc["compute_node_id"],
            numa_cells=alloc["numa_cells"], pci_devices=alloc["pci_devices"],
            project_id=alloc["project_id"], user_id=alloc["user_id"],
            instance_group=alloc["instance_group"], request_spec=alloc["request_spec"],
            request_spec_id=alloc["request_spec_id"], pending=alloc["pending"],
            created_at=alloc["created_at"]))
        node_id = alloc["compute_node_id"]
        for rc, amount in _amounts(alloc).items():
            amounts.append((alloc["id"], node_id, rc, amount))
            used[(node_id, rc)] = used.get((node_id, rc), 0) + amount

    for node_id, invs in node_inv.items():
        for held_node, rc in used:
            if held_node == node_id and rc not in invs:
                invs[rc] = {"total": 0, "reserved": 0, "min_unit": 1, "max_unit": 1,
                               "step_size": 1, "allocation_ratio": 1.0}
        rows_in = [dict(inv, provider_id=root_of[node_id], resource_class=rc,
                        used=used.get((node_id, rc), 0)) for rc, inv in invs.items()]
        if rows_in:
            bind.execute(inventories.insert(), rows_in)

    op.drop_table('allocations')
    op.create_table(
        'allocations',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('consumer_id', sa.Integer(), nullable=False),
        sa.Column('provider_id', sa.Integer(), nullable=False),
        sa.Column('resource_class', sa.String(length=255), nullable=False),
        sa.Column('amount', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['consumer_id'], ['consumers.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['provider_id'], ['resource_providers.id']),
        sa.PrimaryKeyConstraint('id'))
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.create_index('allocations_consumer_id_idx', ['consumer_id'])
        batch_op.create_index('allocations_provider_id_idx', ['provider_id', 'resource_class'])
    new = sa.Table('allocations', sa.MetaData(), autoload_with=bind)
    if amounts:
        bind.execute(new.insert(), [
            {"consumer_id": cid, "provider_id": root_of[node_id], "resource_class": rc,
             "amount": amount} for cid, node_id, rc, amount in amounts
            if node_id in root_of])

    with op.batch_alter_table('compute_nodes', schema=None) as batch_op:
        for column in _NODE_COLUMNS:
            batch_op.drop_column(column)


def downgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table('compute_nodes', schema=None) as batch_op:
        for column in ("vcpus", "vcpus_used", "reserved_host_memory_mb",
                       "reserved_host_disk_mb", "reserved_host_cpus"):
            batch_op.add_column(sa.Column(column, sa.Integer(), nullable=False,
                                          server_default="0"))
        for column in ("memory_mb", "local_gb", "memory_mb_used", "disk_mb_used"):
            batch_op.add_column(sa.Column(column, sa.BigInteger(), nullable=False,
                                          server_default="0"))
        for column in ("cpu_allocation_ratio", "ram_allocation_ratio",
                       "disk_allocation_ratio"):
            batch_op.add_column(sa.Column(column, sa.Float(), nullable=False,
                                          server_default="1.0"))
    meta = sa.MetaData()
    nodes = sa.Table('compute_nodes', meta, autoload_with=bind)
    providers = sa.Table('resource_providers', meta, autoload_with=bind)
    inventories = sa.Table('inventories', meta, autoload_with=bind)
    consumers = sa.Table('consumers', meta, autoload_with=bind)
    allocations = sa.Table('allocations', meta, autoload_with=bind)
    root_invs: dict = {}
    for row in bind.execute(sa.select(providers.c.compute_node_id, inventories)
                            .join(inventories, inventories.c.provider_id == providers.c.id)
                            .where(providers.c.parent_id.is_(None))).mappings():
        root_invs.setdefault(row["compute_node_id"], {})[row["resource_class"]] = row
    for node_id, invs in root_invs.items():
        vcpu, pcpu = invs.get("VCPU"), invs.get("PCPU")
        mem, disk = invs.get("MEMORY_MB"), invs.get("DISK_GB")
        values = {
            "vcpus": (vcpu["total"] if vcpu else 0) + (pcpu["total"] if pcpu else 0),
            "vcpus_used": (vcpu["used"] if vcpu else 0) + (pcpu["used"] if pcpu else 0),
            "reserved_host_cpus": vcpu["reserved"] if vcpu else 0,
            "cpu_allocation_ratio": vcpu["allocation_ratio"] if vcpu else 1.0,
            "memory_mb": mem["total"] if mem else 0,
            "memory_mb_used": mem["used"] if mem else 0,
            "reserved_host_memory_mb": mem["reserved"] if mem else 0,
            "ram_allocation_ratio": mem["allocation_ratio"] if mem else 1.0,
            "local_gb": disk["total"] if disk else 0,
            "disk_mb_used": (disk["used"] if disk else 0) * 1024,
            "reserved_host_disk_mb": (disk["reserved"] if disk else 0) * 1024,
            "disk_allocation_ratio": disk["allocation_ratio"] if disk else 1.0,
        }
        bind.execute(nodes.update().where(nodes.c.id == node_id).values(**values))
    per_consumer: dict = {}
    for cid, rc, amount in bind.execute(sa.select(allocations.c.consumer_id,
                                                  allocations.c.resource_class,
                                                  allocations.c.amount)):
        per_consumer.setdefault(cid, {}).setdefault(rc, 0)
        per_consumer[cid][rc] += amount
    old_rows = []
    for row in bind.execute(sa.select(consumers).where(
            consumers.c.consumer_type == "instance")).mappings():
        amounts = per_consumer.get(row["id"], {})
        old_rows.append({
            "id": row["id"], "instance_uuid": row["uuid"],
            "compute_node_id": row["compute_node_id"],
            "vcpus": amounts.get("VCPU", 0) + amounts.get("PCPU", 0),
            "memory_mb": amounts.get("MEMORY_MB", 0),
            "disk_mb": amounts.get("DISK_GB", 0) * 1024,
            "numa_cells": row["numa_cells"], "pci_devices": row["pci_devices"],
            "project_id": row["project_id"], "user_id": row["user_id"],
            "instance_group": row["instance_group"], "request_spec": row["request_spec"],
            "request_spec_id": row["request_spec_id"], "pending": row["pending"],
            "created_at": row["created_at"]})
    op.drop_table('allocations')
    op.drop_table('consumers')
    op.drop_table('inventories')
    op.drop_table('resource_providers')
    op.create_table(
        'allocations',
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
        sa.Column('request_spec_id', sa.Integer(), nullable=True),
        sa.Column('pending', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(['compute_node_id'], ['compute_nodes.id']),
        sa.ForeignKeyConstraint(['request_spec_id'], ['request_specs.id'],
                                name='allocations_request_spec_id_fkey'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('instance_uuid'))
    with op.batch_alter_table('allocations', schema=None) as batch_op:
        batch_op.create_index('allocations_compute_node_id_idx', ['compute_node_id'])
        batch_op.create_index('allocations_instance_group_idx', ['instance_group'])
        batch_op.create_index('allocations_pending_idx', ['pending', 'created_at'])
        batch_op.create_index('ix_allocations_request_spec_id', ['request_spec_id'])
    if old_rows:
        table = sa.Table('allocations', sa.MetaData(), autoload_with=bind)
        bind.execute(table.insert(), old_rows)
