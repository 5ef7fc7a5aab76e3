"""Seeded benchmark fleets and a fast bulk loader (issue 7).

``generate_fleet(n, seed)`` builds every row of an ``n``-host fleet in memory:
compute nodes with a realistic spread of sizes and allocation ratios, two
availability zones and a few aggregates with metadata, a NUMA topology (2 cells,
shared + dedicated CPUs with siblings, 2 MiB and 1 GiB pages) on half the hosts,
20 PCI devices (2 PFs with 9 VFs each, one per cell, on physnets) on a fifth,
and some existing usage backed by allocation rows, so that usage equals the sum
of allocations as everywhere else in Berth. The same seed gives the same rows.

``load_fleet(db, fleet)`` writes them with SQLAlchemy Core ``executemany``:
the ORM fleet import is far too slow for 100,000 hosts. Every host gets a
heartbeat at load time (ComputeFilter treats a host without one as down), so a
benchmark raises ``service_down_time`` rather than keep heartbeats fresh.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa

from db import migration, models
from db.api import Database
from numa import fitting, request, usage
from numa.topology import HostTopology

COMPUTE_BINARY = "berth-compute"
MYSQL_URL = os.environ.get("BERTH_BENCH_MYSQL_URL", "mysql+pymysql://root:@127.0.0.1:3306")

VCPUS = (32, 48, 64, 96, 128)
MEMORY_GB = (128, 256, 384, 512, 768, 1024)
DISK_GB = (1000, 2000, 4000, 8000)
CPU_RATIOS = (1.0, 2.0, 4.0, 8.0, 16.0)
RAM_RATIOS = (1.0, 1.0, 1.2, 1.5)
HYPERVISOR_VERSIONS = (6002000, 7002000, 8002000)
AZS = ("az1", "az2")

PF_PRODUCT, VF_PRODUCT, VENDOR = "1572", "154c", "8086"
PCI_BUSES = ("3b", "86")           # one NIC per NUMA cell
VFS_PER_PF = 9
PHYSNETS = ("physnet1", "physnet2")

# Existing instances: (vcpus, memory_mb, disk_mb); big enough that a 100k-host
# fleet stays at a few allocation rows per host.
EXISTING_FLAVORS = ((4, 16384, 81920), (8, 32768, 163840), (16, 65536, 163840),
                    (32, 131072, 327680))
# The existing pinned instance on some NUMA hosts (and its VF on PCI hosts).
PINNED_FLAVOR = (4, 8192, 40960)
PINNED_SPECS = {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}

_cn = models.ComputeNode.__table__
_svc = models.Service.__table__
_pci = models.PciDevice.__table__
_alloc = models.Allocation.__table__
_agg = models.Aggregate.__table__
_agg_hosts = models.AggregateHost.__table__
_agg_meta = models.AggregateMetadata.__table__


@dataclasses.dataclass
class BenchFleet:
    """Every row of a generated fleet, ready for ``executemany`` (ids assigned)."""

    size: int
    seed: int
    nodes: list[dict[str, Any]]
    pci_devices: list[dict[str, Any]]
    allocations: list[dict[str, Any]]
    aggregates: list[dict[str, Any]]
    aggregate_hosts: list[dict[str, Any]]
    aggregate_metadata: list[dict[str, Any]]

    def counts(self) -> dict[str, int]:
        """Rows per kind, plus the NUMA and PCI host counts."""
        return {"hosts": len(self.nodes),
                "numa_hosts": sum(1 for n in self.nodes if n["numa_topology"]),
                "pci_hosts": len({d["compute_node_id"] for d in self.pci_devices}),
                "pci_devices": len(self.pci_devices),
                "pci_available": sum(1 for d in self.pci_devices
                                     if d["status"] == "available"),
                "allocations": len(self.allocations),
                "aggregates": len(self.aggregates),
                "aggregate_hosts": len(self.aggregate_hosts)}


def _uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


def host_topology(vcpus: int, memory_mb: int) -> dict[str, Any]:
    """Two cells; per cell half the threads shared, half dedicated (sibling pairs);
    1/8 of the memory in 2 MiB pages, 1/8 in 1 GiB pages, the rest in 4 KiB pages."""
    per_cell = vcpus // 2
    cell_mb = memory_mb // 2
    cells = []
    for cid in range(2):
        first = cid * per_cell
        shared = list(range(first, first + per_cell // 2))
        dedicated = list(range(first + per_cell // 2, first + per_cell))
        huge_2m = cell_mb // 8 // 2
        huge_1g = cell_mb // 8 // 1024
        small = (cell_mb - huge_2m * 2 - huge_1g * 1024) * 256
        cells.append({
            "id": cid, "socket": cid, "cpuset": shared, "pcpuset": dedicated,
            "siblings": [dedicated[i:i + 2] for i in range(0, len(dedicated), 2)],
            "memory_mb": cell_mb,
            "mempages": [{"size_kb": 4, "total": small, "used": 0, "reserved": 0},
                         {"size_kb": 2048, "total": huge_2m, "used": 0, "reserved": 0},
                         {"size_kb": 1048576, "total": huge_1g, "used": 0, "reserved": 0}],
            "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": []})
    return {"cells": cells}


_CPU_INFO = json.dumps({"arch": "x86_64", "vendor": "Intel", "features": ["avx2", "sse4_2"]})
_SUPPORTED = json.dumps([["x86_64", "kvm", "hvm"]])
_TOPOLOGY_CACHE: dict[tuple[int, int], dict] = {}
_TOPOLOGY_JSON_CACHE: dict[tuple[int, int, bool], str] = {}


def _fresh_topology(vcpus: int, memory_mb: int) -> dict[str, Any]:
    key = (vcpus, memory_mb)
    if key not in _TOPOLOGY_CACHE:
        _TOPOLOGY_CACHE[key] = host_topology(vcpus, memory_mb)
    return _TOPOLOGY_CACHE[key]


def _topology_json(vcpus: int, memory_mb: int, pinned: bool, topo: dict) -> str:
    key = (vcpus, memory_mb, pinned)
    if key not in _TOPOLOGY_JSON_CACHE:
        _TOPOLOGY_JSON_CACHE[key] = json.dumps(topo, sort_keys=True)
    return _TOPOLOGY_JSON_CACHE[key]


_PINNED_FIT_CACHE: dict[tuple[int, int], tuple[dict, dict]] = {}


def _pinned_usage(vcpus: int, memory_mb: int, topo: dict) -> tuple[dict, dict]:
    """(host topology with the pinned instance applied, fitted cells) — the same
    for every fresh host of one size, so computed once per size."""
    key = (vcpus, memory_mb)
    hit = _PINNED_FIT_CACHE.get(key)
    if hit is None:
        host = HostTopology.from_primitive(topo)
        guest = request.instance_topology_from_specs(PINNED_FLAVOR[0], PINNED_FLAVOR[1],
                                                     PINNED_SPECS, {})
        fitted = fitting.fit_instance_to_host(host, guest).fitted
        if fitted is None:
            raise RuntimeError(f"pinned flavor does not fit a fresh {key} host")
        hit = (usage.apply_usage(host, fitted).to_primitive(), fitted.to_primitive())
        _PINNED_FIT_CACHE[key] = hit
    return hit


def _pci_devices(node_id: int) -> list[dict[str, Any]]:
    """2 PFs (one per cell) with 9 VFs each, VFs on the PF's physnet."""
    rows = []
    for cell, bus in enumerate(PCI_BUSES):
        pf = f"0000:{bus}:00.0"
        rows.append({"compute_node_id": node_id, "address": pf, "vendor_id": VENDOR,
                     "product_id": PF_PRODUCT, "dev_type": "type-PF", "parent_addr": None,
                     "numa_node": cell, "physical_network": PHYSNETS[cell],
                     "status": "available", "instance_uuid": None})
        for vf in range(VFS_PER_PF):
            rows.append({"compute_node_id": node_id,
                         "address": f"0000:{bus}:{2 + vf // 8:02x}.{vf % 8}",
                         "vendor_id": VENDOR, "product_id": VF_PRODUCT,
                         "dev_type": "type-VF", "parent_addr": pf, "numa_node": cell,
                         "physical_network": PHYSNETS[cell], "status": "available",
                         "instance_uuid": None})
    return rows


