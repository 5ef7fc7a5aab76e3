"""Two schedulers on one database learn each other's claims and releases from
the node change journal, and their caches stay exactly a fresh load.

Each worker applies the other's journalled claims and releases to its cached
hosts instead of re-reading them; anything else that moves a node's
generation (a move's source, a build failure, a host report) is re-read.
After random interleavings of placements, releases, reschedules, confirms,
moves and host changes from either worker, every cached host, field by
field, and the instance, group and preemptible indexes equal those of a
HostManager loaded from scratch.
"""
from __future__ import annotations

import dataclasses
import random
import uuid

import pytest

from db import claims, node_changes
from db import hosts as db_hosts
from db.models import utcnow
from scheduler import exception, metrics
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.host_state import HostState
from scheduler.moves import Mover, MoveRequest
from tests.unit.scheduler.test_equivalence import ALIAS, _fleet, _request, conf  # noqa: F401

#: Not state: how the cache tracks its own changes, and the lock's name.
NOT_STATE = {"version", "_lock_name", "__weakref__"}


def _hosts(hm: HostManager) -> dict:
    return {hs.node_id: {name: getattr(hs, name) for name in HostState.__slots__
                         if name not in NOT_STATE}
            for hs in hm.host_states()}


def _preemptibles(hm: HostManager) -> dict:
    """uuid -> (candidate, preemptible). Pending flags are left out: another
    process's confirm changes no node, so no cache sees it until the search
    re-reads them (``scheduler.preemptible_index``), journal or not."""
    index = hm.preemptibles
    out = {}
    for uuid_, slot in index._slot.items():
        c = index._entries[slot]
        pools = tuple(sorted(c.pci_pools, key=lambda kc: (kc[0].sort_key(), kc[1])))
        out[uuid_] = (dataclasses.replace(c, pci_pools=pools), bool(index.preemptible[slot]))
    return out


def _cache(hm: HostManager) -> dict:
    hosts = _hosts(hm)      # refreshes first
    return {"hosts": hosts, "instance_nodes": dict(hm._instance_node),
            "groups": {g: dict(c) for g, c in hm._groups.items() if c},
            "preemptibles": _preemptibles(hm)}


def _assert_equal(worker: HostManager, fresh: HostManager) -> None:
    got, want = _cache(worker), _cache(fresh)
    for node_id, fields in want["hosts"].items():
        for name, value in fields.items():
            assert got["hosts"][node_id][name] == value, (node_id, name)
    assert got["hosts"].keys() == want["hosts"].keys()
    for key in ("instance_nodes", "groups", "preemptibles"):
        assert got[key] == want[key], key


class _Counted:
    """Counts the cache's re-reads and journal applies of a test."""

    def __init__(self, monkeypatch) -> None:
        self.reread = self.applied = 0
        reread, applied = metrics.count_nodes_reloaded, metrics.count_node_changes_applied

        def count_reread(n):
            self.reread += n
            reread(n)

        def count_applied(n):
            self.applied += n
            applied(n)

        monkeypatch.setattr(metrics, "count_nodes_reloaded", count_reread)
        monkeypatch.setattr(metrics, "count_node_changes_applied", count_applied)


def _spec(rng, sched):
    spec = _request(rng, sched, "g-1")
    if rng.random() < 0.5:
        specs = dict(spec.flavor.extra_specs)
        specs["berth:preemptible"] = "true"
        specs["berth:priority"] = str(rng.choice([0, 10]))
        data = spec.to_primitive()
        data["flavor"]["extra_specs"] = specs
        spec = sched.parse_request(data)
    return spec


