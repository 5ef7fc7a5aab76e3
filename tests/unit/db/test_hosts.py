"""Fleet import and host records: idempotent, never touching what was handed out."""
from __future__ import annotations

import copy
import json

import pytest
import sqlalchemy as sa

from db import aggregates as db_aggregates
from db import hosts as db_hosts
from db import models
from pci.pools import PoolKey
from scheduler import exception, fleet
from tests import ledger

DEFAULTS = {"cpu_allocation_ratio": 4.0, "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0}
NUMA = {"cells": [
    {"id": 0, "socket": 0, "cpuset": [0, 1], "pcpuset": [2, 3], "siblings": [[2, 3]],
     "memory_mb": 32768, "mempages": [{"size_kb": 4, "total": 8388608},
                                      {"size_kb": 2048, "total": 16}]},
    {"id": 1, "socket": 1, "cpuset": [4, 5], "pcpuset": [6, 7], "siblings": [[6, 7]],
     "memory_mb": 32768, "mempages": [{"size_kb": 4, "total": 8388608}]}]}
PF = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
      "dev_type": "type-PF", "numa_node": 0, "physical_network": "physnet1"}


def vf(n: int) -> dict:
    return {"address": f"0000:81:02.{n}", "vendor_id": "8086", "product_id": "154c",
            "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0,
            "physical_network": "physnet1"}


def fleet_data() -> dict:
    return {
        "hosts": [
            {"host": "compute-001", "vcpus": 8, "memory_mb": 65536, "local_gb": 500,
             "numa_topology": copy.deepcopy(NUMA),
             "pci_devices": [dict(PF), vf(0), vf(1)]},
            {"host": "compute-002", "vcpus": 16, "memory_mb": 131072, "local_gb": 1000,
             "stats": {"rack": "r1"}},
        ],
        "aggregates": [
            {"name": "az1", "availability_zone": "az1", "hosts": ["compute-001"]},
            {"name": "ssd", "hosts": ["compute-001", "compute-002"],
             "metadata": {"ssd": "true"}},
        ],
    }


def do_import(db, data=None) -> db_hosts.ImportResult:
    return db_hosts.import_fleet(db, fleet.load_fleet(data or fleet_data(), DEFAULTS))


def node_row(db, host: str) -> models.ComputeNode:
    with db.reader() as s:
        return s.scalars(sa.select(models.ComputeNode).where(
            models.ComputeNode.host == host, models.ComputeNode.deleted == 0)).one()


def devices(db, host: str) -> dict[str, tuple]:
    node = node_row(db, host)
    with db.reader() as s:
        rows = s.execute(sa.select(models.PciDevice.address, models.PciDevice.status,
                                   models.PciDevice.instance_uuid).where(
            models.PciDevice.compute_node_id == node.id))
        return {a: (st, i) for a, st, i in rows}


def place(db, host: str, instance_uuid: str, pin_cell: int | None = None,
          claim_vf: bool = False) -> None:
    """What a claim writes (``db.claims``): 2 VCPU, 2048 MB and 20 GB of the
    root provider, the NUMA usage of two pinned CPUs on ``pin_cell``, a VF."""
    node = node_row(db, host)
    record = {}
    if pin_cell is not None:
        topo = json.loads(node.numa_topology)
        cell = topo["cells"][pin_cell]
        cell["pinned_cpus"] = cell["pcpuset"][:2]
        cell["memory_usage"] = 2048
        cell["mempages"][-1]["used"] = 4
        record["numa_topology"] = json.dumps(topo)
    if claim_vf:
        record["pci_picks"] = (("req-1", PoolKey("8086", "154c", "type-VF", 0, "physnet1"), 1),)
    ledger.hold(db, node.id, instance_uuid, **record)


def snapshot(db) -> dict:
    """Every row of every table, to prove a failed import wrote nothing."""
    out = {}
    with db.reader() as s:
        for table in models.Base.metadata.sorted_tables:
            out[table.name] = sorted(tuple(map(str, r)) for r in s.execute(table.select()))
    return out


def test_import_creates_hosts_devices_and_aggregates_without_heartbeats(any_db):
    result = do_import(any_db)
    assert result.created == ["compute-001", "compute-002"]
    assert result.aggregates_created == ["az1", "ssd"]
    n1 = node_row(any_db, "compute-001")
    resources = db_hosts.get_host(any_db, "compute-001")["resources"]
    # 4 of its 8 CPUs are dedicated (pcpuset): PCPU; the other 4 VCPU
    assert {rc: (inv["total"], inv["allocation_ratio"]) for rc, inv in resources.items()} == {
        "VCPU": (4, 4.0), "PCPU": (4, 1.0), "MEMORY_MB": (65536, 1.0), "DISK_GB": (500, 1.0)}
    assert n1.hypervisor_hostname == "compute-001" and n1.generation == 0
    assert json.loads(n1.numa_topology)["cells"][1]["pcpuset"] == [6, 7]
    assert devices(any_db, "compute-001") == {a: ("available", None) for a in (
        "0000:81:00.0", "0000:81:02.0", "0000:81:02.1")}
    assert json.loads(node_row(any_db, "compute-002").stats) == {"rack": "r1"}
    with any_db.reader() as s:
        services = s.execute(sa.select(models.Service.host)).all()
    # Imported hosts are statically managed: no heartbeat is invented for them.
    assert services == []
    az1 = db_aggregates.get_aggregate(any_db, "az1")
    assert az1["availability_zone"] == "az1" and az1["hosts"] == ["compute-001"]


