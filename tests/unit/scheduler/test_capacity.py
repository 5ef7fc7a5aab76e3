"""Capacity is exact: it equals placing instances one by one until NoValidHost, with
NUMA, PCI and server groups, and it claims nothing."""
from __future__ import annotations

import os
import uuid as uuidlib

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import models
from scheduler import capacity, exception, fleet, simulate

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
SAMPLE = os.path.abspath(os.path.join(ROOT, "etc", "berth", "fleet.sample.yaml"))
ALIAS = ('{"name": "vf", "vendor_id": "8086", "product_id": "154c", '
         '"device_type": "type-VF"}')
CONFIG = {"pci": {"alias": [ALIAS]}}

GROUP = "6e7f0f9e-0d9b-4c1e-9f0a-1f2e3d4c5b6a"
REQUESTS = {
    "big": {"flavor": {"name": "big", "vcpus": 16, "memory_mb": 65536, "root_gb": 100}},
    "pinned-hugepages": {"flavor": {
        "name": "pinned-hugepages", "vcpus": 4, "memory_mb": 4096, "root_gb": 20,
        "extra_specs": {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "1GB"}}},
    "sriov": {"flavor": {"name": "sriov", "vcpus": 2, "memory_mb": 4096, "root_gb": 20,
                         "extra_specs": {"pci_passthrough:alias": "vf:2"}}},
    "anti-affinity": {"flavor": {"name": "anti-affinity", "vcpus": 2, "memory_mb": 2048,
                                 "root_gb": 10},
                      "instance_group": {"uuid": GROUP, "policy": "anti-affinity",
                                         "rules": {"max_server_per_host": 2}}},
    "affinity": {"flavor": {"name": "affinity", "vcpus": 8, "memory_mb": 16384,
                            "root_gb": 10},
                 "instance_group": {"uuid": GROUP, "policy": "affinity"}},
    "in-az2": {"flavor": {"name": "in-az2", "vcpus": 8, "memory_mb": 32768, "root_gb": 40},
               "availability_zone": "az2"},
}


@pytest.fixture
def scheduler():
    with simulate.config_overrides(cfg.CONF, CONFIG):
        with simulate.throwaway_scheduler(fleet.load_fleet_file(SAMPLE), cfg.CONF) \
                as (db, sched):
            yield db, sched


def allocations(db) -> int:
    with db.reader() as s:
        return s.scalar(sa.select(sa.func.count()).select_from(models.Consumer))


def one_by_one(sched, data) -> int:
    placed = 0
    while True:
        try:
            sched.select_destinations(sched.parse_request(data))
        except exception.NoValidHost:
            return placed
        placed += 1
        assert placed < 2000


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_capacity_equals_placing_one_by_one(scheduler, name):
    db, sched = scheduler
    [(label, spec)] = capacity.parse_requests(REQUESTS[name], sched.parse_request)
    assert label == name
    counted = capacity.count(sched, spec)
    assert allocations(db) == 0                 # counting claims nothing
    assert counted["fits"] > 0 and counted["limited_by"].startswith("0/")
    assert one_by_one(sched, REQUESTS[name]) == counted["fits"]
    # And once full, nothing more fits.
    assert capacity.count(sched, spec)["fits"] == 0


def test_capacity_counts_what_is_already_placed(scheduler):
    db, sched = scheduler
    [(_n, spec)] = capacity.parse_requests(REQUESTS["pinned-hugepages"], sched.parse_request)
    before = capacity.count(sched, spec)["fits"]
    for _ in range(3):
        sched.select_destinations(spec)
    assert capacity.count(sched, spec)["fits"] == before - 3


def test_per_az_and_per_aggregate(scheduler):
    _db, sched = scheduler
    requests = capacity.parse_requests([REQUESTS["big"], {"vcpus": 1, "memory_mb": 512,
                                                         "root_gb": 1}], sched.parse_request)
    rows = capacity.capacity(sched, requests, per_az=True, per_aggregate=True)
    big, small = rows
    assert small["request"] == "1vcpu-512mb-1gb"
    for row in rows:
        assert set(row["per_az"]) == {"az1", "az2"}
        # Hosts are independent for a request without a group: zones add up.
        assert sum(row["per_az"].values()) == row["fits"]
        assert row["per_aggregate"]["az1"] == row["per_az"]["az1"]
    for name, hosts in capacity._zones_and_aggregates(sched)[1].items():
        only = REQUESTS["big"] | {"force_hosts": hosts}
        assert big["per_aggregate"][name] == one_by_one_dry(sched, only), name