def _interleave(db, conf, seed: int, n_hosts: int, steps: int, monkeypatch):  # noqa: F811
    rng = random.Random(seed)
    db_hosts.import_fleet(db, fleet_mod.load_fleet(_fleet(rng, n_hosts)))
    workers = [FilterScheduler(HostManager(db, conf), conf) for _ in range(2)]
    counted = _Counted(monkeypatch)
    placed: list = []           # (selection, pending)
    moving: list = []           # (instance uuid, move id)
    for _step in range(steps):
        s = rng.choice(workers)
        roll = rng.random()
        if roll < 0.45 or not placed:
            pending = rng.random() < 0.3
            try:
                sel = s.select_destinations(_spec(rng, s), pending=pending)
                placed.append((sel[0][0], pending))
            except exception.NoValidHost:
                pass
        elif roll < 0.65:
            sel, _ = placed.pop(rng.randrange(len(placed)))
            s.release(sel.instance_uuid)
            moving = [m for m in moving if m[0] != sel.instance_uuid]
        elif roll < 0.72:
            i = rng.randrange(len(placed))
            sel, pending = placed[i]
            if not any(m[0] == sel.instance_uuid for m in moving):
                held = claims.get_allocation(db, sel.instance_uuid)
                try:
                    placed[i] = (s.reschedule(sel.instance_uuid, held["host"])[0], False)
                except (exception.NoValidHost, exception.NotFound):
                    placed.pop(i)
        elif roll < 0.8:
            todo = [sel.instance_uuid for sel, pending in placed if pending]
            if todo:
                s.confirm(todo)
                placed = [(sel, False) for sel, _ in placed]
        elif roll < 0.88:
            sel, _ = rng.choice(placed)
            if not any(m[0] == sel.instance_uuid for m in moving):
                move_id = str(uuid.uuid4())
                try:
                    moved = Mover(s).move(MoveRequest.from_primitive(
                        {"instance_uuid": sel.instance_uuid, "kind": "migrate",
                         "migration_uuid": move_id}))[0]
                except (exception.NoValidHost, exception.Conflict, exception.NotFound):
                    pass
                else:
                    moving.append((sel.instance_uuid, move_id))
                    placed = [(moved if p.instance_uuid == sel.instance_uuid else p, q)
                              for p, q in placed]
        elif roll < 0.94 and moving:
            instance, move_id = moving.pop(rng.randrange(len(moving)))
            if rng.random() < 0.5:
                Mover(s).confirm(instance, move_id)
            else:
                Mover(s).revert(instance, move_id)
        elif roll < 0.97:
            # not a claim nor a release: the node is re-read
            claims.record_build_failure(db, rng.choice(s.host_manager.host_states()).host)
        if rng.random() < 0.1:
            fresh = HostManager(db, conf, load_pci_pools=True, load_instance_images=True)
            for w in workers:
                _assert_equal(w.host_manager, fresh)
    fresh = HostManager(db, conf, load_pci_pools=True, load_instance_images=True)
    for w in workers:
        assert w.host_manager.load_pci_pools and w.host_manager.load_instance_images
        _assert_equal(w.host_manager, fresh)
    return counted


@pytest.mark.parametrize("seed", range(4))
def test_journal_keeps_two_workers_equal_to_a_fresh_load(sqlite_db, conf, seed,  # noqa: F811
                                                         monkeypatch):
    counted = _interleave(sqlite_db, conf, seed, 20, 120, monkeypatch)
    assert counted.applied > 20


@pytest.mark.parametrize("seed", range(2))
def test_journal_keeps_two_workers_equal_on_mariadb(mariadb_db, conf, seed,  # noqa: F811
                                                    monkeypatch):
    counted = _interleave(mariadb_db, conf, 100 + seed, 20, 100, monkeypatch)
    assert counted.applied > 20


def test_a_generation_missing_from_the_journal_is_read_again(sqlite_db, conf,  # noqa: F811
                                                             monkeypatch):
    """A change that is not journalled between two that are: the node is read
    in full, not patched around the gap."""
    rng = random.Random(7)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 4)))
    a, b = (FilterScheduler(HostManager(sqlite_db, conf), conf) for _ in range(2))
    flavor = {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}
    b.host_manager.host_states()
    counted = _Counted(monkeypatch)
    first = a.select_destinations(a.parse_request(flavor))[0][0]
    claims.record_build_failure(sqlite_db, first.host)
    a.select_destinations(a.parse_request({**flavor, "force_hosts": [first.host]}))
    _assert_equal(b.host_manager, HostManager(sqlite_db, conf, load_pci_pools=True,
                                              load_instance_images=True))
    assert counted.applied == 0 and counted.reread >= 1
    # the next claim on it is journalled and applied
    counted.reread = 0
    a.select_destinations(a.parse_request({**flavor, "force_hosts": [first.host]}))
    b.host_manager.host_states()
    assert (counted.applied, counted.reread) == (1, 0)


def test_old_changes_are_purged(sqlite_db, conf):  # noqa: F811
    rng = random.Random(3)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 3)))
    a = FilterScheduler(HostManager(sqlite_db, conf), conf)
    sel = a.select_destinations(a.parse_request(
        {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}))[0][0]
    a.release(sel.instance_uuid)
    assert node_changes.purge(sqlite_db, utcnow().replace(year=2000)) == 0
    assert node_changes.purge(sqlite_db, utcnow()) == 2


def test_the_reaper_purges_changes_older_than_their_ttl(sqlite_db, conf,  # noqa: F811
                                                        scheduler_options):
    import datetime

    from scheduler.reaper import ClaimReaper

    rng = random.Random(4)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 3)))
    a = FilterScheduler(HostManager(sqlite_db, conf), conf)
    a.select_destinations(a.parse_request(
        {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}))
    scheduler_options(node_change_ttl=60)
    reaper = ClaimReaper(sqlite_db, a, conf)
    reaper.run_once()
    assert node_changes.purge(sqlite_db, utcnow()) == 1     # younger than the TTL: kept
    a.select_destinations(a.parse_request(
        {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}))
    reaper.run_once(now=utcnow() + datetime.timedelta(seconds=61))
    assert node_changes.purge(sqlite_db, utcnow()) == 0


