"""Issue 15, part 2: the work and the error of one request are bounded by what the
request may legitimately ask for, not by the numbers written in it."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from db.errors import MAX_REASON, InvalidRequest
from numa.errors import NumaError
from numa.request import instance_topology_from_specs, parse_cpu_spec
from scheduler import exception
from scheduler import filter_scheduler as fs_mod
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.request_spec import MAX_PCI_REQUESTS, RequestSpec
from tests import ledger

FLAVOR = {"vcpus": 4, "memory_mb": 1024, "root_gb": 1}


def spec(extra_specs=None, **kw):
    return {"flavor": dict(FLAVOR, extra_specs=extra_specs or {}), **kw}


@pytest.mark.parametrize("key, value, other", [
    ("hw:numa_cpus.0", "0-10000000", {"hw:numa_nodes": "1", "hw:numa_mem.0": "1024"}),
    ("hw:numa_cpus.0", "0-" + "9" * 18, {"hw:numa_nodes": "1", "hw:numa_mem.0": "1024"}),
    ("hw:numa_cpus.0", "^0-" + "9" * 18 + ",0", {"hw:numa_nodes": "1",
                                                 "hw:numa_mem.0": "1024"}),
    ("hw:cpu_dedicated_mask", "^0-" + "9" * 30, {"hw:cpu_policy": "mixed"}),
    ("hw:cpu_dedicated_mask", ",".join(str(i) for i in range(1000)),
     {"hw:cpu_policy": "mixed"}),
])
def test_huge_cpu_ranges_are_refused_before_expansion(key, value, other):
    """Expanded, these would take gigabytes (the 10**18 ones cannot be expanded at
    all); refused, the reason names the range and the flavor's size in a few words."""
    with pytest.raises(InvalidRequest) as caught:
        RequestSpec.from_primitive(spec({key: value, **other}))
    assert caught.value.field == f"flavor.extra_specs.{key}"
    assert "do not exist" in caught.value.reason
    assert len(caught.value.reason) < 200


def test_cpu_spec_item_count_is_bounded():
    with pytest.raises(NumaError) as caught:
        parse_cpu_spec(",".join(["0"] * 5000), "f", 4096)
    assert "items" in caught.value.reason


def test_cpu_lists_in_reasons_are_ranges_and_short():
    """4,095 vCPUs in no cell: said as one range, not 4,095 numbers."""
    with pytest.raises(NumaError) as caught:
        instance_topology_from_specs(4096, 4096, {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0",
                                                  "hw:numa_mem.0": "4096"}, {})
    assert caught.value.reason == "vCPUs 1-4095 are in no cell"
    scattered = ",".join(str(i) for i in range(0, 4096, 2))
    with pytest.raises(NumaError) as caught:
        instance_topology_from_specs(4096, 4096, {"hw:numa_nodes": "1",
                                                  "hw:numa_cpus.0": scattered,
                                                  "hw:numa_mem.0": "4096"}, {})
    assert caught.value.reason.startswith("vCPUs 1,3,5,")
    assert caught.value.reason.endswith("... are in no cell")
    assert len(caught.value.reason) < 120


def test_invalid_request_reason_and_field_are_cut():
    e = InvalidRequest(field="f" * 5000, reason="r" * 100000)
    assert len(e.reason) == MAX_REASON and e.reason.endswith("...")
    assert len(e.field) <= 300 and len(str(e)) < 1400
    assert e.kwargs == {"field": e.field, "reason": e.reason}



@pytest.fixture
def pci_aliases():
    from pci import request as pci_request
    return pci_request.parse_aliases(
        ['{"name": "nic", "vendor_id": "8086", "product_id": "154c", '
         '"device_type": "type-VF"}'])


def test_pci_alias_items_are_capped(pci_aliases):
    value = ",".join(["nic:1"] * 680)
    with pytest.raises(InvalidRequest) as caught:
        RequestSpec.from_primitive(spec({"pci_passthrough:alias": value}),
                                   pci_aliases=pci_aliases)
    assert caught.value.field == "flavor.extra_specs.pci_passthrough:alias"
    ok = ",".join(["nic:1"] * MAX_PCI_REQUESTS)
    parsed = RequestSpec.from_primitive(spec({"pci_passthrough:alias": ok}),
                                        pci_aliases=pci_aliases)
    assert len(parsed.pci_requests) == MAX_PCI_REQUESTS


def test_alias_items_and_pci_requests_count_together(pci_aliases):
    raw = [{"count": 1, "spec": [{"vendor_id": "8086"}]}] * 40
    with pytest.raises(InvalidRequest) as caught:
        RequestSpec.from_primitive(spec({"pci_passthrough:alias": ",".join(["nic"] * 30)},
                                        pci_requests=raw), pci_aliases=pci_aliases)
    assert caught.value.field == "pci_requests"


def test_pci_device_count_is_capped(pci_aliases):
    with pytest.raises(InvalidRequest) as caught:
        RequestSpec.from_primitive(spec({"pci_passthrough:alias": "nic:1000000"}),
                                   pci_aliases=pci_aliases)
    assert caught.value.field == "flavor.extra_specs.pci_passthrough:alias"
    assert "1000000 devices" in caught.value.reason


# -- the scheduler: work cap and deadline ------------------------------------------------

@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    c.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter"],
                   group="filter_scheduler")
    c.set_override("weight_classes", [], group="filter_scheduler")
    yield c
    for name in ("enabled_filters", "weight_classes"):
        c.clear_override(name, group="filter_scheduler")
    for name in ("request_timeout", "max_request_work"):
        c.clear_override(name, group="scheduler")


