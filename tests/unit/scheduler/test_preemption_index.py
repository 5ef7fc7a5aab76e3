"""The preemptible index and the vector side of the search: the instances a
request of higher priority may preempt are found from cached columns (no
database search per request), kept in step with claims, confirmations,
releases and preemptions, and their per-host bounds hold on nested trees."""
from __future__ import annotations

import datetime
import uuid

import numpy as np
import pytest

from db import claims
from db import preemption as db_preemption
from db.preemption import Candidate
from scheduler import exception
from scheduler import preemption as search
from scheduler.host_columns import HostColumns
from scheduler.preemptible_index import PreemptibleIndex
from tests.unit.scheduler import test_preemption as base

conf = base.conf        # the fixture
_boot, _check, _spec, _types, _victims, _world = (
    base._boot, base._check, base._spec, base._types, base._victims, base._world)

U = [str(uuid.UUID(int=i + 1)) for i in range(40)]
T0 = datetime.datetime(2026, 1, 1)


def _cand(u, node, priority=0, amounts=((1, "VCPU", 2),), age=0):
    return Candidate(uuid=u, node_id=node, priority=priority,
                     created_at=T0 - datetime.timedelta(seconds=age), project_id="p",
                     instance_group=None, numa_cells=None, amounts=amounts)


def test_index_view_keeps_eligible_and_sums_classes_over_providers():
    index = PreemptibleIndex()
    index.load([(_cand(U[0], 1, priority=0), True, False),
                (_cand(U[1], 1, priority=5), True, False),
                (_cand(U[2], 2, priority=-1, amounts=((20, "VGPU", 1), (21, "VGPU", 1))),
                 True, False),
                (_cand(U[3], 2), True, True),            # pending
                ], any_preemptible=False)
    view = index.view(5, False, ["VCPU", "VGPU"])
    got = {view.candidate(i).uuid: (int(view.node[i]), float(view.amounts["VGPU"][i]))
           for i in range(len(view.slots))}
    # priority 5 is not below 5; the pending one is left out; VGPU summed over providers
    assert got == {U[0]: (1, 0.0), U[2]: (2, 2.0)}
    assert index.pending_below(5, False) == [U[3]]
    index.settle({U[3]: False}, [U[3]])
    assert len(index.view(5, False, []).slots) == 3
    index.remove(U[0])
    index.replace_nodes([2], [(_cand(U[4], 2), True, False)])
    assert sorted(c.uuid for c in index.of_node(2)) == [U[4]]
    assert index.get(U[0]) is None and len(index) == 2
    # a freed slot is reused; a grown index keeps what it held
    for i in range(5, 200):
        index.add(_cand(str(uuid.UUID(int=1000 + i)), 3), True, False)
    assert len(index) == 197 and index.get(U[4]).node_id == 2


def test_non_preemptible_instances_are_kept_only_when_asked():
    index = PreemptibleIndex(any_preemptible=False)
    index.load([], any_preemptible=False)
    index.add(_cand(U[0], 1), False, False)
    assert len(index) == 0
    index = PreemptibleIndex(any_preemptible=True)
    index.add(_cand(U[0], 1), False, False)
    assert len(index.view(1, True, []).slots) == 1
    assert len(index.view(1, False, []).slots) == 0


def test_rows_of_nodes():
    cols = HostColumns([])
    assert cols.rows_of_nodes(np.array([1, 2])).tolist() == [-1, -1]


def test_bound_counts_one_victim_holding_a_class_on_two_providers():
    """A victim holding 1 VGPU on each of two GPUs frees 2: one victim is
    enough for a request short of 2 (a per-provider maximum said 2)."""
    index = PreemptibleIndex()
    index.load([(_cand(U[0], 7, amounts=((20, "VGPU", 1), (21, "VGPU", 1))), True, False),
                (_cand(U[1], 7, amounts=((20, "VGPU", 1),)), True, False)], False)
    view = index.view(1, False, ["VGPU"])
    free = {"VGPU": np.array([0.0])}
    room = search.Room(view=view, rows=np.zeros(len(view.slots), dtype=np.int64), free=free,
                       asked={"VGPU": 2}, n=1, row_of_node={7: 0})
    summary = room.summary()
    assert summary.viable.tolist() == [True]
    assert summary.fewest_victims().tolist() == [1]
    assert [view.candidate(i).uuid for i in room.singles()] == [U[0]]
    assert sorted(c.uuid for c in room.candidates_on(7)) == [U[0], U[1]]


def test_search_reads_no_candidates_from_the_database(any_db, conf, monkeypatch):
    sched = _world(any_db, conf, names=("a", "b"), vcpus=4)
    for i in range(4):
        _boot(sched, U[i], vcpus=2, preemptible=True, priority=-i)

    def no_search(*a, **k):
        raise AssertionError("the search read candidates from the database")

    monkeypatch.setattr(db_preemption, "candidates", no_search)
    monkeypatch.setattr(db_preemption, "indexable", no_search)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[10]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[3]]          # the lowest priority
    # two victims: the next cheapest pair on one host
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=4, priority=1), [U[11]],
                                        allow_preemption=True)
    assert len(sel.preempted) == 2
    _check(any_db)


