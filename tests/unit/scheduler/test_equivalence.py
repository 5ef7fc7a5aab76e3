"""The scheduler decides exactly like a plain per-host reference.

Random heterogeneous fleets (sizes, ratios, reserved amounts, disabled and down
hosts, zones, aggregates with ratios, limits, multipliers and extra-spec keys,
NUMA with SMT and huge pages, SR-IOV devices, existing usage and group members)
and random traces (plain, image properties, capabilities, pinned with every
thread policy, page sizes and cell counts, PCI with NUMA policies, groups of
every policy, multi-create, same/different-host hints, force/ignore, zones,
dry runs, releases) go through the product and through ``reference.select``;
chosen hosts, weights and NoValidHost explanations must be equal, on every
built-in filter and weigher.
"""
from __future__ import annotations

import datetime
import json
import random

import numpy as np
import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.cycle import _kth_largest
from scheduler.filter_scheduler import FilterScheduler, group_key
from scheduler.host_manager import HostManager
from tests.unit.scheduler import reference

ALL_FILTERS = [
    "AllHostsFilter", "ComputeFilter", "AvailabilityZoneFilter", "RamFilter", "CoreFilter",
    "DiskFilter", "AggregateRamFilter", "AggregateCoreFilter", "AggregateDiskFilter",
    "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
    "AggregateInstanceExtraSpecsFilter", "SameHostFilter", "DifferentHostFilter",
    "ServerGroupAffinityFilter", "ServerGroupAntiAffinityFilter", "NumInstancesFilter",
    "AggregateNumInstancesFilter", "IoOpsFilter", "AggregateIoOpsFilter",
    "NUMATopologyFilter", "PciPassthroughFilter", "AggregateImagePropertiesIsolation",
    "AggregateMultiTenancyIsolation", "AggregateTypeAffinityFilter", "IsolatedHostsFilter",
    "JsonFilter", "MetricsFilter", "SimpleCIDRAffinityFilter", "RetryFilter",
]
ALL_WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "NumInstancesWeigher",
    "HypervisorVersionWeigher", "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher", "BuildFailureWeigher", "PCIWeigher",
    "MetricsWeigher", "ImagePropertiesWeigher",
]
#: Options of the catalogue filters and weighers the replay sets: (group, name, value).
CATALOGUE_OPTIONS = [
    ("filter_scheduler", "isolated_hosts", ["h005", "h011"]),
    ("filter_scheduler", "isolated_images", ["img-isolated"]),
    ("filter_scheduler", "image_props_weight_multiplier", 1.0),
    ("filter_scheduler", "image_props_weight_setting", ["os_distro=2.0", "hw_machine_type=0.5"]),
    ("metrics", "weight_setting", ["cpu.percent=-1.0", "cpu.frequency=0.001"]),
    ("metrics", "weight_multiplier", 1.5),
]
QUERIES = [
    [">=", "$free_ram_mb", 4096],
    ["and", ["=", "$stats.tier", "gold"], ["<", "$num_instances", 3]],
    ["in", "$hypervisor_version", 7002000, 8002000],
    ["not", [">", "$metrics.cpu.percent", 50]],
    ["or", ["<=", "$vcpus", 8], [">=", "$total_usable_ram_mb", 32768]],
]
ALIAS = ('{"name": "vf", "vendor_id": "8086", "product_id": "154c", '
         '"device_type": "type-VF", "numa_policy": "legacy"}')


def _numa(rng, smt: bool):
    cells = []
    per_cell = rng.choice([8, 12])
    for c in range(2):
        base = c * per_cell
        shared = [base, base + 1]
        dedicated = list(range(base + 2, base + per_cell))
        siblings = [dedicated[i:i + 2] for i in range(0, len(dedicated), 2)] if smt else []
        cells.append({"id": c, "socket": c, "cpuset": shared, "pcpuset": dedicated,
                      "siblings": siblings, "memory_mb": 16384,
                      "mempages": [{"size_kb": 4, "total": 2097152},
                                   {"size_kb": 2048, "total": rng.choice([0, 512, 2048])}]})
    return {"cells": cells}


