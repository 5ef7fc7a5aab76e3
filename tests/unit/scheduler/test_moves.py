"""Moves in-process on SQLite and MariaDB: the ledger holds source and destination
while a move is in progress, confirm and revert each end it in one transaction,
every call is idempotent by move id, and the reaper ends the moves nobody ends."""
from __future__ import annotations

import datetime
import threading
import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from db import moves as db_moves
from db.models import utcnow
from scheduler import exception, simulate
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.moves import Mover, MoveRequest

NUMA = {"cells": [{"id": 0, "socket": 0, "cpuset": [0, 1], "pcpuset": [2, 3, 4, 5],
                   "memory_mb": 8192},
                  {"id": 1, "socket": 1, "cpuset": [6, 7], "pcpuset": [8, 9, 10, 11],
                   "memory_mb": 8192}]}
PF = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
      "dev_type": "type-PF", "numa_node": 0, "physical_network": "physnet1"}
VF = {"address": "0000:81:02.0", "vendor_id": "8086", "product_id": "154c",
      "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "numa_node": 0,
      "physical_network": "physnet1"}


@pytest.fixture
def conf():
    cfg.CONF([], project="berth")
    cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                              "NUMATopologyFilter", "PciPassthroughFilter"],
                          group="filter_scheduler")
    cfg.CONF.set_override("weight_classes", [], group="filter_scheduler")
    yield cfg.CONF
    cfg.CONF.clear_override("enabled_filters", group="filter_scheduler")
    cfg.CONF.clear_override("weight_classes", group="filter_scheduler")
    cfg.CONF.clear_override("allow_resize_to_same_host", group="scheduler")


def _fleet(db, names=("a", "b")):
    hosts = [{"host": n, "vcpus": 16, "memory_mb": 16384, "local_gb": 200,
              "cpu_allocation_ratio": 1.0, "numa_topology": NUMA,
              "pci_devices": [PF, VF]} for n in names]
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))


def _world(db, conf, names=("a", "b")):
    _fleet(db, names)
    sched = FilterScheduler(HostManager(db, conf), conf)
    return sched, Mover(sched)


def _boot(sched, host, extra=None, flavor=None, uuid_=None):
    f = {"vcpus": 2, "memory_mb": 2048, "root_gb": 20, **(flavor or {})}
    if extra:
        f["extra_specs"] = extra
    spec = sched.parse_request({"flavor": f, "force_hosts": [host]})
    return sched.select_destinations(spec, [uuid_ or str(uuid.uuid4())])[0][0]


def _move(mover, instance, kind="migrate", **kw):
    return mover.move(MoveRequest.from_primitive(
        {"instance_uuid": instance, "kind": kind, **kw}))[0]


def _consumers(db):
    c = models.Consumer.__table__
    with db.reader_connection() as conn:
        return {r.uuid: (r.consumer_type, r.instance_uuid) for r in conn.execute(sa.select(c))}


def test_migrate_with_pinned_cpus_and_a_vf_holds_both_then_confirm(any_db, conf):
    sched, mover = _world(any_db, conf)
    extra = {"hw:cpu_policy": "dedicated", "pci_passthrough:alias": "vf:1"}
    conf.set_override("alias", ['{"name": "vf", "vendor_id": "8086", "product_id": "154c",'
                                ' "device_type": "type-VF"}'], group="pci")
    try:
        sched, mover = FilterScheduler(HostManager(any_db, conf), conf), None
        mover = Mover(sched)
        vm = _boot(sched, "a", extra)
        moved = _move(mover, vm.instance_uuid, migration_uuid=str(uuid.uuid4()))
    finally:
        conf.clear_override("alias", group="pci")
    assert moved.host == "b" and moved.pci_devices and moved.numa_cells
    usage = simulate.node_usage(any_db)
    assert (usage["a"]["PCPU"], usage["b"]["PCPU"]) == (2, 2)
    assert _consumers(any_db) == {moved.migration_uuid: ("migration", vm.instance_uuid),
                                  vm.instance_uuid: ("instance", vm.instance_uuid)}
    assert simulate.check_invariants(any_db) == []
    # the source's device belongs to the move now
    dev = models.PciDevice.__table__
    with any_db.reader_connection() as conn:
        holders = set(conn.execute(sa.select(dev.c.instance_uuid)
                                   .where(dev.c.status.in_(("claimed", "allocated")))).scalars())
    assert holders == {moved.migration_uuid, vm.instance_uuid}
    assert mover.confirm(vm.instance_uuid, moved.migration_uuid) is True
    usage = simulate.node_usage(any_db)
    assert (usage["a"]["PCPU"], usage["b"]["PCPU"], usage["a"]["running_vms"]) == (0, 2, 0)
    assert simulate.check_invariants(any_db) == []
    # confirmed twice: the same answer; reverted after: refused
    assert mover.confirm(vm.instance_uuid, moved.migration_uuid) is True
    with pytest.raises(exception.Conflict, match="confirmed already"):
        mover.revert(vm.instance_uuid, moved.migration_uuid)
    # the same move sent again (a lost reply): where the instance is, nothing claimed
    again = _move(mover, vm.instance_uuid, migration_uuid=moved.migration_uuid)
    assert again.host == "b" and simulate.node_usage(any_db)["b"]["PCPU"] == 2


