"""The fast path (numpy columns, cheap checks first) decides exactly like the
straightforward per-host path: same candidates, same weights, same order.

Random fleets (sizes, ratios, reserved amounts, disabled and down hosts,
aggregates with zones, ratios and multipliers, NUMA, PCI, existing usage and
server-group members) and random requests, on every built-in filter and weigher.
"""
from __future__ import annotations

import datetime
import random

import numpy as np
import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.filters import FilterContext
from scheduler.host_manager import HostManager

ALL_FILTERS = [
    "AllHostsFilter", "ComputeFilter", "AvailabilityZoneFilter", "RamFilter", "CoreFilter",
    "DiskFilter", "AggregateRamFilter", "AggregateCoreFilter", "AggregateDiskFilter",
    "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
    "AggregateInstanceExtraSpecsFilter", "SameHostFilter", "DifferentHostFilter",
    "ServerGroupAffinityFilter", "ServerGroupAntiAffinityFilter", "NumInstancesFilter",
    "AggregateNumInstancesFilter", "IoOpsFilter", "AggregateIoOpsFilter",
    "NUMATopologyFilter", "PciPassthroughFilter",
]
ALL_WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "NumInstancesWeigher",
    "HypervisorVersionWeigher", "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher", "BuildFailureWeigher", "PCIWeigher",
]
ALIAS = ('{"name": "vf", "vendor_id": "8086", "product_id": "154c", '
         '"device_type": "type-VF", "numa_policy": "legacy"}')


def _numa(rng):
    cells = []
    for c in range(2):
        base = c * 8
        cells.append({"id": c, "socket": c, "cpuset": [base, base + 1],
                      "pcpuset": list(range(base + 2, base + 8)),
                      "siblings": [[base + 2, base + 3], [base + 4, base + 5],
                                   [base + 6, base + 7]],
                      "memory_mb": 16384,
                      "mempages": [{"size_kb": 4, "total": 4194304},
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
                         "numa_node": pf, "physical_network": "physnet1"})
    return devs


def _fleet(rng, n):
    hosts = []
    for i in range(n):
        h = {"host": f"h{i:03d}", "vcpus": rng.choice([4, 8, 16, 32]),
             "memory_mb": rng.choice([4096, 8192, 32768]), "local_gb": rng.choice([20, 100, 500]),
             "cpu_allocation_ratio": rng.choice([1.0, 2.0, 4.0]),
             "ram_allocation_ratio": rng.choice([1.0, 1.5]),
             "reserved_host_memory_mb": rng.choice([0, 512]),
             "hypervisor_version": rng.choice([6000000, 8002000]),
             "stats": {"tier": rng.choice(["gold", "silver"])},
             "supported_instances": [["x86_64", "kvm", "hvm"]],
             "disabled": rng.random() < 0.1}
        if rng.random() < 0.4:
            h["numa_topology"] = _numa(rng)
        if rng.random() < 0.3:
            h["pci_devices"] = _pci(rng)
        hosts.append(h)
    names = [h["host"] for h in hosts]
    aggs = [
        {"name": "az1", "availability_zone": "az1", "hosts": names[: n // 2]},
        {"name": "az2", "availability_zone": "az2", "hosts": names[n // 2:]},
        {"name": "dense", "hosts": rng.sample(names, n // 4),
         "metadata": {"cpu_allocation_ratio": "2.0", "ram_weight_multiplier": "-1.0",
                      "max_instances_per_host": "3", "ssd": "true"}},
    ]
    return {"hosts": hosts, "aggregates": aggs}


def _request(rng, sched, group_uuid):
    flavor = {"vcpus": rng.choice([1, 2, 4, 8]), "memory_mb": rng.choice([512, 2048, 8192]),
              "root_gb": rng.choice([1, 10, 50]), "extra_specs": {}}
    req = {"flavor": flavor}
    if rng.random() < 0.3:
        req["availability_zone"] = rng.choice(["az1", "az2", "nope"])
    if rng.random() < 0.2:
        flavor["extra_specs"]["capabilities:stats:tier"] = "gold"
    if rng.random() < 0.2:
        flavor["extra_specs"]["ssd"] = "true"
    if rng.random() < 0.2:
        flavor["extra_specs"]["hw:cpu_policy"] = "dedicated"
    if rng.random() < 0.2:
        flavor["extra_specs"]["pci_passthrough:alias"] = "vf:1"
    if rng.random() < 0.3:
        req["instance_group"] = {"uuid": group_uuid, "policy": rng.choice(
            ["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"])}
    return sched.parse_request(req)


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    from scheduler import opts
    opts.list_opts()
    c.set_override("enabled_filters", ALL_FILTERS, group="filter_scheduler")
    c.set_override("weight_classes", ALL_WEIGHERS, group="filter_scheduler")
    c.set_override("alias", [ALIAS], group="pci")
    yield c
    for name in ("enabled_filters", "weight_classes"):
        c.clear_override(name, group="filter_scheduler")
    c.clear_override("alias", group="pci")


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_matches_straightforward_path(sqlite_db, conf, seed):
    rng = random.Random(seed)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 40)))
    # Some hosts heartbeat (one long ago), the others never did (static hosts).
    svc = models.Service.__table__
    now = models.utcnow()
    with sqlite_db.writer_connection() as conn:
        for i in range(0, 40, 7):
            age = 300 if i == 7 else 5
            conn.execute(sa.insert(svc).values(
                host=f"h{i:03d}", binary="berth-compute", report_count=1, disabled=False,
                last_seen_up=now - datetime.timedelta(seconds=age), created_at=now,
                updated_at=now))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    group = "99999999-0000-0000-0000-000000000000"
    placed = []
    for step in range(25):
        spec = _request(rng, sched, group)
        hosts = sched.host_manager.host_states()
        ctx = FilterContext(now=models.utcnow(), conf=conf,
                            group_hosts=sched.host_manager.group_hosts(group))
        ctx_fast = FilterContext(now=ctx.now, conf=conf, group_hosts=ctx.group_hosts)
        slow, _ = sched._filter(hosts, spec, ctx, {}, 0)
        rows = sched._filter_fast(spec, ctx_fast, {}, 0)
        fast = [sched.host_manager.columns.hosts[i] for i in rows]
        assert [h.node_id for h in fast] == [h.node_id for h in slow], (seed, step, spec)
        # The NoValidHost explanation is the same too (counts and texts per filter).
        assert sched._explain_fast(spec, ctx_fast, {}, 0).summary(0) == \
            sched._filter(hosts, spec, ctx, {}, 0)[1].summary(0)
        if slow:
            w_slow = sched._weigh(slow, spec, ctx)
            w_fast = list(sched._weigh_fast(rows, spec, ctx_fast))
            n = min(len(w_fast), len(w_slow))
            assert [h.node_id for _, h in w_fast[:n]] == [h.node_id for _, h in w_slow[:n]]
            np.testing.assert_allclose([w for w, _ in w_fast[:n]], [w for w, _ in w_slow[:n]],
                                       rtol=0, atol=1e-12)
            # Place it for real so usage, groups and PCI pools move between steps.
            try:
                sel = sched.select_destinations(spec)
                placed.append(sel[0][0].instance_uuid)
            except Exception as e:  # claims can still refuse (e.g. NUMA pages)
                assert type(e).__name__ == "NoValidHost", e
        if placed and rng.random() < 0.2:
            sched.release(placed.pop(rng.randrange(len(placed))))


@pytest.mark.parametrize("seed", range(3))
def test_every_vector_form_matches_host_passes(sqlite_db, conf, seed):
    rng = random.Random(100 + seed)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 30)))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    hosts = sched.host_manager.host_states()
    cols = sched.host_manager.columns
    checked = 0
    for _ in range(30):
        spec = _request(rng, sched, "g")
        ctx = FilterContext(now=models.utcnow(), conf=conf, group_hosts={"h001": 1})
        for flt in sched.filters:
            want = [flt.host_passes(h, spec, ctx) is None for h in hosts]
            if flt.is_noop(spec):
                assert all(want), flt.name
                continue
            vec = flt.filter_vector(cols, spec, ctx)
            if vec is not None:
                checked += 1
                assert list(vec) == want, flt.name
        for w in sched.weighers:
            vec = w.weigh_vector(cols, spec, ctx)
            if isinstance(vec, float):      # "the same for every host"
                vec = [vec] * len(hosts)
            if vec is not None:
                assert list(vec) == [float(w.weigh(h, spec, ctx)) for h in hosts], w.name
    assert checked > 0