def _pci(rng):
    devs = []
    for pf in range(2):
        pf_addr = f"0000:8{pf}:00.0"
        devs.append({"address": pf_addr, "vendor_id": "8086", "product_id": "1572",
                     "dev_type": "type-PF", "numa_node": pf})
        for vf in range(rng.randint(0, 3)):
            devs.append({"address": f"0000:8{pf}:02.{vf}", "vendor_id": "8086",
                         "product_id": "154c", "dev_type": "type-VF", "parent_addr": pf_addr,
                         "numa_node": pf,
                         "physical_network": rng.choice(["physnet1", "physnet1", "PhysNet1"])})
    return devs


def _fleet(rng, n):
    hosts = []
    for i in range(n):
        model = rng.choice(["small", "general", "nfv", "old"])
        h = {"host": f"h{i:03d}", "vcpus": rng.choice([4, 8, 16, 32]),
             "memory_mb": rng.choice([4096, 8192, 32768]), "local_gb": rng.choice([20, 100, 500]),
             "cpu_allocation_ratio": rng.choice([1.0, 2.0, 4.0]),
             "ram_allocation_ratio": rng.choice([1.0, 1.5]),
             "reserved_host_memory_mb": rng.choice([0, 512]),
             "hypervisor_version": 6000000 if model == "old" else rng.choice([7002000, 8002000]),
             "stats": {"tier": rng.choice(["gold", "silver"])},
             "supported_instances": [["x86_64", "kvm", "hvm"]] if model != "old" else
             [["X86_64", "KVM", "hvm"], ["i386", "kvm", "HV"]],
             "cpu_info": rng.choice([{}, {"maxphysaddr": {"bits": 39}},
                                     {"maxphysaddr": {"mode": "passthrough", "bits": 46}}]),
             "disabled": rng.random() < 0.1,
             "host_ip": f"10.0.{i // 16}.{i % 16 + 1}"}
        if rng.random() < 0.9:
            h["metrics"] = {"cpu.percent": rng.choice([5, 40, 80]),
                            "cpu.frequency": rng.choice([2000, 3000])}
        if model in ("general", "nfv"):
            h["vcpus"] = 32
            h["memory_mb"] = 32768          # what its two 16 GB cells hold
            h["numa_topology"] = _numa(rng, smt=rng.random() < 0.7)
        if model == "nfv":
            h["pci_devices"] = _pci(rng)
        hosts.append(h)
    names = [h["host"] for h in hosts]
    aggs = [
        {"name": "az1", "availability_zone": "az1", "hosts": names[: n // 2]},
        {"name": "az2", "availability_zone": "az2", "hosts": names[n // 2:],
         "metadata": {"os_distro": "ubuntu,debian"}},
        {"name": "tenant", "hosts": rng.sample(names, n // 8),
         "metadata": {"filter_tenant_id": "p1", "filter_tenant_id_2": "p3"}},
        {"name": "typed", "hosts": rng.sample(names, n // 8),
         "metadata": {"instance_type": "m1.small, m1.large"}},
        {"name": "dense", "hosts": rng.sample(names, n // 4),
         "metadata": {"cpu_allocation_ratio": "2.0", "ram_weight_multiplier": "-1.0",
                      "max_instances_per_host": "3", "ssd": "true"}},
        {"name": "fast", "hosts": rng.sample(names, n // 5),
         "metadata": {"disk_allocation_ratio": "1.5", "ssd": "true,nvme",
                      "cpu_weight_multiplier": "2.5", "max_io_ops_per_host": "4"}},
    ]
    return {"hosts": hosts, "aggregates": aggs}


def _request(rng, sched, group_uuid, placed=()):
    """A random request of a random kind (the mix of a real trace)."""
    flavor = {"vcpus": rng.choice([1, 2, 4, 8]), "memory_mb": rng.choice([512, 2048, 8192]),
              "root_gb": rng.choice([1, 10, 50]), "extra_specs": {}}
    specs = flavor["extra_specs"]
    req = {"flavor": flavor}
    if rng.random() < 0.3:
        req["availability_zone"] = rng.choice(["az1", "az2", "nope"])
    if rng.random() < 0.2:
        specs["capabilities:stats:tier"] = "gold"
    if rng.random() < 0.1:
        specs["capabilities:free_ram_mb"] = ">= 4096"
    if rng.random() < 0.2:
        specs[rng.choice(["ssd", "aggregate_instance_extra_specs:ssd"])] = \
            rng.choice(["true", "nvme", "<in> nv"])
    if rng.random() < 0.3:
        specs["hw:cpu_policy"] = rng.choice(["dedicated", "dedicated", "mixed"])
        if specs["hw:cpu_policy"] == "mixed":
            flavor["vcpus"] = max(flavor["vcpus"], 2)
            specs["hw:cpu_dedicated_mask"] = "^0"
        if rng.random() < 0.5:
            specs["hw:cpu_thread_policy"] = rng.choice(["prefer", "isolate", "require"])
    if rng.random() < 0.2:
        specs["hw:mem_page_size"] = rng.choice(["small", "large", "any", "2048"])
    if rng.random() < 0.1 and flavor["vcpus"] >= 2:
        specs["hw:numa_nodes"] = "2"
    if rng.random() < 0.05:
        specs[rng.choice(["capabilities:", "aggregate_instance_extra_specs:"])] = "true"
    if rng.random() < 0.1:
        specs["hw:maxphysaddr_bits"] = rng.choice(["40", "46"])
    if rng.random() < 0.05:
        req["pci_requests"] = [{"count": 1, "spec": [
            {"vendor_id": "8086", "product_id": "154c",
             "physical_network": rng.choice(["PHYSNET1", "physnet1", "physnet2"])}]}]
    elif rng.random() < 0.2:
        specs["pci_passthrough:alias"] = rng.choice(["vf:1", "vf:2"])
        if rng.random() < 0.5:
            specs["hw:pci_numa_affinity_policy"] = rng.choice(["legacy", "preferred",
                                                              "required"])
    if rng.random() < 0.2:
        req["image"] = {"properties": rng.choice([
            {"hw_architecture": "i686"}, {"hw_architecture": "x86_64"},
            {"img_hv_requested_version": ">=7.0"}, {"img_hv_type": "qemu"},
            {"architecture": "i686"}, {"vm_mode": "xen"}, {"hypervisor_type": "KVM"},
            {"img_hv_requested_version": ">=v7.2rc1, <8.2.post1"},
            {"hw_maxphysaddr_bits": "40", "hw_architecture": "x86_64"}])}
    if rng.random() < 0.3:
        # One group per policy (a group's policy never changes).
        policy = rng.choice(["affinity", "anti-affinity", "soft-affinity",
                             "soft-anti-affinity"])
        req["instance_group"] = {"uuid": f"{group_uuid}-{policy}"[:36], "policy": policy}
        if policy == "anti-affinity" and rng.random() < 0.3:
            req["instance_group"]["rules"] = {"max_server_per_host": 2}
    if rng.random() < 0.2:
        req["num_instances"] = rng.choice([2, 3])
    if placed and rng.random() < 0.15:
        req["scheduler_hints"] = {rng.choice(["same_host", "different_host"]):
                                  rng.sample(placed, min(len(placed), 2))}
    if rng.random() < 0.08:
        req["ignore_hosts"] = [f"h{rng.randrange(40):03d}" for _ in range(3)]
    if rng.random() < 0.05:
        req["force_hosts"] = [f"h{rng.randrange(40):03d}" for _ in range(5)]
    if rng.random() < 0.3:
        req["project_id"] = rng.choice(["p1", "p2", "p3"])
    if rng.random() < 0.4:
        flavor["name"] = rng.choice(["m1.small", "m1.large", "m1.tiny"])
    if rng.random() < 0.3:
        image = req.setdefault("image", {})
        image.setdefault("properties", {})["os_distro"] = rng.choice(["ubuntu", "windows"])
        if rng.random() < 0.5:
            image["properties"]["hw_machine_type"] = "q35"
        if rng.random() < 0.3:
            image["id"] = rng.choice(["img-isolated", "img-plain"])
    if rng.random() < 0.25:
        req.setdefault("scheduler_hints", {})["query"] = json.dumps(rng.choice(QUERIES))
    if rng.random() < 0.1:
        req.setdefault("scheduler_hints", {}).update(
            build_near_host_ip="10.0.1.7", cidr=rng.choice(["/24", "/23", "/30"]))
    try:
        return sched.parse_request(req)
    except exception.InvalidRequest:
        return sched.parse_request({"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}})


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    from scheduler import opts
    opts.list_opts()
    c.set_override("enabled_filters", ALL_FILTERS, group="filter_scheduler")
    c.set_override("weight_classes", ALL_WEIGHERS, group="filter_scheduler")
    c.set_override("alias", [ALIAS], group="pci")
    for group, name, value in CATALOGUE_OPTIONS:
        c.set_override(name, value, group=group)
    yield c
    for name in ("enabled_filters", "weight_classes"):
        c.clear_override(name, group="filter_scheduler")
    c.clear_override("alias", group="pci")
    for group, name, _ in CATALOGUE_OPTIONS:
        c.clear_override(name, group=group)


def _heartbeats(db, n):
    """Some hosts heartbeat (one long ago), the others never did (static hosts)."""
    svc = models.Service.__table__
    now = models.utcnow()
    with db.writer_connection() as conn:
        for i in range(0, n, 7):
            age = 300 if i == 7 else 5
            conn.execute(sa.insert(svc).values(
                host=f"h{i:03d}", binary="berth-compute", report_count=1, disabled=False,
                last_seen_up=now - datetime.timedelta(seconds=age), created_at=now,
                updated_at=now))


def _replay(db, conf, seed: int, n_hosts: int, steps: int) -> int:
    rng = random.Random(seed)
    db_hosts.import_fleet(db, fleet_mod.load_fleet(_fleet(rng, n_hosts)))
    _heartbeats(db, n_hosts)
    sched = FilterScheduler(HostManager(db, conf), conf)
    hm = sched.host_manager
    group = "g"
    placed: list[str] = []
    compared = 0
    for step in range(steps):
        spec = _request(rng, sched, group, placed)
        dry = rng.random() < 0.25
        hm.refresh()
        named = spec.scheduler_hints.same_host + spec.scheduler_hints.different_host
        want = reference.select(hm.host_states(), spec, sched.filters, sched.weighers, conf,
                                models.utcnow(), hm.group_hosts(group_key(
                                    spec.project_id, spec.instance_group.uuid
                                    if spec.instance_group else None)),
                                hm.instance_nodes(named))
        where = (seed, step, spec.to_primitive(), dry)
        # A real claim of a VF also takes its PF out of the pools (the database
        # knows the parent; pools do not), which the reference's in-memory
        # consume cannot see: after the first instance of such a request only
        # the first instance is compared.
        first_only = not dry and bool(spec.pci_requests) and spec.num_instances > 1
        try:
            result = sched.select_destinations(spec, dry_run=dry)
        except exception.NoValidHost as e:
            if first_only and (want.refused_index or 0) + len(want.placed) > 0:
                compared += 1
                continue
            assert want.refused is not None, (where, e.reason, want.placed)
            if want.refused != {"claim": True}:
                got = dict(e.summary)
                assert got.pop("instance_index") == want.refused_index, where
                assert got == want.refused, where
            compared += 1
        else:
            got = [(s[0].host, s[0].weight) for s in result]
            if first_only:
                assert got[:1] == want.placed[:1], where
            else:
                assert want.refused is None, (where, want.refused)
                assert got == want.placed, where
            compared += 1
            if not dry:
                placed.extend(s[0].instance_uuid for s in result)
        if placed and rng.random() < 0.25:
            sched.release(placed.pop(rng.randrange(len(placed))))
    return compared


@pytest.mark.parametrize("seed", range(8))
def test_decisions_equal_the_reference(sqlite_db, conf, seed):
    assert _replay(sqlite_db, conf, seed, n_hosts=40, steps=40) == 40


def test_decisions_equal_the_reference_on_a_larger_fleet(sqlite_db, conf):
    """More hosts per class (many identical hosts), fewer steps."""
    assert _replay(sqlite_db, conf, 1000, n_hosts=160, steps=30) == 30


@pytest.mark.parametrize("seed", range(20))
def test_kth_largest_equals_a_full_partition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 5000))
    # Ties on purpose (few distinct values) as well as continuous values.
    values = rng.integers(0, 4, n).astype(np.float64) if seed % 2 else rng.random(n)
    for k in (1, 5, 18, n // 4):
        want = np.sort(values)[n - k]
        assert _kth_largest(values.copy(), k) == want, (seed, k)
