"""Answers that say what happened when a COMMIT's answer is lost, on MariaDB.

A proxy between the scheduler and MariaDB (``tests.mysql_faults``) lets the
COMMIT of a release, confirm, reschedule or move through to the server and
throws its answer away: the transaction is done, the scheduler sees a lost
connection and runs it again (``db.api.retry_on_deadlock``). The retry, or the
caller's re-send to another scheduler, answers what the first try did — never
"held nothing" for what it just released — and nothing is done twice.
"""
from __future__ import annotations

import concurrent.futures
import datetime
import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db import exception as db_exc

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import simulate
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.moves import Mover, MoveRequest
from tests import services
from tests.mysql_faults import CommitAnswerDropper

FLEET = {"hosts": [{"host": f"c{i}", "vcpus": 16, "memory_mb": 32768, "local_gb": 400,
                    "cpu_allocation_ratio": 1.0} for i in range(4)]}
ONE = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}, "project_id": "p1"}
RELEASE = "DELETE FROM consumers"


@pytest.fixture
def world():
    """(scheduler through the proxy, proxy, a second scheduler on the direct
    connection — another daemon —, the direct database)."""
    name, url = services.create_mariadb_database()
    direct = Database(url)
    migration.db_sync(direct)
    db_hosts.import_fleet(direct, fleet_mod.load_fleet(FLEET))
    proxy = CommitAnswerDropper()
    proxy.start()
    through = Database(proxy.url(url))
    conf = cfg.CONF
    conf([], project="berth")
    sched = FilterScheduler(HostManager(through, conf), conf)
    other = FilterScheduler(HostManager(direct, conf), conf)
    try:
        yield sched, proxy, other, direct
    finally:
        proxy.stop()
        through.dispose()
        direct.dispose()
        services.drop_mariadb_database(name)


def _place(sched, n=1, **kw):
    spec = sched.parse_request(dict(ONE, num_instances=n))
    return [sel[0] for sel in sched.select_destinations(spec, None, **kw)]


def _held(db) -> dict[str, tuple[str, bool]]:
    c, cn = models.Consumer.__table__, models.ComputeNode.__table__
    with db.reader_connection() as conn:
        return {r.uuid: (r.host, bool(r.pending)) for r in conn.execute(
            sa.select(c.c.uuid, cn.c.host, c.c.pending).join(cn, cn.c.id == c.c.compute_node_id))}


def _transitions(db, uuid_) -> list[str]:
    t = models.Transition.__table__
    with db.reader_connection() as conn:
        return list(conn.execute(sa.select(t.c.kind).where(t.c.consumer_uuid == uuid_)
                                 .order_by(t.c.id)).scalars())


def test_a_release_whose_commit_answer_was_lost_answers_released(world):
    sched, proxy, other, db = world
    vm = _place(sched)[0]
    proxy.drop(RELEASE)
    assert sched.release(vm.instance_uuid) is True
    assert proxy.dropped == 1                       # the fault did happen
    assert vm.instance_uuid not in _held(db)
    assert _transitions(db, vm.instance_uuid) == ["released"]       # released once
    assert simulate.check_invariants(db) == []
    # the caller's re-send, to this scheduler or another daemon: released
    assert sched.release(vm.instance_uuid) is True
    assert other.release(vm.instance_uuid) is True
    # the worker's cache has the room back: the host takes its whole size again
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 0


def test_every_answer_lost_then_the_resend_answers_released(world):
    """Each try's COMMIT answer lost (the release's and its retries'): the caller
    gets the database error (ServiceUnavailable over RPC); its re-send later,
    to another daemon, answers released."""
    sched, proxy, other, db = world
    vm = _place(sched)[0]
    proxy.drop("FROM consumers", times=100)
    with pytest.raises(db_exc.DBConnectionError):
        sched.release(vm.instance_uuid)
    assert proxy.dropped >= 2
    proxy.disarm()
    assert vm.instance_uuid not in _held(db)
    assert other.release(vm.instance_uuid) is True
    assert sched.release(vm.instance_uuid) is True
    assert _transitions(db, vm.instance_uuid) == ["released"]
    assert simulate.check_invariants(db) == []


def test_a_reaped_or_unknown_instance_still_answers_held_nothing(world):
    sched, _proxy, other, db = world
    assert sched.release(str(uuid.uuid4())) is False
    vm = _place(sched, pending=True)[0]
    later = models.utcnow() + datetime.timedelta(seconds=1)
    assert sched.release(vm.instance_uuid, pending_before=later) is True     # the reaper
    assert _transitions(db, vm.instance_uuid) == ["reaped"]
    assert other.release(vm.instance_uuid) is False