def test_index_follows_claims_releases_and_preemptions(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=4)
    index = sched.host_manager.preemptible_index(False)
    _boot(sched, U[0], vcpus=2, preemptible=True)
    _boot(sched, U[1], vcpus=2)
    assert index.get(U[0]) is not None and index.get(U[1]) is None
    assert index.get(U[0]).amounts and index.get(U[0]).priority == 0
    sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[2]],
                              allow_preemption=True)
    assert index.get(U[0]) is None           # preempted
    sched.release(U[2])
    _boot(sched, U[3], vcpus=2, preemptible=True)
    assert index.get(U[3]) is not None
    sched.release(U[3])
    assert index.get(U[3]) is None


def test_a_claim_confirmed_by_another_process_is_seen(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    sched.select_destinations(_spec(sched, vcpus=2, preemptible=True), [U[0]], pending=True)
    index = sched.host_manager.preemptible_index(False)
    assert index.pending_below(1, False) == [U[0]]
    claims.confirm(any_db, [U[0]])          # not through this scheduler
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[0]]
    _check(any_db)


def test_pending_claims_are_not_preempted(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    sched.select_destinations(_spec(sched, vcpus=2, preemptible=True), [U[0]], pending=True)
    with pytest.raises(exception.NoValidHost):
        sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                  allow_preemption=True)
    sched.confirm([U[0]])
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[0]]


def test_non_preemptible_victims_when_configured_after_start(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    _boot(sched, U[0], vcpus=2)
    with pytest.raises(exception.NoValidHost):
        sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                  allow_preemption=True)
    conf.set_override("preempt_non_preemptible", True, group="preemption")
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=2, priority=1), [U[1]],
                                        allow_preemption=True)
    assert _victims(sel) == [U[0]]
    _check(any_db)


def test_several_instances_dry_run_preempts_distinct_victims(any_db, conf):
    sched = _world(any_db, conf, names=("a", "b"), vcpus=2)
    for i in range(4):
        _boot(sched, U[i], vcpus=1, preemptible=True)
    spec = _spec(sched, vcpus=2, priority=1, num_instances=2)
    sels = sched.select_destinations(spec, [U[10], U[11]], allow_preemption=True,
                                     dry_run=True)
    victims = [v for [s] in sels for v in _victims(s)]
    assert len(victims) == 4 and len(set(victims)) == 4
    assert {s.host for [s] in sels} == {"a", "b"}
    assert set(_types(any_db).values()) == {"instance"}


def test_several_instances_do_not_preempt_for_real(any_db, conf):
    sched = _world(any_db, conf, names=("a",), vcpus=2)
    _boot(sched, U[0], vcpus=2, preemptible=True)
    spec = _spec(sched, vcpus=1, priority=1, num_instances=2)
    with pytest.raises(exception.NoValidHost) as e:
        sched.select_destinations(spec, [U[10], U[11]], allow_preemption=True)
    assert "several instances does not preempt" in str(e.value)
    assert _types(any_db) == {U[0]: "instance"}
    _check(any_db)


def test_full_search_finds_one_victim_holding_a_class_on_two_providers(any_db, conf):
    """A nested tree: two GPUs of one VGPU each, both held by one instance (two
    isolated groups). The full search (a cost plugin without the single-victim
    fast path) must see that this one victim frees 2 VGPU."""
    from db import hosts as db_hosts
    from scheduler import fleet as fleet_mod
    from scheduler import victim_costs
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    db_hosts.import_fleet(any_db, fleet_mod.load_fleet({"hosts": [{
        "host": "g", "vcpus": 8, "memory_mb": 8192, "local_gb": 100,
        "providers": [{"name": "gpu0", "inventories": {"VGPU": {"total": 1}}},
                      {"name": "gpu1", "inventories": {"VGPU": {"total": 1}}}]}]}))
    sched = FilterScheduler(HostManager(any_db, conf), conf)

    class Plain(victim_costs.LeastDisruptionCost):
        single_by_priority_then_newest = False

    sched._cost = Plain(conf)
    two = {"resources1:VGPU": "1", "resources2:VGPU": "1", "group_policy": "isolate"}
    _boot(sched, U[0], vcpus=1, extra=two, preemptible=True)
    [[sel]] = sched.select_destinations(_spec(sched, vcpus=1, extra=two, priority=1),
                                        [U[1]], allow_preemption=True)
    assert _victims(sel) == [U[0]]
    _check(any_db)


def test_kth_newest_bounds_the_oldest_member_of_a_set():
    index = PreemptibleIndex()
    index.load([(_cand(U[i], 7 + (i % 2), age=10 * i), True, False) for i in range(5)], False)
    view = index.view(1, False, ["VCPU"])
    rows = np.array([c.node_id - 7 for c in (view.candidate(i) for i in range(len(view.slots)))])
    room = search.Room(view=view, rows=rows, free={"VCPU": np.zeros(2)}, asked={"VCPU": 1},
                       n=2, row_of_node={7: 0, 8: 1})
    summary = room.summary()
    newest = T0.timestamp()
    # node 7 holds U0, U2, U4 (ages 0, 20, 40); node 8 holds U1, U3 (10, 30)
    assert summary.kth_newest(1).tolist() == [newest, newest - 10]
    assert summary.kth_newest(2).tolist() == [newest - 20, newest - 30]
    assert summary.kth_newest(3).tolist() == [newest - 40, -np.inf]
