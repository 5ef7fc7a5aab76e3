"""Capacity is exact: it equals placing instances one by one until NoValidHost, with
NUMA, PCI and server groups, and it claims nothing."""
from __future__ import annotations

import os

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
        return s.scalar(sa.select(sa.func.count()).select_from(models.Allocation))


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