def _sched(db, conf, n=4):
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": [
        {"host": f"h{i}", "vcpus": 16, "memory_mb": 16384, "local_gb": 100}
        for i in range(n)]}))
    return FilterScheduler(HostManager(db, conf), conf)


def _usage(db):
    with db.reader_connection() as conn:
        allocs = conn.execute(sa.select(sa.func.count()).select_from(
            models.Consumer.__table__)).scalar_one()
    return allocs, ledger.total_used(db)


def test_instances_times_hosts_cap(sqlite_db, conf):
    conf.set_override("max_request_work", 10, group="scheduler")
    s = _sched(sqlite_db, conf, n=4)
    with pytest.raises(InvalidRequest) as caught:
        s.select_destinations(s.parse_request(spec(num_instances=3)))
    assert caught.value.field == "num_instances"
    assert "3 instances x 4 hosts" in caught.value.reason
    assert _usage(sqlite_db) == (0, 0)
    assert len(s.select_destinations(s.parse_request(spec(num_instances=2)))) == 2


class FakeClock:
    """The deadlines' clock, moved by the test only."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_deadline_fails_the_request_and_releases_its_claims(sqlite_db, conf, monkeypatch):
    """Each instance takes one second: the third instance starts past a 1.5 s
    deadline; the two instances claimed before it are released."""
    clock = FakeClock()
    monkeypatch.setattr(fs_mod, "_clock", clock)
    conf.set_override("request_timeout", 1.5, group="scheduler")
    s = _sched(sqlite_db, conf)
    place = s._place_instance

    def slow_place(*args):
        placed = place(*args)
        clock.now += 1.0
        return placed
    monkeypatch.setattr(s, "_place_instance", slow_place)
    with pytest.raises(exception.RequestTimeout) as caught:
        s.select_destinations(s.parse_request(spec(num_instances=3)))
    assert caught.value.instance_index == 2
    assert caught.value.timeout == 1.5
    assert _usage(sqlite_db) == (0, 0)
    # the cache agrees with the database: the whole fleet is free again
    assert sum(h.vcpus_used for h in s.host_manager.host_states()) == 0


def test_deadline_is_checked_between_candidates(sqlite_db, conf, monkeypatch):
    """Every host refuses at claim time, one second each, so the request walks
    its candidates; the deadline stops the walk after the third with
    RequestTimeout instead of NoValidHost."""
    clock = FakeClock()
    monkeypatch.setattr(fs_mod, "_clock", clock)
    conf.set_override("request_timeout", 2.5, group="scheduler")
    s = _sched(sqlite_db, conf, n=6)
    tried = []

    def refuse(req, host, *args):
        tried.append(host.host)
        clock.now += 1.0
    monkeypatch.setattr(s, "_try_consume", refuse)
    with pytest.raises(exception.RequestTimeout) as caught:
        s.select_destinations(s.parse_request(spec()))
    assert caught.value.instance_index == 0
    assert len(tried) == 3


def test_no_deadline_when_timeout_is_zero(sqlite_db, conf, monkeypatch):
    ticks = iter(range(0, 10 ** 9, 1000))
    monkeypatch.setattr(fs_mod, "_clock", lambda: float(next(ticks)))
    conf.set_override("request_timeout", 0, group="scheduler")
    s = _sched(sqlite_db, conf)
    assert len(s.select_destinations(s.parse_request(spec(num_instances=3)))) == 3


def test_capacity_count_stops_at_the_deadline(sqlite_db, conf, monkeypatch):
    """A count is bounded by request_timeout (not by max_request_work): one
    second per counted instance stops it with RequestTimeout, nothing claimed."""
    from scheduler import capacity

    clock = FakeClock()
    monkeypatch.setattr(fs_mod, "_clock", clock)
    conf.set_override("request_timeout", 2.5, group="scheduler")
    conf.set_override("max_request_work", 1, group="scheduler")
    s = _sched(sqlite_db, conf, n=6)
    one_spec = s.parse_request(spec())
    count = s._count_one

    def slow_count(*args):
        count(*args)
        clock.now += 1.0
    monkeypatch.setattr(s, "_count_one", slow_count)
    with pytest.raises(exception.RequestTimeout) as caught:
        capacity.count(s, one_spec)
    assert caught.value.instance_index >= 3     # the instances counted, not the round
    assert _usage(sqlite_db) == (0, 0)
    monkeypatch.setattr(s, "_count_one", count)
    assert capacity.count(s, one_spec)["fits"] > 6


def test_a_capacity_call_of_several_flavors_shares_one_deadline(sqlite_db, conf, monkeypatch):
    """Three flavors, per zone and per aggregate: the whole call stops at one
    request_timeout, not one per count."""
    from scheduler import capacity

    clock = FakeClock()
    monkeypatch.setattr(fs_mod, "_clock", clock)
    conf.set_override("request_timeout", 2.5, group="scheduler")
    s = _sched(sqlite_db, conf, n=6)
    count = s._count_one

    def slow_count(*args):
        count(*args)
        clock.now += 0.5
    monkeypatch.setattr(s, "_count_one", slow_count)
    requests = capacity.parse_requests([spec()["flavor"]] * 3, s.parse_request)
    with pytest.raises(exception.RequestTimeout):
        capacity.capacity(s, requests, per_az=True, per_aggregate=True)
    assert clock.now <= 3.0
