"""The resource ledger through the real daemon (MariaDB, RabbitMQ): hosts report
traits, custom classes and child providers; flavors in Nova's request language are
placed only where they fit, the allocations are held by the providers that gave
them, and concurrent clients never over-commit any class."""
from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from db import models
from scheduler import exception
from tests.functional.daemon import Daemon

FLEET = {"hosts": [
    {"host": "gpu-1", "vcpus": 32, "memory_mb": 65536, "local_gb": 500,
     "cpu_info": {"arch": "x86_64", "features": ["avx2", "avx512f"]},
     "providers": [{"name": "gpu-1_pci_0000_3b_00_0", "traits": ["CUSTOM_VGPU_A40_8Q"],
                    "inventories": {"VGPU": {"total": 2}}},
                   {"name": "gpu-1_pci_0000_86_00_0", "traits": ["CUSTOM_VGPU_A40_4Q"],
                    "inventories": {"VGPU": {"total": 4}}}]},
    {"host": "plain-1", "vcpus": 32, "memory_mb": 65536, "local_gb": 500,
     "cpu_info": {"arch": "x86_64", "features": ["avx2"]}},
    {"host": "bm-1", "inventories": {"CUSTOM_BAREMETAL_GOLD": 1}},
    {"host": "nfv-1", "vcpus": 16, "memory_mb": 32768, "local_gb": 200,
     "cpu_allocation_ratio": 1.0, "numa_topology": {"cells": [
         {"id": 0, "socket": 0, "cpuset": [0, 1, 2, 3], "pcpuset": [4, 5, 6, 7],
          "memory_mb": 16384},
         {"id": 1, "socket": 1, "cpuset": [8, 9, 10, 11], "pcpuset": [12, 13, 14, 15],
          "memory_mb": 16384}]}},
    {"host": "gold-1", "vcpus": 32, "memory_mb": 131072, "local_gb": 500,
     "traits": ["CUSTOM_GOLD"]},
], "aggregates": [{"name": "gold", "hosts": ["gold-1"],
                   "metadata": {"trait:CUSTOM_GOLD": "required"}}]}
