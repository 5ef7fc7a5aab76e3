"""Preemption in-process on SQLite and MariaDB: a request of higher priority that
fits nowhere takes the room of the fewest, cheapest instances of lower
priority, in one transaction with its claim; the rules of who may be preempted,
the budgets, dry runs, releases of victims and the ledger's invariants."""
from __future__ import annotations

import datetime
import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import claims, invariants, models
from db import hosts as db_hosts
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager

NUMA = {"cells": [{"id": 0, "socket": 0, "cpuset": [0, 1], "pcpuset": [2, 3, 4, 5],
                   "memory_mb": 8192},
                  {"id": 1, "socket": 1, "cpuset": [6, 7], "pcpuset": [8, 9, 10, 11],
                   "memory_mb": 8192}]}


@pytest.fixture
def conf():
    cfg.CONF([], project="berth")
    cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                              "NUMATopologyFilter",
                                              "ServerGroupAntiAffinityFilter"],
                          group="filter_scheduler")
    cfg.CONF.set_override("weight_classes", [], group="filter_scheduler")
    yield cfg.CONF
    cfg.CONF.clear_override("enabled_filters", group="filter_scheduler")
    cfg.CONF.clear_override("weight_classes", group="filter_scheduler")
    for name in ("max_victims", "max_per_host_per_minute", "preempt_non_preemptible",
                 "enabled", "project_priorities"):
        cfg.CONF.clear_override(name, group="preemption")


def _world(db, conf, names=("a", "b"), vcpus=8, memory_mb=8192, numa=False):
    hosts = [{"host": n, "vcpus": vcpus, "memory_mb": memory_mb, "local_gb": 200,
              "cpu_allocation_ratio": 1.0, **({"numa_topology": NUMA} if numa else {})}
             for n in names]
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))
    return FilterScheduler(HostManager(db, conf), conf)


def _spec(sched, vcpus=2, memory_mb=1024, priority=None, preemptible=None, host=None,
          extra=None, **more):
    specs = dict(extra or {})
    if priority is not None:
        specs["berth:priority"] = str(priority)
    if preemptible is not None:
        specs["berth:preemptible"] = "true" if preemptible else "false"
    data = {"flavor": {"vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 1,
                       "extra_specs": specs}, **more}
    if host:
        data["force_hosts"] = [host]
    return sched.parse_request(data)


def _boot(sched, label=None, **kw):
    uuid_ = label or str(uuid.uuid4())
    return sched.select_destinations(_spec(sched, **kw), [uuid_])[0][0]


def _victims(selection):
    return sorted(v["instance_uuid"] for v in selection.preempted)


def _types(db):
    c = models.Consumer.__table__
    with db.reader_connection() as conn:
        return {r.uuid: r.consumer_type for r in conn.execute(sa.select(c))}


def _check(db):
    with db.reader_connection() as conn:
        assert invariants.check(conn) == []


U = [str(uuid.UUID(int=i + 1)) for i in range(40)]


def test_preempts_the_fewest_lowest_priority_newest(any_db, conf):
    sched = _world(any_db, conf, names=("a",))
    # a: 8 vCPUs: 2 + 2 preemptible at priority 0, 2 preemptible at priority -5,
    # 2 not preemptible
    _boot(sched, U[0], vcpus=2, preemptible=True)
    _boot(sched, U[1], vcpus=2, preemptible=True)
    _boot(sched, U[2], vcpus=2, preemptible=True, priority=-5)
    _boot(sched, U[3], vcpus=2)
    _check(any_db)
    spec = _spec(sched, vcpus=2, priority=10)
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(spec, [U[10]])
    assert "preemption" not in str(e.value)      # the caller did not allow it
    [[sel]] = sched.select_destinations(spec, [U[10]], allow_preemption=True)
    assert _victims(sel) == [U[2]]               # lowest priority first
    assert _types(any_db)[U[2]] == "preempted"
    _check(any_db)
    # the next one takes the newest of the two at priority 0
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=10), [U[11]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[1]]
    # 4 vCPUs: U[0] alone is 2: not enough; U[3] is not preemptible
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(_spec(sched, vcpus=4, priority=10), [U[12]],
                                  allow_preemption=True)
    assert "preemption" in str(e.value)
    _check(any_db)
    # releasing a victim gives nothing back; sent again, it answers released
    usage = sched.host_manager.get(sel_node(sched, "a")).usage
    assert sched.release(U[2]) is True
    assert sched.release(U[2]) is True
    assert sched.host_manager.get(sel_node(sched, "a")).usage == usage
    _check(any_db)


