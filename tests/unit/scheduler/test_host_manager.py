"""The host-state cache stays equal to a fresh load from the database.

Claims and releases update cached hosts in memory (generation-checked); a
refresh re-reads only changed rows. After any mix of them, every cached host
must look exactly like the same host loaded from scratch.
"""
from __future__ import annotations

import random
import threading

import pytest

from db import hosts as db_hosts
from scheduler import exception
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from tests.unit.scheduler.test_equivalence import ALIAS, _fleet, _request, conf  # noqa: F401

FIELDS = ("vcpus_used", "memory_mb_used", "disk_mb_used", "num_instances", "num_io_ops",
          "failed_builds", "generation", "numa_topology", "pci_pools", "instances",
          "availability_zone", "disabled")


def _snapshot(hm: HostManager) -> dict:
    return {h.node_id: {f: getattr(h, f) for f in FIELDS} for h in hm.host_states()}


@pytest.mark.parametrize("seed", range(3))
def test_cache_equals_a_fresh_load_after_claims_and_releases(sqlite_db, conf, seed):  # noqa: F811
    rng = random.Random(seed)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 25)))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    other = FilterScheduler(HostManager(sqlite_db, conf), conf)   # a second scheduler
    placed = []
    for _ in range(60):
        s = rng.choice((sched, other))
        try:
            sel = s.select_destinations(_request(rng, s, "g-1"))
            placed.append(sel[0][0])
        except exception.NoValidHost:
            pass
        if placed and rng.random() < 0.35:
            victim = placed.pop(rng.randrange(len(placed)))
            rng.choice((sched, other)).release(victim.instance_uuid)
        if placed and rng.random() < 0.1:
            victim = placed.pop(rng.randrange(len(placed)))
            try:
                placed.append(s.reschedule(victim.instance_uuid, victim.host)[0])
            except exception.NoValidHost:
                pass
    fresh = HostManager(sqlite_db, conf, load_pci_pools=True)
    for s in (sched, other):
        assert _snapshot(s.host_manager) == _snapshot(fresh)


def test_concurrent_requests_share_one_refresh(sqlite_db, conf):  # noqa: F811
    rng = random.Random(5)
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(_fleet(rng, 10)))
    hm = HostManager(sqlite_db, conf)
    hm.refresh()
    calls = []
    started = threading.Event()
    release = threading.Event()
    real = hm._refresh_changed

    def slow_refresh():
        calls.append(1)
        started.set()
        release.wait(5)
        real()

    hm._refresh_changed = slow_refresh
    threads = [threading.Thread(target=hm.refresh) for _ in range(8)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    # The seven that arrived during the first refresh waited for it and reused it.
    assert len(calls) == 1


@pytest.mark.parametrize("which", ["_conn", "_probe_conn"])
def test_refresh_survives_a_lost_database_connection(mariadb_db, conf, caplog,  # noqa: F811
                                                     which):
    import sqlalchemy as sa

    from db import models

    db_hosts.import_fleet(mariadb_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "h1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}]}))
    hm = HostManager(mariadb_db, conf)
    hm.refresh()
    if which == "_probe_conn":
        hm.refresh()            # the first refresh after the load opens the probe
    victim_conn = getattr(hm, which)
    assert victim_conn is not None
    victim = victim_conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
    if victim_conn.in_transaction():
        victim_conn.commit()
    with mariadb_db.writer_connection() as conn:
        conn.exec_driver_sql(f"KILL {int(victim)}")
        cn, inv = models.ComputeNode.__table__, models.ProviderInventory.__table__
        conn.execute(sa.update(inv).where(inv.c.resource_class == "MEMORY_MB")
                     .values(total=8192, max_unit=8192))
        conn.execute(sa.update(cn).values(generation=cn.c.generation + 1,
                                          updated_at=models.utcnow()))
    with caplog.at_level("INFO", logger="scheduler.host_manager"):
        hm.refresh()        # reconnects and reads the change
    assert hm.hosts_named("h1")[0].memory_mb == 8192
    assert "lost its database connection" in caplog.text and "reconnected" in caplog.text
    hm.close()


def test_a_database_that_does_not_answer_is_not_logged_per_refresh(mariadb_db, conf,  # noqa: F811
                                                                  caplog):
    """During an outage every request's refresh fails: the RPC layer logs the
    outage once (ServiceUnavailable); the refresh itself says nothing above DEBUG."""
    from oslo_db import exception as db_exc
    from sqlalchemy.engine import make_url

    from db.api import Database
    from tests.services import TcpProxy

    db_hosts.import_fleet(mariadb_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "h1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}]}))
    proxy = TcpProxy(("127.0.0.1", 3306))
    proxy.start()
    db = Database(make_url(mariadb_db.url).set(port=proxy.port)
                  .render_as_string(hide_password=False))
    hm = HostManager(db, conf)
    try:
        hm.refresh()
        hm.refresh()
        proxy.stop()            # the database goes away
        with caplog.at_level("DEBUG", logger="scheduler.host_manager"):
            for _ in range(3):
                with pytest.raises(db_exc.DBConnectionError):
                    hm.refresh()
        assert not [r for r in caplog.records if r.name == "scheduler.host_manager"
                    and r.levelname in ("WARNING", "ERROR", "INFO")], caplog.text
        assert "does not answer" in caplog.text
    finally:
        proxy.stop()
        hm.close()
        db.dispose()


def test_probe_sees_commits_made_after_it_last_ran(any_db, conf):  # noqa: F811
    """The autocommit probe must not keep reading an old snapshot."""
    import sqlalchemy as sa

    from db import models

    db_hosts.import_fleet(any_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "h1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}]}))
    hm = HostManager(any_db, conf)
    cn, inv = models.ComputeNode.__table__, models.ProviderInventory.__table__
    for memory in (5000, 6000, 7000):
        hm.refresh()
        with any_db.writer_connection() as conn:
            conn.execute(sa.update(inv).where(inv.c.resource_class == "MEMORY_MB")
                         .values(total=memory, max_unit=memory))
            conn.execute(sa.update(cn).values(generation=cn.c.generation + 1,
                                              updated_at=models.utcnow()))
        hm.refresh()
        assert hm.hosts_named("h1")[0].memory_mb == memory
    hm.close()


def test_a_rescheduled_instance_stays_indexed_on_its_new_node(sqlite_db, conf):  # noqa: F811
    """Another scheduler re-reads the instance's new node before its old one: the
    old node's re-read must not drop the new node's index entry (a release
    through that scheduler would then leave the instance in its cache)."""
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [
        {"host": h, "vcpus": 8, "memory_mb": ram, "local_gb": 50,
         "metrics": {"cpu.percent": 1, "cpu.frequency": 1}}
        for h, ram in (("h1", 8192), ("h2", 16384))]}))
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf)
    other = FilterScheduler(HostManager(sqlite_db, conf), conf)
    spec = sched.parse_request({"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}})
    first = sched.select_destinations(spec)[0][0]
    assert first.host == "h2"
    uuid = first.instance_uuid
    other.host_manager.refresh()
    assert sched.reschedule(uuid, "h2")[0].host == "h1"
    other.host_manager.refresh()
    assert other.host_manager.instance_nodes([uuid]) == \
        sched.host_manager.instance_nodes([uuid])
    other.release(uuid)
    fresh = HostManager(sqlite_db, conf, load_pci_pools=True)
    assert _snapshot(other.host_manager) == _snapshot(fresh)