def test_revert_gives_the_source_back_even_when_it_filled_up(any_db, conf):
    sched, mover = _world(any_db, conf)
    vm = _boot(sched, "a", flavor={"vcpus": 4, "memory_mb": 8192})
    moved = _move(mover, vm.instance_uuid, "resize",
                  flavor={"vcpus": 2, "memory_mb": 4096, "root_gb": 20})
    assert moved.host == "b"
    # fill what is left of a: the instance's room there stays held
    fillers = [_boot(sched, "a", flavor={"vcpus": 1, "memory_mb": 1024})
               for _ in range(3)]
    with pytest.raises(exception.NoValidHost):
        _boot(sched, "a", flavor={"vcpus": 4, "memory_mb": 8192})
    assert mover.revert(vm.instance_uuid, moved.migration_uuid) is True
    alloc = simulate.node_usage(any_db)
    assert alloc["a"]["VCPU"] == 4 + 3 and alloc["b"]["VCPU"] == 0
    assert alloc["a"]["running_vms"] == 4 and alloc["b"]["running_vms"] == 0
    assert simulate.check_invariants(any_db) == []
    assert mover.revert(vm.instance_uuid, moved.migration_uuid) is True      # idempotent
    with pytest.raises(exception.Conflict, match="was reverted"):
        _move(mover, vm.instance_uuid, "resize", migration_uuid=moved.migration_uuid,
              flavor={"vcpus": 2, "memory_mb": 4096, "root_gb": 20})
    with pytest.raises(exception.NotFound):
        mover.confirm(vm.instance_uuid, str(uuid.uuid4()))
    assert len(fillers) == 3


def test_same_host_resize_must_hold_old_and_new_at_once(sqlite_db, conf):
    conf.set_override("allow_resize_to_same_host", True, group="scheduler")
    sched, mover = _world(sqlite_db, conf, names=("only",))
    vm = _boot(sched, "only", flavor={"vcpus": 6, "memory_mb": 4096})
    with pytest.raises(exception.NoValidHost):         # 6 + 6 > 12 shared CPUs... held
        _move(mover, vm.instance_uuid, "resize",
              flavor={"vcpus": 7, "memory_mb": 4096, "root_gb": 20})
    moved = _move(mover, vm.instance_uuid, "resize",
                  flavor={"vcpus": 2, "memory_mb": 4096, "root_gb": 20})
    assert moved.host == "only"
    assert simulate.node_usage(sqlite_db)["only"]["VCPU"] == 8
    assert mover.confirm(vm.instance_uuid, moved.migration_uuid)
    assert simulate.node_usage(sqlite_db)["only"]["VCPU"] == 2
    assert simulate.check_invariants(sqlite_db) == []


