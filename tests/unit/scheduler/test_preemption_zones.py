"""The preemptions per minute of an availability zone (``[preemption]
max_per_az_per_minute``), counted in the claim's transaction."""
from __future__ import annotations

import uuid

import pytest

from db import hosts as db_hosts
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from tests.unit.scheduler import test_preemption as base

conf = base.conf        # the fixture
U = [str(uuid.UUID(int=i + 1)) for i in range(40)]


def _zoned(db, conf):
    conf.set_override("enabled_filters", ["AvailabilityZoneFilter", "ComputeFilter",
                                          "RamFilter", "CoreFilter"],
                      group="filter_scheduler")
    hosts = [{"host": n, "vcpus": 1, "memory_mb": 4096, "local_gb": 100,
              "cpu_allocation_ratio": 1.0} for n in ("a", "b", "c")]
    db_hosts.import_fleet(db, fleet_mod.load_fleet({
        "hosts": hosts,
        "aggregates": [{"name": "zone-1", "availability_zone": "az1", "hosts": ["a", "b"]},
                       {"name": "zone-2", "availability_zone": "az2", "hosts": ["c"]}]}))
    return FilterScheduler(HostManager(db, conf), conf)


def test_zone_budget_stops_the_second_preemption_in_the_zone(any_db, conf):
    conf.set_override("max_per_az_per_minute", 1, group="preemption")
    try:
        sched = _zoned(any_db, conf)
        for i, host in enumerate("abc"):
            base._boot(sched, U[i], vcpus=1, preemptible=True, host=host)
        first = sched.select_destinations(
            base._spec(sched, vcpus=1, priority=1, availability_zone="az1"), [U[10]],
            allow_preemption=True)[0][0]
        assert first.host in ("a", "b") and len(first.preempted) == 1
        with pytest.raises(exception.NoValidHost) as e:
            sched.select_destinations(
                base._spec(sched, vcpus=1, priority=1, availability_zone="az1"), [U[11]],
                allow_preemption=True)
        assert "max_per_az_per_minute" in str(e.value)
        # another zone has its own budget
        other = sched.select_destinations(
            base._spec(sched, vcpus=1, priority=1), [U[12]], allow_preemption=True)[0][0]
        assert other.host == "c" and len(other.preempted) == 1
        base._check(any_db)
    finally:
        conf.clear_override("max_per_az_per_minute", group="preemption")


def test_no_zone_budget_by_default(any_db, conf):
    sched = _zoned(any_db, conf)
    for i, host in enumerate("ab"):
        base._boot(sched, U[i], vcpus=1, preemptible=True, host=host)
    for j in range(2):
        [[sel]] = sched.select_destinations(
            base._spec(sched, vcpus=1, priority=1, availability_zone="az1"), [U[10 + j]],
            allow_preemption=True)
        assert len(sel.preempted) == 1