CONFIG = """
[filter_scheduler]
enabled_filters = ComputeFilter,RamFilter,CoreFilter,DiskFilter,NUMATopologyFilter
[scheduler]
enable_isolated_aggregate_filtering = true
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("ledger"), workers=2, fleet=FLEET, extra=CONFIG)
    try:
        d.start()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        d.close()


def flavor(vcpus=2, memory_mb=2048, root_gb=10, **extra_specs):
    return {"flavor": {"vcpus": vcpus, "memory_mb": memory_mb, "root_gb": root_gb,
                       "extra_specs": extra_specs}}


def held_by(daemon, instance_uuid) -> dict[str, int]:
    """provider name -> {class: amount} the instance holds, read from MariaDB."""
    c, a, rp = models.Consumer, models.Allocation, models.ResourceProvider
    with daemon.db.reader_connection() as conn:
        rows = conn.execute(sa.select(rp.name, a.resource_class, a.amount)
                            .join(a, a.provider_id == rp.id).join(c, c.id == a.consumer_id)
                            .where(c.uuid == instance_uuid)).all()
    out: dict = {}
    for name, rc, amount in rows:
        out.setdefault(name, {})[rc] = amount
    return out


def test_the_issues_three_flavors(daemon):
    api = daemon.api()
    vgpu = api.select_destinations(None, flavor(**{"resources:VGPU": "1"}))[0][0]
    assert vgpu["host"] == "gpu-1" and vgpu["resources"]["VGPU"] == 1
    avx = api.select_destinations(None, flavor(**{"trait:HW_CPU_X86_AVX512F": "required"}),
                                  dry_run=True)[0][0]
    assert avx["host"] == "gpu-1"
    bm = api.select_destinations(None, flavor(**{"resources:CUSTOM_BAREMETAL_GOLD": "1",
                                                 "resources:VCPU": "0",
                                                 "resources:MEMORY_MB": "0",
                                                 "resources:DISK_GB": "0"}))[0][0]
    assert bm["host"] == "bm-1" and bm["resources"] == {"CUSTOM_BAREMETAL_GOLD": 1}
    assert held_by(daemon, bm["instance_uuid"]) == {"bm-1": {"CUSTOM_BAREMETAL_GOLD": 1}}
    with pytest.raises(exception.NoValidHost) as e:
        api.select_destinations(None, flavor(**{"resources:CUSTOM_BAREMETAL_GOLD": "1",
                                                "resources:VCPU": "0"}))
    assert "CUSTOM_BAREMETAL_GOLD" in str(e.value)
    with pytest.raises(exception.InvalidRequest) as e:
        api.select_destinations(None, flavor(**{"resources:GPU": "1"}))
    assert "flavor.extra_specs.resources:GPU" in str(e.value)
    for placed in (vgpu, bm):
        assert api.release(None, placed["instance_uuid"]) is True
    daemon.assert_consistent()


def test_vgpu_types_isolate_and_the_child_holds_it(daemon):
    api = daemon.api()
    both = api.select_destinations(None, flavor(**{
        "resources1:VGPU": "1", "trait1:CUSTOM_VGPU_A40_8Q": "required",
        "resources2:VGPU": "1", "trait2:CUSTOM_VGPU_A40_4Q": "required",
        "group_policy": "isolate"}))[0][0]
    assert both["host"] == "gpu-1"
    held = held_by(daemon, both["instance_uuid"])
    assert held["gpu-1_pci_0000_3b_00_0"] == {"VGPU": 1}
    assert held["gpu-1_pci_0000_86_00_0"] == {"VGPU": 1}
    assert held["gpu-1"] == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}
    assert sorted(both["allocations"].values(), key=str) == sorted(
        [{"VGPU": 1}, {"VGPU": 1}, {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}], key=str)
    shown = api.show_host(None, "gpu-1")
    assert {p["name"]: p["resources"]["VGPU"]["used"] for p in shown["providers"]} == {
        "gpu-1_pci_0000_3b_00_0": 1, "gpu-1_pci_0000_86_00_0": 1}
    assert "HW_CPU_X86_AVX512F" in shown["traits"]
    assert api.release(None, both["instance_uuid"]) is True
    daemon.assert_consistent()


def test_pcpu_and_isolated_aggregates(daemon):
    api = daemon.api()
    pinned = api.select_destinations(None, flavor(4, 4096, 10, **{"hw:cpu_policy": "dedicated"}))
    assert pinned[0][0]["host"] == "nfv-1" and pinned[0][0]["resources"]["PCPU"] == 4
    assert "VCPU" not in pinned[0][0]["resources"]
    # plain requests never land in the trait-isolated aggregate, gold ones only there
    plain = api.select_destinations(None, dict(flavor(), num_instances=6), dry_run=True)
    assert "gold-1" not in {p[0]["host"] for p in plain}
    gold = api.select_destinations(None, flavor(**{"trait:CUSTOM_GOLD": "required"}),
                                   dry_run=True)
    assert gold[0][0]["host"] == "gold-1"
    assert api.release(None, pinned[0][0]["instance_uuid"]) is True


def test_concurrent_vgpu_boots_never_overcommit_a_gpu(daemon):
    """Twelve clients race for the six vGPUs of gpu-1: exactly six are placed, each GPU
    holds at most its total, and usage equals the allocations."""
    api = daemon.api()
    results: list = []
    lock = threading.Lock()

    def boot():
        try:
            sel = api.select_destinations(None, flavor(**{"resources:VGPU": "1"}),
                                          instance_uuids=[str(uuid.uuid4())])
            with lock:
                results.append(sel[0][0])
        except exception.NoValidHost:
            with lock:
                results.append(None)

    threads = [threading.Thread(target=boot) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    placed = [r for r in results if r is not None]
    assert len(results) == 12 and len(placed) == 6
    inv, rp = models.ProviderInventory, models.ResourceProvider
    with daemon.db.reader_connection() as conn:
        used = dict(conn.execute(sa.select(rp.name, inv.used).join(
            inv, inv.provider_id == rp.id).where(inv.resource_class == "VGPU")).all())
    assert used == {"gpu-1_pci_0000_3b_00_0": 2, "gpu-1_pci_0000_86_00_0": 4}
    daemon.assert_consistent()
    for r in placed:
        assert api.release(None, r["instance_uuid"]) is True
    daemon.assert_consistent()