@pytest.mark.parametrize("seed", range(20))
def test_kth_largest_equals_a_full_partition(seed):
    from scheduler.filter_scheduler import _kth_largest

    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 5000))
    # Ties on purpose (few distinct values) as well as continuous values.
    values = rng.integers(0, 4, n).astype(np.float64) if seed % 2 else rng.random(n)
    for k in (1, 5, 18, n // 4):
        want = np.sort(values)[n - k]
        assert _kth_largest(values.copy(), k) == want, (seed, k)


def test_plugin_weigher_with_an_integer_vector_weighs_the_same(sqlite_db, conf):
    """weigh_vector should give float64; an int array (a plugin's) still works."""
    rng = random.Random(7)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 30)))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    ram = next(w for w in sched.weighers if w.name == "RAMWeigher")
    ram.weigh_vector = lambda cols, spec, ctx: cols.free_ram.astype(np.int64)
    spec = sched.parse_request({"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}})
    hosts = sched.host_manager.host_states()
    ctx = FilterContext(now=models.utcnow(), conf=conf, group_hosts={})
    slow, _ = sched._filter(hosts, spec, ctx, {}, 0)
    rows = sched._filter_fast(spec, ctx, {}, 0)
    assert len(slow) > 1
    w_fast = list(sched._weigh_fast(rows, spec, ctx))
    w_slow = sched._weigh(slow, spec, ctx)
    assert [h.node_id for _, h in w_fast] == [h.node_id for _, h in w_slow]
    assert [w for w, _ in w_fast] == [w for w, _ in w_slow]