def one_by_one_dry(sched, data) -> int:
    """Placing in a growing dry run, the way an operator would check by hand."""
    n = 1
    while True:
        try:
            sched.select_destinations(sched.parse_request(data | {"num_instances": n}),
                                      dry_run=True)
        except exception.NoValidHost:
            return n - 1
        n += 1


def test_bad_requests_name_the_field(scheduler):
    _db, sched = scheduler
    with pytest.raises(exception.InvalidRequest) as e:
        capacity.parse_requests([REQUESTS["big"], {"flavor": {"vcpus": 0, "memory_mb": 1,
                                                              "root_gb": 1}}],
                                sched.parse_request)
    assert e.value.field == "requests[1].flavor.vcpus"
    with pytest.raises(exception.InvalidRequest, match="no request"):
        capacity.parse_requests([], sched.parse_request)


def test_format_capacity_shows_counts_and_reasons(scheduler):
    _db, sched = scheduler
    rows = capacity.capacity(sched, capacity.parse_requests(REQUESTS["sriov"],
                                                           sched.parse_request), per_az=True)
    text = capacity.format_capacity(rows)
    assert text.splitlines()[0].split() == ["REQUEST", "FITS", "LIMITED", "BY"]
    assert f"sriov {rows[0]['fits']}" in " ".join(text.split())
    assert "az az1" in text


def test_capacity_is_not_bounded_by_max_request_work(scheduler):
    """The count is not one request of many instances: max_request_work (which
    refused `capacity` on a 1,000-host fleet with a 4-vCPU flavor) does not apply."""
    _db, sched = scheduler
    hosts = sched.host_manager.columns.n
    [(_n, spec)] = capacity.parse_requests(REQUESTS["anti-affinity"], sched.parse_request)
    unbounded = capacity.count(sched, spec)["fits"]
    assert unbounded * hosts > hosts
    cfg.CONF.set_override("max_request_work", hosts, group="scheduler")
    try:
        assert capacity.count(sched, spec)["fits"] == unbounded
        with pytest.raises(exception.InvalidRequest, match="max_request_work"):
            sched.select_destinations(spec.replace(num_instances=2), dry_run=True)
    finally:
        cfg.CONF.clear_override("max_request_work", group="scheduler")


@pytest.fixture(scope="module")
def realistic(tmp_path_factory):
    """A generated fleet of several hardware models with usage on it, the bench's
    filters, weighers and PCI aliases, and one request of every kind of its trace."""
    from db.api import Database
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager
    from tools.bench import fleet as bench_fleet
    from tools.bench import replay as bench_replay
    from tools.bench import trace as bench_trace

    fleet_ = bench_fleet.generate_fleet(60, seed=11)
    kinds = {}
    for op in bench_trace.generate_trace(fleet_, 400, seed=12):
        if op["op"] == "select":
            kinds.setdefault(op["kind"], op["spec"])
    # groups no instance belongs to yet: the first pick decides (affinity)
    for policy in ("affinity", "anti-affinity"):
        kinds[f"new-{policy}"] = kinds["plain"] | {"instance_group": {
            "uuid": str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, policy)), "policy": policy}}
    bdb = bench_fleet.create_database("sqlite", str(tmp_path_factory.mktemp("capacity")))
    bench_fleet.load_fleet(bdb.db, fleet_)
    conf = cfg.CONF
    bench_replay.configure(conf, bench_replay.realistic_plugins())
    conf.set_override("max_request_work", 0, group="scheduler")
    try:
        sched = FilterScheduler(HostManager(Database(bdb.url), conf), conf, seed=3)
        yield sched, kinds
    finally:
        for name in ("enabled_filters", "weight_classes"):
            conf.clear_override(name, group="filter_scheduler")
        conf.clear_override("alias", group="pci")
        conf.clear_override("service_down_time")
        conf.clear_override("max_request_work", group="scheduler")
        bdb.drop()