def sel_node(sched, host):
    return sched.host_manager.hosts_named(host)[0].node_id


def test_never_equal_or_higher_priority(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=4)
    _boot(sched, U[0], vcpus=4, preemptible=True, priority=5)
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(_spec(sched, vcpus=2, priority=5), [U[1]],
                                  allow_preemption=True)
    assert "no instance of lower priority may be preempted" in str(e.value)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=6), [U[1]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[0]]


def test_two_victims_when_one_is_not_enough_and_max_victims(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=4)
    for i in range(4):
        _boot(sched, U[i], vcpus=1, preemptible=True)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[10]],
                                        allow_preemption=True)
    assert len(sel.preempted) == 2
    conf.set_override("max_victims", 1, group="preemption")
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[11]],
                                  allow_preemption=True)
    assert "max_victims" in str(e.value)
    _check(any_db)


def test_dry_run_lists_victims_and_claims_nothing(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=4)
    _boot(sched, U[0], vcpus=4, preemptible=True)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                        allow_preemption=True, dry_run=True)
    assert _victims(sel) == [U[0]]
    assert _types(any_db) == {U[0]: "instance"}
    _check(any_db)


def test_pinned_numa_victim_frees_its_cpus(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=12, memory_mb=16384, numa=True)
    pinned = {"hw:cpu_policy": "dedicated"}
    for i in range(4):
        _boot(sched, U[i], vcpus=2, memory_mb=1024, extra=pinned, preemptible=True)
    # 8 pCPUs pinned; 4 dedicated vCPUs on one cell need two victims of that cell
    with pytest.raises(exception.NoValidHost):
        _boot(sched, U[10], vcpus=4, extra=pinned)
    [[sel]] = sched.select_destinations(
        _spec(sched, vcpus=4, extra=pinned, priority=3), [U[10]], allow_preemption=True)
    assert len(sel.preempted) == 2
    _check(any_db)


def test_budget_per_host_per_minute(any_db, conf):
    conf.set_override("max_per_host_per_minute", 1, group="preemption")
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    _boot(sched, U[0], vcpus=1, preemptible=True)
    _boot(sched, U[1], vcpus=1, preemptible=True)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=1, priority=1), [U[10]],
                                        allow_preemption=True)
    assert len(sel.preempted) == 1
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(_spec(sched, vcpus=1, priority=1), [U[11]],
                                  allow_preemption=True)
    assert "max_per_host_per_minute" in str(e.value)
    _check(any_db)


def test_anti_affinity_member_preempted_makes_room_for_the_group(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=8)
    group = {"uuid": "11111111-2222-3333-4444-555555555555", "policy": "anti-affinity"}
    _boot(sched, U[0], vcpus=1, preemptible=True, instance_group=group, project_id="p")
    # the group has its one member on a: a second one fits only if it goes
    with pytest.raises(exception.NoValidHost):
        _boot(sched, U[1], vcpus=1, instance_group=group, project_id="p")
    [[sel]] = sched.select_destinations(
        _spec(sched, vcpus=1, priority=1, instance_group=group, project_id="p"), [U[1]],
        allow_preemption=True)
    assert _victims(sel) == [U[0]]
    _check(any_db)


def test_preempted_listing(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    _boot(sched, U[0], vcpus=2, preemptible=True)
    sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                              allow_preemption=True)
    rows = claims.list_allocations(any_db, preempted=True)
    assert [(r["instance_uuid"], r["consumer_type"], r["preempted_by"]) for r in rows] == \
        [(U[0], "preempted", U[1])]
    assert rows[0]["resources"]["VCPU"] == 2
    assert isinstance(rows[0]["preempted_at"], datetime.datetime)