def test_a_confirm_whose_commit_answer_was_lost_answers_confirmed(world):
    sched, proxy, other, db = world
    vms = _place(sched, n=2, pending=True)
    uuids = [s.instance_uuid for s in vms]
    proxy.drop("UPDATE consumers SET pending")
    assert sched.confirm(uuids) == (uuids, [])
    assert proxy.dropped == 1
    assert all(not pending for u, (_h, pending) in _held(db).items() if u in uuids)
    assert other.confirm(uuids) == (uuids, [])      # sent again: the same answer


def test_a_reschedule_whose_answers_were_lost_places_once(world):
    """The release inside a reschedule loses its COMMIT answer (retried: the
    reschedule goes on); then the whole reply is lost and the caller sends the
    reschedule again, to another daemon: the placement made, counted once."""
    sched, proxy, other, db = world
    vm = _place(sched)[0]
    proxy.drop(RELEASE)
    moved = sched.reschedule(vm.instance_uuid, vm.host)[0]
    assert proxy.dropped == 1 and moved.host != vm.host
    again = other.reschedule(vm.instance_uuid, vm.host)[0]
    assert (again.host, again.node_uuid) == (moved.host, moved.node_uuid)
    assert _held(db) == {vm.instance_uuid: (moved.host, False)}
    cn = models.ComputeNode.__table__
    with db.reader_connection() as conn:
        assert conn.execute(sa.select(cn.c.failed_builds).where(cn.c.host == vm.host)
                            ).scalar_one() == 1
    assert simulate.check_invariants(db) == []


def test_a_reschedule_cut_after_its_release_is_finished_by_the_resend(world):
    """The first reschedule released the instance and stopped there (its worker
    died): the re-send places it."""
    sched, _proxy, other, db = world
    vm = _place(sched)[0]
    assert sched.release(vm.instance_uuid, kind="rescheduled") is True
    again = other.reschedule(vm.instance_uuid, vm.host)[0]
    assert again.host != vm.host
    assert _held(db) == {vm.instance_uuid: (again.host, False)}


def test_moves_whose_commit_answers_were_lost(world):
    """The move's claim, its confirm and another move's revert each lose their
    COMMIT answer: each answers what it did."""
    sched, proxy, other, db = world
    mover, other_mover = Mover(sched), Mover(other)
    vm = _place(sched)[0]
    move_id = str(uuid.uuid4())
    proxy.drop("INSERT INTO consumers")
    moved = mover.move(MoveRequest.from_primitive(
        {"instance_uuid": vm.instance_uuid, "kind": "migrate", "migration_uuid": move_id}))[0]
    assert proxy.dropped == 1 and moved.host != vm.host
    assert _held(db) == {vm.instance_uuid: (moved.host, False), move_id: (vm.host, False)}
    proxy.drop(RELEASE)
    assert mover.confirm(vm.instance_uuid, move_id) is True
    assert proxy.dropped == 2
    assert other_mover.confirm(vm.instance_uuid, move_id) is True
    assert _held(db) == {vm.instance_uuid: (moved.host, False)}

    back_id = str(uuid.uuid4())
    mover.move(MoveRequest.from_primitive(
        {"instance_uuid": vm.instance_uuid, "kind": "migrate", "migration_uuid": back_id}))
    proxy.drop("UPDATE consumers SET uuid")
    assert mover.revert(vm.instance_uuid, back_id) is True
    assert proxy.dropped == 3
    assert other_mover.revert(vm.instance_uuid, back_id) is True
    assert _held(db) == {vm.instance_uuid: (moved.host, False)}
    # the instance released since: its moves' ends are still answered
    assert sched.release(vm.instance_uuid) is True
    assert other_mover.confirm(vm.instance_uuid, move_id) is True
    assert other_mover.revert(vm.instance_uuid, back_id) is True
    assert simulate.check_invariants(db) == []


def test_concurrent_releases_with_lost_answers_answer_exactly(world):
    """Eight threads on two schedulers release 30 instances, a third of the
    COMMIT answers lost, each instance released twice (the second one a
    caller's re-send to the other scheduler): every answer is True, each
    instance released once, usage equals the sum of allocations."""
    sched, proxy, other, db = world
    uuids = [s.instance_uuid for _ in range(3) for s in _place(sched, n=10)]
    proxy.drop(RELEASE, times=10)

    def release_twice(u):
        return sched.release(u), other.release(u)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(release_twice, uuids))
    assert proxy.dropped == 10
    assert answers == [(True, True)] * len(uuids)
    assert _held(db) == {}
    assert all(_transitions(db, u) == ["released"] for u in uuids)
    assert simulate.check_invariants(db) == []
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 0