def test_concurrent_workers_end_equal_to_a_fresh_load(mariadb_db, conf,  # noqa: F811
                                                      monkeypatch):
    """Threads of two workers place and release at once (refreshes racing
    their own claims and releases): both caches end as a fresh load."""
    import threading

    rng = random.Random(11)
    db_hosts.import_fleet(mariadb_db, fleet_mod.load_fleet(_fleet(rng, 12)))
    workers = [FilterScheduler(HostManager(mariadb_db, conf), conf) for _ in range(2)]
    counted = _Counted(monkeypatch)
    errors: list = []

    def run(s, seed):
        r = random.Random(seed)
        mine: list[str] = []
        try:
            for _ in range(15):
                if mine and r.random() < 0.35:
                    r.choice(workers).release(mine.pop(r.randrange(len(mine))))
                    continue
                try:
                    spec = s.parse_request({"flavor": {
                        "vcpus": r.choice([1, 2]), "memory_mb": r.choice([256, 1024]),
                        "root_gb": 1}})
                    mine.append(s.select_destinations(spec)[0][0].instance_uuid)
                except exception.NoValidHost:
                    pass
        except Exception as e:      # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s, 10 * i + j))
               for i, s in enumerate(workers) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    # A change stamped before the newest one a cache saw but committed after
    # its read is seen by the next look back of refresh_overlap_seconds (once
    # per that period, by design): the last refresh looks back.
    for w in workers:
        w.host_manager._last_sweep = 0
    fresh = HostManager(mariadb_db, conf, load_pci_pools=True, load_instance_images=True)
    for w in workers:
        _assert_equal(w.host_manager, fresh)
    assert counted.applied > 0


def test_a_node_refreshed_after_a_conflict_takes_the_journal(any_db, conf,  # noqa: F811
                                                             monkeypatch):
    """``refresh_nodes`` (a claim conflict, a group's hosts) applies the
    journalled changes of the nodes it is given; a node changed otherwise is
    re-read."""
    rng = random.Random(9)
    db_hosts.import_fleet(any_db, fleet_mod.load_fleet(_fleet(rng, 4)))
    a, b = (FilterScheduler(HostManager(any_db, conf), conf) for _ in range(2))
    flavor = {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}
    hosts = b.host_manager.host_states()
    counted = _Counted(monkeypatch)
    first = a.select_destinations(a.parse_request(flavor))[0][0]
    node = next(h.node_id for h in hosts if h.host == first.host)
    a.select_destinations(a.parse_request({**flavor, "force_hosts": [first.host]}))
    a.release(first.instance_uuid)
    b.host_manager.refresh_nodes([node])
    assert (counted.applied, counted.reread) == (3, 0)
    claims.record_build_failure(any_db, first.host)
    b.host_manager.refresh_nodes([node])
    assert (counted.applied, counted.reread) == (3, 1)
    _assert_equal(b.host_manager, HostManager(any_db, conf, load_pci_pools=True,
                                              load_instance_images=True))


def test_a_worker_that_writes_no_journal_is_read_again_by_the_others(
        sqlite_db, conf, monkeypatch):  # noqa: F811
    """``node_change_journal`` off (a lone worker's default): its claims and
    releases write no row; another cache re-reads the nodes and still ends
    equal to a fresh load."""
    rng = random.Random(11)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 4)))
    a, b = (FilterScheduler(HostManager(sqlite_db, conf), conf) for _ in range(2))
    b.host_manager.host_states()
    counted = _Counted(monkeypatch)
    flavor = {"flavor": {"vcpus": 1, "memory_mb": 256, "root_gb": 1}}
    monkeypatch.setattr(node_changes, "_writing", True)
    node_changes.write(False)
    placed = [a.select_destinations(a.parse_request(flavor))[0][0] for _ in range(3)]
    a.release(placed[0].instance_uuid)
    with sqlite_db.reader_connection() as conn:
        assert conn.execute(node_changes._t.select()).first() is None
    b.host_manager.host_states()
    _assert_equal(b.host_manager, HostManager(sqlite_db, conf, load_pci_pools=True,
                                              load_instance_images=True))
    assert counted.applied == 0 and counted.reread >= 1


@pytest.mark.parametrize("mode, workers, wanted", [
    ("auto", 1, False), ("auto", 2, True), ("on", 1, True), ("off", 4, False),
    (None, 1, False), (None, 4, True)])
def test_the_journal_is_written_by_a_daemon_of_several_workers(mode, workers, wanted):
    from oslo_config import cfg

    from scheduler import reaper, service  # noqa: F401 - registers the options

    if mode is not None:        # None: the default (auto)
        cfg.CONF.set_override("node_change_journal", mode, group="scheduler")
    cfg.CONF.set_override("workers", workers, group="scheduler")
    try:
        assert reaper.journal_wanted(cfg.CONF) is wanted
    finally:
        cfg.CONF.clear_override("node_change_journal", group="scheduler")
        cfg.CONF.clear_override("workers", group="scheduler")