def test_reimport_unchanged_is_a_no_op(sqlite_db):
    do_import(sqlite_db)
    before = node_row(sqlite_db, "compute-001")
    result = do_import(sqlite_db)
    assert result.unchanged == ["compute-001", "compute-002"]
    assert result.aggregates_unchanged == ["az1", "ssd"] and not result.pci
    after = node_row(sqlite_db, "compute-001")
    assert (after.generation, after.updated_at) == (before.generation, before.updated_at)


def test_reimport_keeps_allocations_usage_numa_usage_and_claimed_devices(any_db):
    do_import(any_db)
    place(any_db, "compute-001", "inst-1", pin_cell=0, claim_vf=True)
    before = node_row(any_db, "compute-001")
    claimed = {a for a, (st, _i) in devices(any_db, "compute-001").items() if st == "claimed"}
    assert len(claimed) == 1

    data = fleet_data()
    host = data["hosts"][0]
    host.update(vcpus=12, memory_mb=98304, cpu_allocation_ratio=2.0)
    host["numa_topology"]["cells"][0]["memory_mb"] = 49152
    # The claimed VF is no longer reported: it is kept, not dropped.
    host["pci_devices"] = [d for d in host["pci_devices"] if d["address"] not in claimed]
    result = do_import(any_db, data)
    assert result.updated == ["compute-001"] and result.unchanged == ["compute-002"]
    assert any("kept" in w for w in result.warnings)

    after = node_row(any_db, "compute-001")
    resources = db_hosts.get_host(any_db, "compute-001")["resources"]
    assert {rc: (inv["total"], inv["allocation_ratio"], inv["used"])
            for rc, inv in resources.items()} == {
        "VCPU": (8, 2.0, 2), "PCPU": (4, 1.0, 0), "MEMORY_MB": (98304, 1.0, 2048),
        "DISK_GB": (500, 1.0, 20)}
    assert after.running_vms == 1
    assert after.generation > before.generation and after.updated_at > before.updated_at
    cell0 = json.loads(after.numa_topology)["cells"][0]
    assert cell0["memory_mb"] == 49152
    assert cell0["pinned_cpus"] == [2, 3] and cell0["memory_usage"] == 2048
    assert {p["size_kb"]: p["used"] for p in cell0["mempages"]}[2048] == 4
    with any_db.reader() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(models.Consumer)) == 1
    now = devices(any_db, "compute-001")
    assert now[next(iter(claimed))] == ("claimed", "inst-1")


def test_numa_layout_change_refused_while_in_use(sqlite_db):
    do_import(sqlite_db)
    place(sqlite_db, "compute-001", "inst-1", pin_cell=1)
    before = snapshot(sqlite_db)
    data = fleet_data()
    data["hosts"][0]["numa_topology"]["cells"][1]["pcpuset"] = [6]
    data["hosts"][0]["numa_topology"]["cells"][1]["siblings"] = []
    data["hosts"][1]["vcpus"] = 32  # would change too: the whole import rolls back
    with pytest.raises(exception.Conflict, match="compute-001: numa_topology: .*cell"):
        do_import(sqlite_db, data)
    assert snapshot(sqlite_db) == before


def test_numa_layout_change_without_usage_replaces_topology(sqlite_db):
    do_import(sqlite_db)
    data = fleet_data()
    data["hosts"][0]["numa_topology"]["cells"].pop()
    do_import(sqlite_db, data)
    assert len(json.loads(node_row(sqlite_db, "compute-001").numa_topology)["cells"]) == 1


def test_reimport_removes_free_devices_and_adds_new_ones(sqlite_db):
    do_import(sqlite_db)
    data = fleet_data()
    data["hosts"][0]["pci_devices"] = [dict(PF), vf(0), vf(2)]
    result = do_import(sqlite_db, data)
    assert "compute-001" in result.pci
    devs = devices(sqlite_db, "compute-001")
    assert devs["0000:81:02.1"][0] == "removed" and devs["0000:81:02.2"][0] == "available"


def test_import_zone_conflict_with_existing_aggregate_rolls_back(sqlite_db):
    do_import(sqlite_db)
    db_aggregates.create_aggregate(sqlite_db, "az2", availability_zone="az2",
                                   hosts=["compute-002"])
    before = snapshot(sqlite_db)
    data = fleet_data()
    data["hosts"][1]["vcpus"] = 64
    data["aggregates"][0]["hosts"].append("compute-002")
    with pytest.raises(exception.Conflict, match="compute-002 would be in more than one"):
        do_import(sqlite_db, data)
    assert snapshot(sqlite_db) == before


