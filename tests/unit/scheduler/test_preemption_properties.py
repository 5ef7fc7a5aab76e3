"""Properties of preemption over random sequences and fleets (SQLite).

* After any sequence of placements (preempting or not) and releases (of live,
  preempted, released or unknown instances), every inventory's ``used`` is the
  sum of the allocations of the instances that still hold room, the allocation
  rows are that plus those of the preempted instances not released yet, nothing
  exceeds capacity, and only instances of lower priority that were preemptible
  were ever preempted.
* On small fleets, the victims a placement names are a minimum: no host takes
  the request with fewer, and among the sets of that size none is cheaper
  (brute force over every subset of every host).
"""
from __future__ import annotations

import itertools
import random
import uuid

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oslo_config import cfg

from db import hosts as db_hosts
from db import invariants, models
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager

HOSTS = ("h1", "h2", "h3")
VCPUS = 4


@pytest.fixture
def conf():
    cfg.CONF([], project="berth")
    cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter"],
                          group="filter_scheduler")
    cfg.CONF.set_override("weight_classes", [], group="filter_scheduler")
    cfg.CONF.set_override("max_per_host_per_minute", 0, group="preemption")
    cfg.CONF.set_override("max_victims", VCPUS, group="preemption")
    yield cfg.CONF
    cfg.CONF.clear_override("enabled_filters", group="filter_scheduler")
    cfg.CONF.clear_override("weight_classes", group="filter_scheduler")
    cfg.CONF.clear_override("max_per_host_per_minute", group="preemption")
    cfg.CONF.clear_override("max_victims", group="preemption")


@pytest.fixture
def sched(sqlite_db, conf):
    hosts = [{"host": h, "vcpus": VCPUS, "memory_mb": 8192, "local_gb": 100,
              "cpu_allocation_ratio": 1.0} for h in HOSTS]
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": hosts}))
    return FilterScheduler(HostManager(sqlite_db, conf), conf)


def _request(sched, vcpus, priority, preemptible, host=None):
    data = {"flavor": {"vcpus": vcpus, "memory_mb": 256, "root_gb": 1, "extra_specs": {
        "berth:priority": str(priority),
        "berth:preemptible": "true" if preemptible else "false"}}}
    if host:
        data["force_hosts"] = [host]
    return sched.parse_request(data)


def _ledger(db):
    """(used VCPU per host, allocation rows' VCPU per host, preempted uuids)."""
    cn, rp = models.ComputeNode.__table__, models.ResourceProvider.__table__
    inv, al = models.ProviderInventory.__table__, models.Allocation.__table__
    cons = models.Consumer.__table__
    with db.reader_connection() as conn:
        used = dict(conn.execute(
            sa.select(cn.c.host, inv.c.used).join(rp, rp.c.id == inv.c.provider_id)
            .join(cn, cn.c.id == rp.c.compute_node_id).where(inv.c.resource_class == "VCPU")
        ).all())
        rows: dict[str, int] = {}
        for host, amount in conn.execute(
                sa.select(cn.c.host, al.c.amount).join(cons, cons.c.id == al.c.consumer_id)
                .join(cn, cn.c.id == cons.c.compute_node_id)
                .where(al.c.resource_class == "VCPU")):
            rows[host] = rows.get(host, 0) + amount
        preempted = set(conn.execute(sa.select(cons.c.uuid).where(
            cons.c.consumer_type == "preempted")).scalars())
        assert invariants.check(conn) == []
    return used, rows, preempted