def test_two_movers_race_for_one_instance_one_wins(mariadb_db, conf):
    """Two schedulers (their own caches) move the same instance at once with
    different move ids: exactly one move is made."""
    _fleet(mariadb_db, ("a", "b", "c"))
    s1 = FilterScheduler(HostManager(mariadb_db, conf), conf)
    s2 = FilterScheduler(HostManager(mariadb_db, conf), conf)
    s2.host_manager.refresh()
    vm = _boot(s1, "a")
    results: list = []
    barrier = threading.Barrier(2)

    def move(sched):
        barrier.wait()
        try:
            results.append(_move(Mover(sched), vm.instance_uuid))
        except exception.Conflict as e:
            results.append(e)

    threads = [threading.Thread(target=move, args=(s,)) for s in (s1, s2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    made = [r for r in results if not isinstance(r, Exception)]
    assert len(results) == 2 and len(made) == 1, results
    holders = [c for c, (kind, _i) in _consumers(mariadb_db).items() if kind == "migration"]
    assert holders == [made[0].migration_uuid]
    assert simulate.check_invariants(mariadb_db) == []


def test_the_reaper_reverts_old_moves_and_ends_evacuations(sqlite_db, conf):
    sched, mover = _world(sqlite_db, conf)
    vm1, vm2 = _boot(sched, "a"), _boot(sched, "a")
    migration = _move(mover, vm1.instance_uuid)
    # a's heartbeat: long ago (down), then the evacuation
    svc = models.Service.__table__
    with sqlite_db.writer_connection() as conn:
        conn.execute(svc.insert().values(host="a", binary="berth-compute",
                                         last_seen_up=utcnow() - datetime.timedelta(hours=2),
                                         report_count=1, disabled=False,
                                         created_at=utcnow(), updated_at=utcnow()))
    sched.host_manager._heartbeat_read_at = 0.0
    evacuation = _move(mover, vm2.instance_uuid, "evacuate")
    assert evacuation.host == "b"
    assert mover.reap() == 0                    # too young, and a still silent
    assert mover.reap(now=utcnow() + datetime.timedelta(seconds=86401)) == 1
    assert db_moves.holder_of(sqlite_db, vm1.instance_uuid) is None
    assert simulate.node_usage(sqlite_db)["b"]["running_vms"] == 1      # vm2 only
    # a is back: its evacuated instance's place there is released
    with sqlite_db.writer_connection() as conn:
        conn.execute(svc.update().values(last_seen_up=utcnow() + datetime.timedelta(seconds=1),
                                         updated_at=utcnow()))
    sched.host_manager._heartbeat_read_at = 0.0
    sched.host_manager.refresh()
    assert mover.reap() == 1
    assert _consumers(sqlite_db) == {vm1.instance_uuid: ("instance", vm1.instance_uuid),
                                     vm2.instance_uuid: ("instance", vm2.instance_uuid)}
    usage = simulate.node_usage(sqlite_db)
    assert (usage["a"]["VCPU"], usage["b"]["VCPU"]) == (2, 2)
    assert simulate.check_invariants(sqlite_db) == []
    assert migration.migration_uuid != evacuation.migration_uuid


@pytest.mark.parametrize("move,field", [
    ({"kind": "teleport"}, "move.kind"),
    ({"kind": "resize"}, "move.flavor"),
    ({"kind": "migrate", "flavor": {"vcpus": 1}}, "move.flavor"),
    ({"kind": "migrate", "force": True}, "move.force"),
    ({"kind": "migrate", "force": "yes"}, "move.force"),
    ({"kind": "rebuild", "image": {}, "destination": "b"}, "move.destination"),
    ({"kind": "migrate", "migration_uuid": "nope"}, "move.migration_uuid"),
    ({"kind": "migrate", "colour": "red"}, "move.colour"),
    ({"kind": "unshelve"}, "move.request_spec"),
])
def test_malformed_moves_name_the_field(move, field):
    with pytest.raises(exception.InvalidRequest) as e:
        MoveRequest.from_primitive({"instance_uuid": str(uuid.uuid4()), **move})
    assert e.value.kwargs["field"] == field


def test_a_forced_live_migrate_is_refused_by_the_ledger_where_it_does_not_fit(any_db, conf):
    """A forced move runs no filter but the ledger's check, and that check covers
    every class (the view filters that check memory are not run): a destination
    without the memory is refused by it, not first tried under its lock."""
    sched, mover = _world(any_db, conf)
    vm = _boot(sched, "a", flavor={"memory_mb": 8192})
    _boot(sched, "b", flavor={"memory_mb": 12288})       # b keeps 4096 MB free
    before = simulate.node_usage(any_db)
    with pytest.raises(exception.NoValidHost,
                       match=r"1 ResourcesFilter \(insufficient MEMORY_MB: need 8192\)"):
        _move(mover, vm.instance_uuid, "live-migrate", destination="b", force=True,
              migration_uuid=str(uuid.uuid4()))
    assert simulate.node_usage(any_db) == before
    assert simulate.check_invariants(any_db) == []
