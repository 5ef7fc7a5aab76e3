"""ResourcesFilter: the ledger's check over the columns agrees with the per-host
assignment on every host, nested trees included; RamFilter & co. are views."""
from __future__ import annotations

import random

import pytest

from db.inventory import Inventory
from scheduler import provider_tree, testing
from scheduler.filters.core import CoreFilter
from scheduler.filters.disk import DiskFilter
from scheduler.filters.ram import RamFilter
from scheduler.filters.resources import ResourcesFilter
from tests.unit.scheduler import fakes

TRAITS = ("CUSTOM_A", "CUSTOM_B", "HW_CPU_X86_AVX512F")


def _random_host(rng: random.Random, i: int):
    children = []
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        total = rng.randint(1, 8)
        children.append({"traits": rng.sample(TRAITS, rng.randint(0, 2)),
                         "inventories": {"VGPU": {"total": total,
                                                  "max_unit": rng.randint(1, total)}},
                         "used": {"VGPU": rng.randint(0, total)}})
    inventories = {}
    if rng.random() < 0.2:
        inventories["CUSTOM_BAREMETAL_GOLD"] = {"total": 1}
    if rng.random() < 0.2:
        inventories["VGPU"] = {"total": 2}
    return fakes.fake_host(
        f"h{i}", vcpus=rng.choice((2, 4, 8, 16)), vcpus_used=rng.randint(0, 8),
        memory_mb=rng.choice((2048, 8192)), memory_mb_used=rng.choice((0, 1024, 4096)),
        local_gb=rng.choice((0, 20, 100)), cpu_allocation_ratio=rng.choice((1.0, 2.0)),
        traits=rng.sample(TRAITS, rng.randint(0, 2)), inventories=inventories,
        providers=children)


SPECS = [
    {},
    {"resources:VGPU": "1"},
    {"resources:VGPU": "3"},
    {"trait:CUSTOM_A": "required"},
    {"trait:CUSTOM_A": "required", "resources:VGPU": "1"},
    {"trait:CUSTOM_B": "forbidden", "resources:VGPU": "2"},
    {"resources1:VGPU": "1", "trait1:CUSTOM_A": "required"},
    {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "isolate"},
    {"resources1:VGPU": "2", "resources2:VGPU": "1", "group_policy": "none"},
    {"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
     "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"},
    {"resources:VCPU": "9"},
    {"hw:cpu_policy": "dedicated"},
]


@pytest.mark.parametrize("views", [(), (RamFilter, CoreFilter, DiskFilter)])
def test_columns_agree_with_the_assignment_on_random_fleets(views):
    rng = random.Random(7)
    hosts = [_random_host(rng, i) for i in range(120)]
    conf = fakes.ctx().conf
    flt = ResourcesFilter(conf, [v.resource_class for v in views])
    view_filters = [v(conf) for v in views]
    for extra in SPECS:
        spec = fakes.fake_spec(vcpus=2, memory_mb=1024, root_gb=10, extra_specs=extra)
        req = fakes.ctx().request(spec)
        testing.check_filter(flt, hosts, [req])
        got = testing.answers(flt, hosts, req)
        from_views = [testing.answers(v, hosts, req) for v in view_filters]
        for i, hs in enumerate(hosts):
            _, reason = provider_tree.assign(hs.tree, hs.usage, spec.resources)
            passes = got[i] is None and all(a[i] is None for a in from_views)
            assert passes == (reason is None), (extra, hs.host, got[i], reason)


def test_reasons_name_class_and_trait_and_views_keep_their_reasons():
    plain = fakes.fake_host("plain", vcpus=4, memory_mb=4096)
    spec = fakes.fake_spec(vcpus=2, memory_mb=1024, extra_specs={"resources:VGPU": "1"})
    req = fakes.ctx().request(spec)
    conf = fakes.ctx().conf
    assert testing.answers(ResourcesFilter(conf), [plain], req) == ["no VGPU inventory"]
    spec = fakes.fake_spec(vcpus=2, memory_mb=1024,
                           extra_specs={"trait:HW_CPU_X86_AVX512F": "required"})
    req = fakes.ctx().request(spec)
    assert testing.answers(ResourcesFilter(conf), [plain], req) == \
        ["lacks trait HW_CPU_X86_AVX512F"]
    # with RamFilter enabled, RAM is its to explain; without it, ResourcesFilter's
    spec = fakes.fake_spec(vcpus=2, memory_mb=8192)
    req = fakes.ctx().request(spec)
    assert testing.answers(RamFilter(conf), [plain], req) == ["insufficient RAM: need 8192 MB"]
    assert testing.answers(ResourcesFilter(conf, ["MEMORY_MB"]), [plain], req) == [None]
    assert testing.answers(ResourcesFilter(conf), [plain], req) == \
        ["MEMORY_MB 8192 above max_unit"]
    used = fakes.fake_host("used", vcpus=4, memory_mb=8192, memory_mb_used=1024)
    assert testing.answers(ResourcesFilter(conf), [used], req) == \
        ["insufficient MEMORY_MB: need 8192"]


def test_isolated_aggregates_and_member_of():
    gold = fakes.aggregate({"trait:CUSTOM_GOLD": "required"}, name="gold")
    plain = fakes.fake_host("plain")
    golden = fakes.fake_host("golden", aggregates=[gold], traits=["CUSTOM_GOLD"])
    conf = fakes.ctx().conf
    flt = ResourcesFilter(conf)
    with fakes.config("scheduler", enable_isolated_aggregate_filtering=True):
        spec = fakes.fake_spec()
        assert testing.answers(flt, [plain, golden], fakes.ctx().request(spec)) == \
            [None, "in an aggregate isolated to trait(s) CUSTOM_GOLD"]
        spec = fakes.fake_spec(extra_specs={"trait:CUSTOM_GOLD": "required"})
        assert testing.answers(flt, [plain, golden], fakes.ctx().request(spec)) == \
            ["lacks trait CUSTOM_GOLD", None]
    spec = fakes.fake_spec()
    assert testing.answers(flt, [plain, golden], fakes.ctx().request(spec)) == [None, None]
    spec = fakes.fake_spec(member_of=[["gold", "silver"]])
    assert testing.answers(flt, [plain, golden], fakes.ctx().request(spec)) == \
        ["not in aggregate(s) gold, silver", None]
    spec = fakes.fake_spec(member_of=["!gold"])
    assert testing.answers(flt, [plain, golden], fakes.ctx().request(spec)) == \
        [None, "in forbidden aggregate gold"]


def test_core_filter_one_instance_never_overcommits_against_itself():
    host = fakes.fake_host(vcpus=4, cpu_allocation_ratio=16.0)
    spec = fakes.fake_spec(vcpus=5)
    req = fakes.ctx().request(spec)
    assert testing.answers(CoreFilter(fakes.ctx().conf), [host], req) == \
        ["insufficient vCPUs: need 5"]
    assert Inventory(total=4, max_unit=4, allocation_ratio=16.0).broken_unit(5) == \
        "above max_unit"