def test_import_moves_host_between_zones_in_one_file(sqlite_db):
    do_import(sqlite_db)
    data = fleet_data()
    data["aggregates"] = [{"name": "az2", "availability_zone": "az2",
                           "hosts": ["compute-001"]},
                          {"name": "az1", "availability_zone": "az1", "hosts": []}]
    do_import(sqlite_db, data)
    assert db_hosts.get_host(sqlite_db, "compute-001")["availability_zone"] == "az2"


def test_list_and_get_host(any_db):
    do_import(any_db)
    place(any_db, "compute-001", "inst-1", claim_vf=True)
    hosts = db_hosts.list_hosts(any_db)
    assert [h["host"] for h in hosts] == ["compute-001", "compute-002"]
    h1 = hosts[0]
    assert h1["local_gb_used"] == 20 and h1["vcpus_used"] == 2
    assert h1["free"] == {"vcpus": 14, "memory_mb": 63488, "local_gb": 480}
    assert h1["traits"] == ["HW_CPU_HYPERTHREADING"] and h1["providers"] == []
    assert h1["availability_zone"] == "az1" and h1["aggregates"] == ["az1", "ssd"]
    assert h1["allocations"] == 1
    assert h1["pci_devices"]["total"] == 3 and h1["pci_devices"]["available"] == 1
    assert hosts[1]["availability_zone"] is None
    full = db_hosts.get_host(any_db, "compute-001")
    assert full["numa_topology"]["cells"][0]["cpuset"] == [0, 1]
    assert full["last_seen_up"] is None       # never reported itself
    with pytest.raises(exception.NotFound, match="Host compute-404 not found"):
        db_hosts.get_host(any_db, "compute-404")


def test_delete_host_refused_with_allocations_unless_forced(any_db):
    do_import(any_db)
    place(any_db, "compute-001", "inst-1", claim_vf=True)
    with pytest.raises(exception.Conflict, match="1 allocation"):
        db_hosts.delete_host(any_db, "compute-001")
    node = node_row(any_db, "compute-001")
    result = db_hosts.delete_host(any_db, "compute-001", force=True)
    assert result["allocations_deleted"] == 1 and result["pci_devices_deleted"] == 3
    with any_db.reader() as s:
        row = s.get(models.ComputeNode, node.id)
        assert row.deleted == row.id and row.deleted_at is not None
        assert row.generation == node.generation + 1
        assert s.scalar(sa.select(sa.func.count()).select_from(models.Consumer)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(models.Allocation)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(
            models.ResourceProvider).where(
            models.ResourceProvider.compute_node_id == node.id)) == 0
    assert [h["host"] for h in db_hosts.list_hosts(any_db)] == ["compute-002"]
    assert db_aggregates.get_aggregate(any_db, "az1")["hosts"] == []
    # Importing it again makes a new node.
    do_import(any_db)
    assert node_row(any_db, "compute-001").id != node.id


def test_delete_host_without_allocations(sqlite_db):
    do_import(sqlite_db)
    db_hosts.delete_host(sqlite_db, "compute-002")
    with pytest.raises(exception.NotFound):
        db_hosts.delete_host(sqlite_db, "compute-002")


def test_upsert_host_without_devices_leaves_them_and_heartbeats(sqlite_db):
    do_import(sqlite_db)
    before = devices(sqlite_db, "compute-001")
    rec = fleet.parse_host({"host": "compute-001", "vcpus": 8, "memory_mb": 65536,
                            "local_gb": 500, "numa_topology": copy.deepcopy(NUMA),
                            "disabled": True, "disabled_reason": "maintenance"},
                           defaults=DEFAULTS)
    with sqlite_db.writer() as s:
        node_id = db_hosts.upsert_host(s, rec)
    assert node_id == node_row(sqlite_db, "compute-001").id
    assert node_row(sqlite_db, "compute-001").disabled
    assert devices(sqlite_db, "compute-001") == before
    with sqlite_db.reader() as s:
        count = s.scalar(sa.select(models.Service.report_count).where(
            models.Service.host == "compute-001"))
    assert count == 1      # the first heartbeat: import sends none


def test_heartbeat(sqlite_db):
    do_import(sqlite_db)
    assert db_hosts.get_host(sqlite_db, "compute-002")["last_seen_up"] is None
    db_hosts.heartbeat(sqlite_db, "compute-002")
    seen = db_hosts.get_host(sqlite_db, "compute-002")["last_seen_up"]
    assert seen is not None
    db_hosts.heartbeat(sqlite_db, "compute-002")
    assert db_hosts.get_host(sqlite_db, "compute-002")["last_seen_up"] > seen
    with pytest.raises(exception.NotFound):
        db_hosts.heartbeat(sqlite_db, "compute-404")