def test_rounds_count_what_one_dry_run_of_many_instances_places(realistic):
    """Per request kind of the realistic trace (pinned CPUs with every policy,
    pages, two cells, VFs, GPUs, groups, hints, zones): the count made in rounds
    equals what one dry run placing instances one after the other places before
    its first NoValidHost."""
    sched, kinds = realistic
    assert len(kinds) >= 15
    checked = 0
    for kind, data in sorted(kinds.items()):
        spec = sched.parse_request({k: v for k, v in data.items()
                                    if k not in ("num_instances", "instance_uuids")})
        counted = capacity.count(sched, spec)
        fits = counted["fits"]
        try:
            sched.select_destinations(spec.replace(num_instances=fits + 1), dry_run=True)
        except exception.NoValidHost as e:
            assert e.summary["instance_index"] == fits, kind
            if not fits:
                assert e.reason == counted["limited_by"], kind
        else:
            raise AssertionError(f"{kind}: {fits + 1} instances fit, counted {fits}")
        if fits:
            assert len(sched.select_destinations(spec.replace(num_instances=fits),
                                                 dry_run=True)) == fits
            checked += 1
    assert checked >= 10


def _dry_count(sched, spec) -> int:
    """Instances one dry run places one after the other before its NoValidHost."""
    k = 1
    while True:
        try:
            sched.select_destinations(spec.replace(num_instances=k), dry_run=True)
        except exception.NoValidHost:
            return k - 1
        k += 1


@pytest.mark.parametrize("rules", [{}, {"max_server_per_host": 2}])
def test_group_members_are_counted_per_host_name(sqlite_db, rules):
    """A host with three nodes takes anti-affinity members per host name: one round
    must not count a member on each of its nodes (it counted 4 where 2 fit)."""
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager
    from tests.unit.scheduler.test_group_claims import _fleet

    _fleet(sqlite_db, {"x": 3, "y": 1})
    overrides = {"filter_scheduler": {"enabled_filters": [
        "ComputeFilter", "RamFilter", "CoreFilter", "ServerGroupAntiAffinityFilter",
        "ServerGroupAffinityFilter"]}, "scheduler": {"max_request_work": 0}}
    with simulate.config_overrides(cfg.CONF, overrides):
        sched = FilterScheduler(HostManager(sqlite_db, cfg.CONF), cfg.CONF, seed=1)
        group = {"uuid": GROUP, "policy": "anti-affinity"}
        if rules:
            group["rules"] = rules
        spec = sched.parse_request({"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 0},
                                    "instance_group": group})
        counted = capacity.count(sched, spec)["fits"]
        assert counted == _dry_count(sched, spec) == 2 * (rules.get("max_server_per_host")
                                                           or 1)


def test_a_claim_made_while_counting_is_seen(monkeypatch):
    """Another request claims a host after the count filtered its round: the host
    is checked again under its lock before it is counted, so a full host is not
    (it was counted, over its capacity on the count's copy)."""
    from scheduler.filter_scheduler import FilterScheduler

    hosts = [{"host": f"h{i}", "vcpus": 4, "memory_mb": 4096, "local_gb": 100,
              "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0} for i in range(4)]
    overrides = {"scheduler": {"max_request_work": 0}, "filter_scheduler": {
        "enabled_filters": ["ComputeFilter", "RamFilter", "CoreFilter"]}}
    flavor = {"vcpus": 4, "memory_mb": 4096, "root_gb": 1}
    with simulate.config_overrides(cfg.CONF, overrides), \
            simulate.throwaway_scheduler(fleet.load_fleet({"hosts": hosts}), cfg.CONF) \
            as (db, sched):
        spec = sched.parse_request({"flavor": flavor})
        assert capacity.count(sched, spec)["fits"] == 4
        show = FilterScheduler._show_dry_claim
        claimed = []

        def claim_once(self, req, host, consumed, uuid):
            show(self, req, host, consumed, uuid)
            if not claimed:     # as another green thread would, while the count yields
                other = "h0" if host.host == "h3" else "h3"
                claimed.append(sched.select_destinations(sched.parse_request(
                    {"flavor": flavor, "force_hosts": [other]}))[0][0].host)
        monkeypatch.setattr(FilterScheduler, "_show_dry_claim", claim_once)
        counted = capacity.count(sched, spec)
        monkeypatch.setattr(FilterScheduler, "_show_dry_claim", show)
        assert claimed and allocations(db) == 1
        assert counted["fits"] == 3, counted
        assert "claim" in counted["limited_by"] and "RamFilter" in counted["limited_by"]
        assert capacity.count(sched, spec)["fits"] == 3