ops = st.lists(st.one_of(
    st.tuples(st.just("place"), st.integers(1, 3), st.integers(-1, 2), st.booleans(),
              st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 30))), min_size=1, max_size=14)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_usage_is_what_live_instances_hold(sched, steps):
    db = sched.db
    live: dict[str, tuple[str, int, int, bool]] = {}    # uuid -> host, vcpus, prio, preemptible
    preempted: dict[str, tuple[str, int]] = {}          # uuid -> host, vcpus
    made: list[str] = []
    gone: set[str] = set()      # released: a release sent again answers True (remembered)
    for step in steps:
        if step[0] == "place":
            _, vcpus, priority, preemptible, allow = step
            inst = str(uuid.uuid4())
            made.append(inst)
            try:
                [[sel]] = sched.select_destinations(
                    _request(sched, vcpus, priority, preemptible), [inst],
                    allow_preemption=allow)
            except exception.NoValidHost:
                continue
            for v in sel.preempted:
                host, v_vcpus, v_prio, v_preemptible = live.pop(v["instance_uuid"])
                assert allow and host == sel.host
                assert v_prio < priority and v_preemptible
                preempted[v["instance_uuid"]] = (host, v_vcpus)
            live[inst] = (sel.host, vcpus, priority, preemptible)
        else:
            if not made:
                continue
            inst = made[step[1] % len(made)]
            released = sched.release(inst)
            assert released == (inst in live or inst in preempted or inst in gone)
            if inst in live or inst in preempted:
                gone.add(inst)
            live.pop(inst, None)
            preempted.pop(inst, None)
        used, rows, in_db = _ledger(db)
        for host in HOSTS:
            holding = sum(v for h, v, _p, _e in live.values() if h == host)
            waiting = sum(v for h, v in preempted.values() if h == host)
            assert used.get(host, 0) == holding <= VCPUS
            assert rows.get(host, 0) == holding + waiting
        assert in_db == set(preempted)
    for inst in made:
        sched.release(inst)
    used, rows, in_db = _ledger(db)
    assert set(used.values()) == {0} and not rows and not in_db


def _brute_force(instances, vcpus, priority):
    """The fewest victims any host needs, and the cheapest cost among those sets
    (least_disruption's key), over every subset of every host's eligible instances."""
    best = None
    for host in HOSTS:
        here = [i for i in instances if i["host"] == host]
        free = VCPUS - sum(i["vcpus"] for i in here)
        eligible = [i for i in here if i["preemptible"] and i["priority"] < priority]
        for k in range(0, len(eligible) + 1):
            found = [c for c in itertools.combinations(eligible, k)
                     if free + sum(i["vcpus"] for i in c) >= vcpus]
            if found:
                for c in found:
                    key = (k, max((i["priority"] for i in c), default=0),
                           sum(i["priority"] for i in c),
                           -min((i["order"] for i in c), default=0))
                    best = key if best is None or key < best else best
                break
    return best


def test_victims_are_a_brute_force_minimum(sched):
    rng = random.Random(29)
    cases = preempting = 0
    for _round in range(25):
        instances = []
        for host in HOSTS:
            room = VCPUS
            while room:
                size = rng.choice([1, 1, 2, 3])
                if size > room:
                    continue
                room -= size
                if rng.random() < 0.15:
                    continue            # leave some room free
                inst = {"uuid": str(uuid.uuid4()), "host": host, "vcpus": size,
                        "priority": rng.randint(-2, 2), "preemptible": rng.random() < 0.6,
                        "order": len(instances)}
                sched.select_destinations(
                    _request(sched, size, inst["priority"], inst["preemptible"], host),
                    [inst["uuid"]])
                instances.append(inst)
        for _ask in range(4):
            vcpus, priority = rng.randint(1, VCPUS), rng.randint(-1, 3)
            expected = _brute_force(instances, vcpus, priority)
            try:
                [[sel]] = sched.select_destinations(
                    _request(sched, vcpus, priority, False), [str(uuid.uuid4())],
                    allow_preemption=True, dry_run=True)
            except exception.NoValidHost:
                assert expected is None, (vcpus, priority, instances)
                continue
            assert expected is not None
            by_uuid = {i["uuid"]: i for i in instances}
            chosen = [by_uuid[v["instance_uuid"]] for v in sel.preempted]
            key = (len(chosen), max((i["priority"] for i in chosen), default=0),
                   sum(i["priority"] for i in chosen),
                   -min((i["order"] for i in chosen), default=0))
            assert key == expected, (vcpus, priority, instances, sel.preempted)
            cases += 1
            preempting += bool(chosen)
        for inst in instances:
            sched.release(inst["uuid"])
    assert cases >= 40 and preempting >= 15, (cases, preempting)
