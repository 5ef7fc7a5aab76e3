"""The benchmark fleet generator and bulk loader (tools/bench/fleet.py) on SQLite."""
from __future__ import annotations

import json

import pytest
from oslo_config import cfg

from db import migration
from db.api import Database
from numa.topology import HostTopology
from scheduler import simulate
from scheduler.host_manager import HostManager
from tools.bench import fleet as bench_fleet

N = 200


@pytest.fixture
def loaded(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/bench.sqlite")
    migration.db_sync(db)
    fleet = bench_fleet.generate_fleet(N, seed=3)
    bench_fleet.load_fleet(db, fleet)
    yield db, fleet
    db.dispose()


def test_same_seed_same_rows_other_seed_other_rows():
    a, b = bench_fleet.generate_fleet(50, seed=1), bench_fleet.generate_fleet(50, seed=1)
    assert a == b
    assert a.nodes != bench_fleet.generate_fleet(50, seed=2).nodes


def test_fleet_shape():
    fleet = bench_fleet.generate_fleet(1000, seed=42)
    c = fleet.counts()
    assert c["hosts"] == 1000
    assert 400 < c["numa_hosts"] < 600          # about half
    assert 150 < c["pci_hosts"] < 250           # about a fifth
    assert c["pci_devices"] == 20 * c["pci_hosts"]
    assert c["allocations"] > 0
    for node in fleet.nodes:
        if node["numa_topology"]:
            HostTopology.from_primitive(json.loads(node["numa_topology"]))  # valid
    azs = {m["value"] for m in fleet.aggregate_metadata if m["key"] == "availability_zone"}
    assert azs == {"az1", "az2"}


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
    assert sum(len(h.instances) for h in hosts) == len(fleet.allocations)


def test_usage_equals_sum_of_allocations(loaded):
    db, _ = loaded
    assert simulate.check_invariants(db) == []
