"""Upgrading a database made before the ledger keeps every allocation and every
usage figure, on SQLite and on MariaDB."""
from __future__ import annotations

import datetime
import json

import sqlalchemy as sa

from db import invariants, migration
from scheduler.filter_scheduler import group_key

NOW = datetime.datetime(2026, 12, 1, 12, 0, 0)

# A NUMA host as the old code stored it: 2 cells, 4 shared + 4 dedicated CPUs
# each, one pinned guest (cell 0) and one mixed guest with an isolated emulator
# thread (cell 1), both with their usage in the topology.
TOPOLOGY = {"cells": [
    {"id": 0, "socket": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [4, 5, 6, 7],
     "siblings": [[4, 5], [6, 7]], "memory_mb": 16384, "mempages": [
         {"size_kb": 4, "total": 4194304, "used": 1048576, "reserved": 0}],
     "cpu_usage": 0, "memory_usage": 4096, "pinned_cpus": [4, 5]},
    {"id": 1, "socket": 1, "cpuset": [8, 9, 10, 11], "pcpuset": [12, 13, 14, 15],
     "siblings": [], "memory_mb": 16384, "mempages": [
         {"size_kb": 4, "total": 4194304, "used": 524288, "reserved": 0}],
     "cpu_usage": 1, "memory_usage": 2048, "pinned_cpus": [12, 13, 14]}]}
PINNED = {"cells": [{"id": 0, "host_cell_id": 0, "cpu_pinning": {"0": 4, "1": 5},
                     "pagesize_kb": 4, "cpuset_reserved": [], "memory_mb": 4096,
                     "shared_cpus": 0, "cpuset_isolated": []}],
          "emulator_threads_policy": None}
MIXED = {"cells": [{"id": 0, "host_cell_id": 1, "cpu_pinning": {"1": 12, "2": 13},
                    "pagesize_kb": 4, "cpuset_reserved": [14], "memory_mb": 2048,
                    "shared_cpus": 1, "cpuset_isolated": []}],
         "emulator_threads_policy": "isolate"}


def _node(node_id, name, **kw):
    row = {"id": node_id, "uuid": f"00000000-0000-0000-0000-00000000000{node_id}",
           "host": name, "hypervisor_hostname": name, "vcpus": 16, "memory_mb": 32768,
           "local_gb": 100, "vcpus_used": 0, "memory_mb_used": 0, "disk_mb_used": 0,
           "running_vms": 0, "current_workload": 0, "failed_builds": 0,
           "cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
           "disk_allocation_ratio": 1.0, "reserved_host_memory_mb": 512,
           "reserved_host_disk_mb": 1536, "reserved_host_cpus": 1,
           "hypervisor_type": "QEMU", "hypervisor_version": 8002000, "host_ip": None,
           "cpu_info": json.dumps({"arch": "x86_64", "features": ["avx2", "sse4_2"]}),
           "supported_instances": None, "numa_topology": None, "stats": None,
           "metrics": None, "disabled": False, "disabled_reason": None, "generation": 3,
           "deleted": 0, "deleted_at": None, "created_at": NOW, "updated_at": NOW}
    row.update(kw)
    return row


def _alloc(alloc_id, uuid, node_id, vcpus, memory_mb, disk_mb, **kw):
    row = {"id": alloc_id, "instance_uuid": uuid, "compute_node_id": node_id,
           "vcpus": vcpus, "memory_mb": memory_mb, "disk_mb": disk_mb, "numa_cells": None,
           "pci_devices": None, "project_id": "p1", "user_id": "u1", "instance_group": None,
           "request_spec": None, "request_spec_id": None, "pending": False,
           "created_at": NOW}
    row.update(kw)
    return row


