"""The benchmark fleet generator and bulk loader (tools/bench/fleet.py) on SQLite."""
from __future__ import annotations

import collections
import json

import pytest
from oslo_config import cfg

from db import inventory
from numa.topology import FittedTopology, HostTopology
from scheduler import simulate
from scheduler.filter_scheduler import group_key
from scheduler.host_manager import HostManager
from tools.bench import check as bench_check
from tools.bench import fleet as bench_fleet

N = 300


@pytest.fixture
def loaded(sqlite_db):
    fleet = bench_fleet.generate_fleet(N, seed=3)
    bench_fleet.load_fleet(sqlite_db, fleet)
    return sqlite_db, fleet


def test_same_seed_same_rows_other_seed_other_rows():
    a, b = bench_fleet.generate_fleet(60, seed=1), bench_fleet.generate_fleet(60, seed=1)
    assert a == b
    assert a.nodes != bench_fleet.generate_fleet(60, seed=2).nodes


def test_every_model_is_present_with_its_hardware():
    fleet = bench_fleet.generate_fleet(1000, seed=42)
    c = fleet.counts()
    assert c["hosts"] == 1000
    for m in bench_fleet.MODELS:
        share = c[f"model_{m.name}"] / 1000
        assert m.share / 2 < share < m.share * 2, (m.name, share)
    by_host = {n["host"]: n for n in fleet.nodes}
    devices = collections.defaultdict(list)
    for d in fleet.pci_devices:
        devices[d["compute_node_id"]].append(d)
    seen_1g = False
    for host, model in fleet.models.items():
        node = by_host[host]
        spec = next(m for m in bench_fleet.MODELS if m.name == model)
        assert (node["numa_topology"] is not None) == bool(spec.numa_cells), host
        assert json.loads(node["supported_instances"]) == spec.supported
        devs = devices.get(node["id"], [])
        if spec.nics:
            # one PF per cell with its VFs on that cell and that cell's physnet
            for pf in (d for d in devs if d["dev_type"] == "type-PF"):
                vfs = [d for d in devs if d["parent_addr"] == pf["address"]]
                assert len(vfs) == bench_fleet.VFS_PER_PF
                assert {(v["numa_node"], v["physical_network"]) for v in vfs} == \
                    {(pf["numa_node"], bench_fleet.PHYSNETS[pf["numa_node"]])}
        assert sum(d["dev_type"] == "type-PCI" for d in devs) == spec.gpus
        if node["numa_topology"]:
            topo = HostTopology.from_primitive(json.loads(node["numa_topology"]))
            sizes = {p.size_kb for cell in topo.cells for p in cell.mempages}
            seen_1g |= 1048576 in sizes
            if spec.smt:
                assert all(cell.siblings for cell in topo.cells)
    assert seen_1g
    versions = {n["hypervisor_version"] for n in fleet.nodes}
    assert min(versions) < 6000000 < max(versions)       # old hypervisors too


def test_usage_is_already_on_the_fleet():
    fleet = bench_fleet.generate_fleet(1000, seed=42)
    c = fleet.counts()
    assert c["pinned_instances"] > 50
    assert c["pci_claimed"] > 10
    assert c["group_members"] > 0
    assert {g["policy"] for g in fleet.groups.values()} == set(bench_fleet.GROUP_POLICIES)
    # pinned instances carry a valid fitted topology, some with several cells
    cells = [len(FittedTopology.from_primitive(json.loads(c["numa_cells"])).cells)
             for c in fleet.consumers if c["numa_cells"]]
    assert 1 in cells and 2 in cells
    assert {s["uuid"] for s in fleet.server_groups} == {
        group_key("bench", u) for u, g in fleet.groups.items()
        if g["policy"] in ("affinity", "anti-affinity")}


def test_load_gives_one_host_state_per_host_and_counts_pci_pools(loaded):
    db, fleet = loaded
    hm = HostManager(db, cfg.CONF, load_pci_pools=True)
    hosts = hm.host_states()
    assert len(hosts) == N
    assert sum(p.count for h in hosts for p in h.pci_pools) == \
        fleet.counts()["pci_available"]
    assert {h.availability_zone for h in hosts} == {"az1", "az2"}
    assert sum(1 for h in hosts if h.numa_topology is not None) == \
        fleet.counts()["numa_hosts"]
    assert sum(len(h.instances) for h in hosts) == len(fleet.consumers)
    for uuid, g in fleet.groups.items():
        assert sum(hm.group_hosts(group_key("bench", uuid)).values()) == len(g["members"])


def test_loaded_fleet_is_valid(loaded):
    db, fleet = loaded
    assert simulate.check_invariants(db) == []
    groups = {u: (g["policy"], g["max_server_per_host"]) for u, g in fleet.groups.items()}
    assert bench_check.check(db, bench_check.Expectations(groups=groups)) == []


def test_the_ledger_adds_up_and_every_class_fits():
    """Each node is a root provider; every inventory's ``used`` is the sum of the
    allocations against it and within (total - reserved) x ratio; NUMA hosts have
    PCPU for their dedicated CPUs and VCPU for the rest, and pinned instances hold
    PCPU."""
    fleet = bench_fleet.generate_fleet(1000, seed=42)
    assert [p["id"] for p in fleet.providers] == [n["id"] for n in fleet.nodes]
    assert [p["uuid"] for p in fleet.providers] == [n["uuid"] for n in fleet.nodes]
    held = collections.Counter()
    for a in fleet.allocations:
        held[(a["provider_id"], a["resource_class"])] += a["amount"]
    invs = {(i["provider_id"], i["resource_class"]): i for i in fleet.inventories}
    assert set(held) <= set(invs)
    for key, inv in invs.items():
        assert inv["used"] == held[key], key
        assert inventory.fits(inv["used"], 0, inv["total"], inv["reserved"],
                              inv["allocation_ratio"]), (key, inv)
    for node in fleet.nodes:
        if node["numa_topology"]:
            dedicated = sum(len(c["pcpuset"]) for c in json.loads(node["numa_topology"])["cells"])
            assert invs[(node["id"], "PCPU")]["total"] == dedicated
            assert (node["id"], "VCPU") in invs
        else:
            assert (node["id"], "PCPU") not in invs
    pinned = {c["id"] for c in fleet.consumers if c["numa_cells"]}
    assert {a["consumer_id"] for a in fleet.allocations if a["resource_class"] == "PCPU"} \
        == pinned
    running = collections.Counter(c["compute_node_id"] for c in fleet.consumers)
    assert all(n["running_vms"] == running[n["id"]] for n in fleet.nodes)
    assert any("HW_CPU_HYPERTHREADING" in p["traits"].split() for p in fleet.providers)