def _fill_target(rng: random.Random) -> float:
    """Fraction of the RAM limit already used: many empty hosts, a few nearly full."""
    r = rng.random()
    if r < 0.30:
        return 0.0
    if r < 0.80:
        return rng.uniform(0.0, 0.5)
    if r < 0.95:
        return rng.uniform(0.5, 0.9)
    return rng.uniform(0.95, 1.0)


def generate_fleet(size: int, seed: int = 42) -> BenchFleet:
    """All rows of a ``size``-host fleet; deterministic for ``seed``."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    devices: list[dict[str, Any]] = []
    allocs: list[dict[str, Any]] = []
    members: dict[str, list[str]] = {name: [] for name in
                                     ("az1", "az2", "ssd", "highmem", "pinned", "sriov",
                                      "windows")}
    for i in range(size):
        node_id = i + 1
        name = f"compute-{i:06d}"
        vcpus = rng.choice(VCPUS)
        memory_mb = rng.choice(MEMORY_GB) * 1024
        local_gb = rng.choice(DISK_GB)
        has_numa = rng.random() < 0.5
        has_pci = has_numa and rng.random() < 0.4       # 20% of all hosts
        node = {
            "id": node_id, "uuid": _uuid(rng), "host": name, "hypervisor_hostname": name,
            "vcpus": vcpus, "memory_mb": memory_mb, "local_gb": local_gb,
            "vcpus_used": 0, "memory_mb_used": 0, "disk_mb_used": 0, "running_vms": 0,
            "current_workload": 0, "failed_builds": 0,
            "cpu_allocation_ratio": 1.0 if has_numa and rng.random() < 0.5
            else rng.choice(CPU_RATIOS),
            "ram_allocation_ratio": rng.choice(RAM_RATIOS),
            "disk_allocation_ratio": 1.0,
            "reserved_host_memory_mb": 4096, "reserved_host_disk_mb": 10240,
            "reserved_host_cpus": 0,
            "hypervisor_type": "QEMU",
            "hypervisor_version": rng.choice(HYPERVISOR_VERSIONS),
            "host_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            "cpu_info": _CPU_INFO, "supported_instances": _SUPPORTED,
            "numa_topology": None, "stats": "{}", "metrics": "{}",
            "disabled": rng.random() < 0.01, "disabled_reason": None,
            "generation": 1, "deleted": 0,
        }
        if node["disabled"]:
            node["disabled_reason"] = "maintenance"
        topo = _fresh_topology(vcpus, memory_mb) if has_numa else None
        topo_json = None if topo is None else _topology_json(vcpus, memory_mb, False, topo)
        node_devices = _pci_devices(node_id) if has_pci else []

        # Existing usage, always backed by allocation rows.
        if has_numa and rng.random() < 0.3:
            topo, fitted = _pinned_usage(vcpus, memory_mb, topo)
            topo_json = _topology_json(vcpus, memory_mb, True, topo)
            inst = _uuid(rng)
            pci_addrs = None
            if node_devices:
                cell = fitted["cells"][0]["host_cell_id"]
                vf = next(d for d in node_devices
                          if d["dev_type"] == "type-VF" and d["numa_node"] == cell)
                vf["status"], vf["instance_uuid"] = "claimed", inst
                for d in node_devices:
                    if d["address"] == vf["parent_addr"]:
                        d["status"] = "unclaimable"
                pci_addrs = json.dumps([vf["address"]])
            _add_allocation(node, allocs, inst, PINNED_FLAVOR,
                            json.dumps(fitted, sort_keys=True), pci_addrs)
        limit_ram = (memory_mb - node["reserved_host_memory_mb"]) * node["ram_allocation_ratio"]
        limit_cpu = vcpus * node["cpu_allocation_ratio"]
        limit_disk = local_gb * 1024 - node["reserved_host_disk_mb"]
        target = _fill_target(rng) * limit_ram
        for _ in range(64):
            if node["memory_mb_used"] >= target:
                break
            flavor = rng.choice(EXISTING_FLAVORS)
            if (node["memory_mb_used"] + flavor[1] > limit_ram
                    or node["vcpus_used"] + flavor[0] > limit_cpu
                    or node["disk_mb_used"] + flavor[2] > limit_disk):
                break
            _add_allocation(node, allocs, _uuid(rng), flavor, None, None)

        node["numa_topology"] = topo_json
        nodes.append(node)
        devices.extend(node_devices)
        members[AZS[i % 2]].append(name)
        if rng.random() < 0.25:
            members["ssd"].append(name)
        if memory_mb >= 768 * 1024:
            members["highmem"].append(name)
        if has_numa:
            members["pinned"].append(name)
        if has_pci:
            members["sriov"].append(name)
        if rng.random() < 0.05:
            members["windows"].append(name)

    metadata = {"az1": {"availability_zone": "az1"}, "az2": {"availability_zone": "az2"},
                "ssd": {"ssd": "true"}, "highmem": {"highmem": "true"},
                "pinned": {"pinned": "true"}, "sriov": {"sriov": "true"},
                "windows": {"os_type": "windows", "cpu_allocation_ratio": "2.0"}}
    aggregates, agg_hosts, agg_meta = [], [], []
    for agg_id, (name, hosts) in enumerate(members.items(), start=1):
        aggregates.append({"id": agg_id, "uuid": _uuid(rng), "name": name, "deleted": 0})
        agg_hosts.extend({"aggregate_id": agg_id, "host": h} for h in hosts)
        agg_meta.extend({"aggregate_id": agg_id, "key": k, "value": v}
                        for k, v in metadata[name].items())
    return BenchFleet(size=size, seed=seed, nodes=nodes, pci_devices=devices,
                      allocations=allocs, aggregates=aggregates, aggregate_hosts=agg_hosts,
                      aggregate_metadata=agg_meta)


def _add_allocation(node: dict, allocs: list, inst: str, flavor: tuple[int, int, int],
                    numa_cells: str | None, pci_devices: str | None) -> None:
    vcpus, memory_mb, disk_mb = flavor
    node["vcpus_used"] += vcpus
    node["memory_mb_used"] += memory_mb
    node["disk_mb_used"] += disk_mb
    node["running_vms"] += 1
    allocs.append({"instance_uuid": inst, "compute_node_id": node["id"], "vcpus": vcpus,
                   "memory_mb": memory_mb, "disk_mb": disk_mb, "numa_cells": numa_cells,
                   "pci_devices": pci_devices, "project_id": "bench", "user_id": "bench",
                   "instance_group": None, "request_spec": None})


# -- loading ------------------------------------------------------------------------------

def _chunks(rows: list, size: int) -> Iterator[list]:
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def load_fleet(db: Database, fleet: BenchFleet, chunk: int = 10000) -> float:
    """Bulk-insert the fleet into a migrated, empty database; returns seconds taken.

    Node rows are stamped between an hour and 30 days in the past, spread out as in
    a live fleet (all at one instant, every refresh would re-read them all within
    its overlap window). Each host gets a ``services`` row with a heartbeat now.
    """
    t0 = time.perf_counter()
    now = models.utcnow()
    stamp = (now - datetime.timedelta(hours=1)).replace(microsecond=0)
    times = {"created_at": stamp, "updated_at": stamp}
    nodes = [{**n, "created_at": stamp - datetime.timedelta(days=30),
              "updated_at": stamp - datetime.timedelta(seconds=(n["id"] * 7919) % 2592000)}
             for n in fleet.nodes]
    services = [{"host": n["host"], "binary": COMPUTE_BINARY, "last_seen_up": now,
                 "report_count": 1, "disabled": False, "created_at": stamp,
                 "updated_at": now} for n in fleet.nodes]
    plan: list[tuple[sa.Table, list[dict], dict]] = [
        (_cn, nodes, {}),
        (_svc, services, {}),
        (_pci, fleet.pci_devices, times),
        (_alloc, fleet.allocations, {"created_at": stamp}),
        (_agg, fleet.aggregates, times),
        (_agg_hosts, fleet.aggregate_hosts, {}),
        (_agg_meta, fleet.aggregate_metadata, {}),
    ]
    with db.writer_connection() as conn:
        if db.dialect in ("mysql", "mariadb"):
            conn.exec_driver_sql("SET unique_checks = 0")
            conn.exec_driver_sql("SET foreign_key_checks = 0")
        for table, rows, extra in plan:
            for part in _chunks(rows, chunk):
                conn.execute(table.insert(), [{**r, **extra} for r in part] if extra else part)
        if db.dialect in ("mysql", "mariadb"):
            conn.exec_driver_sql("SET unique_checks = 1")
            conn.exec_driver_sql("SET foreign_key_checks = 1")
    return time.perf_counter() - t0


# -- throwaway databases ------------------------------------------------------------------

@dataclasses.dataclass
class BenchDatabase:
    """A migrated, throwaway database; ``drop()`` removes it."""

    backend: str
    url: str
    db: Database
    drop: Callable[[], None]


def create_database(backend: str, workdir: str | None = None) -> BenchDatabase:
    """A fresh migrated database: a SQLite file in ``workdir`` (a temp dir by default)
    or a uniquely named MariaDB database (``BERTH_BENCH_MYSQL_URL``)."""
    if backend == "sqlite":
        tmp = workdir or tempfile.mkdtemp(prefix="berth-bench-")
        path = os.path.join(tmp, f"bench-{uuidlib.uuid4().hex[:8]}.sqlite")
        url = f"sqlite:///{path}"
        db = Database(url)
        migration.db_sync(db)

        def drop() -> None:
            db.dispose()
            for suffix in ("", "-wal", "-shm", "-journal"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)

        return BenchDatabase(backend, url, db, drop)
    if backend != "mariadb":
        raise ValueError(f"unknown backend {backend!r}")
    name = "berth_bench_" + uuidlib.uuid4().hex[:12]
    admin = sa.create_engine(MYSQL_URL + "/")
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    url = f"{MYSQL_URL}/{name}?charset=utf8mb4"
    db = Database(url)
    migration.db_sync(db)

    def drop_mariadb() -> None:
        db.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()

    return BenchDatabase(backend, url, db, drop_mariadb)