def test_upgrade_keeps_every_allocation_and_usage(any_db):
    # an empty database at the last revision before the ledger, filled the old way
    with any_db.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
    _reset(any_db)
    migration.db_sync(any_db, "0005")
    meta = sa.MetaData()
    with any_db.engine.begin() as conn:
        meta.reflect(conn)
        nodes, allocs, specs = (meta.tables[t] for t in
                                ("compute_nodes", "allocations", "request_specs"))
        devices = meta.tables["pci_devices"]
        conn.execute(specs.insert(), [{"id": 1, "spec": "{}", "created_at": NOW}])
        conn.execute(nodes.insert(), [
            _node(1, "plain", vcpus_used=6, memory_mb_used=6144, disk_mb_used=20480 + 1500,
                  running_vms=2),
            _node(2, "numa", vcpus=32, vcpus_used=5, memory_mb_used=6144,
                  disk_mb_used=40960, running_vms=2, numa_topology=json.dumps(TOPOLOGY)),
            _node(3, "nodisk", local_gb=0, reserved_host_disk_mb=0, vcpus_used=1,
                  memory_mb_used=512, disk_mb_used=1024, running_vms=1)])
        conn.execute(allocs.insert(), [
            _alloc(1, "inst-plain-1", 1, 4, 4096, 20480, request_spec_id=1),
            _alloc(2, "inst-plain-2", 1, 2, 2048, 1500, pending=True,
                   pci_devices=json.dumps(["0000:81:00.1"])),
            _alloc(3, "inst-pinned", 2, 2, 4096, 20480, numa_cells=json.dumps(PINNED)),
            _alloc(4, "inst-mixed", 2, 3, 2048, 20480, numa_cells=json.dumps(MIXED),
                   instance_group="g1"),
            _alloc(5, "inst-nodisk", 3, 1, 512, 1024, project_id=None, instance_group="g1")])
        conn.execute(devices.insert(), [{
            "id": 1, "compute_node_id": 1, "address": "0000:81:00.1", "vendor_id": "8086",
            "product_id": "154c", "dev_type": "type-VF", "parent_addr": None,
            "numa_node": 0, "physical_network": "physnet1", "tags": None,
            "status": "claimed", "instance_uuid": "inst-plain-2", "request_id": None,
            "created_at": NOW, "updated_at": NOW}])

    migration.db_sync(any_db)
    assert migration.db_version(any_db) == migration.head_revision()

    meta = sa.MetaData()
    with any_db.engine.connect() as conn:
        meta.reflect(conn)
        rp, inv, cons, alloc = (meta.tables[t] for t in
                                ("resource_providers", "inventories", "consumers",
                                 "allocations"))
        roots = {r.compute_node_id: r for r in conn.execute(sa.select(rp))}
        assert {n: (r.uuid, r.name, r.parent_id) for n, r in roots.items()} == {
            1: ("00000000-0000-0000-0000-000000000001", "plain", None),
            2: ("00000000-0000-0000-0000-000000000002", "numa", None),
            3: ("00000000-0000-0000-0000-000000000003", "nodisk", None)}
        assert roots[1].traits == "HW_CPU_X86_AVX2 HW_CPU_X86_SSE42"
        assert "HW_CPU_HYPERTHREADING" in roots[2].traits.split()
        invs = {(r.provider_id, r.resource_class): r for r in conn.execute(sa.select(inv))}

        def have(node, rc):
            row = invs[(roots[node].id, rc)]
            return (row.total, row.reserved, row.max_unit, row.allocation_ratio, row.used)

        # the plain node: its fields as classes, usage the sum of its allocations
        assert have(1, "VCPU") == (16, 1, 16, 4.0, 6)
        assert have(1, "MEMORY_MB") == (32768, 512, 32768, 1.0, 6144)
        assert have(1, "DISK_GB") == (100, 2, 100, 1.0, 20 + 2)     # 1500 MB -> 2 GB
        assert (roots[1].id, "PCPU") not in invs
        # the NUMA node: 8 dedicated CPUs are PCPU; pinned guests hold PCPU
        assert have(2, "VCPU") == (24, 1, 24, 4.0, 1)       # the mixed guest's shared vCPU
        assert have(2, "PCPU") == (8, 0, 8, 1.0, 2 + 3)     # 2 pinned + 2 pinned & emulator
        assert have(2, "MEMORY_MB")[4] == 6144
        # a node without disk keeps its disk allocation on an inventory of total 0
        assert have(3, "DISK_GB") == (0, 0, 1, 1.0, 1)

        consumers = {r.uuid: r for r in conn.execute(sa.select(cons))}
        assert set(consumers) == {"inst-plain-1", "inst-plain-2", "inst-pinned", "inst-mixed",
                                  "inst-nodisk"}
        assert consumers["inst-plain-2"].pending
        assert consumers["inst-plain-1"].request_spec_id == 1
        # group members are keyed by project and group (0008): the same group
        # UUID named without a project is another group
        assert consumers["inst-mixed"].instance_group == group_key("p1", "g1")
        assert consumers["inst-nodisk"].instance_group == group_key(None, "g1")
        assert consumers["inst-plain-1"].instance_group is None
        assert json.loads(consumers["inst-pinned"].numa_cells) == PINNED
        assert json.loads(consumers["inst-plain-2"].pci_devices) == ["0000:81:00.1"]
        assert all(c.consumer_type == "instance" and c.instance_uuid == c.uuid
                   for c in consumers.values())
        held: dict[str, dict[str, int]] = {}
        for row in conn.execute(sa.select(alloc)):
            uuid = next(u for u, c in consumers.items() if c.id == row.consumer_id)
            held.setdefault(uuid, {})[row.resource_class] = row.amount
        assert held == {
            "inst-plain-1": {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 20},
            "inst-plain-2": {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 2},
            "inst-pinned": {"PCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20},
            "inst-mixed": {"VCPU": 1, "PCPU": 3, "MEMORY_MB": 2048, "DISK_GB": 20},
            "inst-nodisk": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}
        # every usage figure is the sum of its allocations, NUMA included; only
        # the node without disk is over (it has no disk to hold its allocation)
        assert invariants.check(conn) == ["nodisk: DISK_GB used 1 > limit 0.0"]


def _reset(db) -> None:
    """Drop every table (the fixture migrated to head)."""
    meta = sa.MetaData()
    with db.engine.connect() as conn:
        meta.reflect(conn)
    raw = db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if db.dialect == "sqlite":
            raw.driver_connection.isolation_level = None    # PRAGMA outside a transaction
            cursor.execute("PRAGMA foreign_keys = OFF")
        else:
            cursor.execute("SET foreign_key_checks = 0")
        for table in meta.tables:
            cursor.execute(f"DROP TABLE {table}")
        raw.commit()
    finally:
        raw.close()
    db.dispose()
