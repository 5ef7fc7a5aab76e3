"""FilterScheduler behaviour on a real (SQLite or MariaDB) database."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import claims, models
from db import hosts as db_hosts
from scheduler import exception, simulate
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, load_filters
from scheduler.host_manager import HostManager

U = ["%08d-0000-0000-0000-000000000000" % i for i in range(10)]


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    c.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                       "DiskFilter"], group="filter_scheduler")
    c.set_override("weight_classes", [], group="filter_scheduler")
    yield c
    c.clear_override("enabled_filters", group="filter_scheduler")
    c.clear_override("weight_classes", group="filter_scheduler")


def _fleet(db, hosts):
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))


def _sched(db, conf):
    return FilterScheduler(HostManager(db, conf), conf)


def _req(sched, vcpus=1, ram=1024, disk=10, **kw):
    return sched.parse_request({"flavor": {"vcpus": vcpus, "memory_mb": ram, "root_gb": disk},
                                **kw})


def _allocations(db):
    with db.reader_connection() as conn:
        return {r.uuid: r.compute_node_id
                for r in conn.execute(sa.select(models.Consumer))}


TWO_HOSTS = [{"host": "a", "vcpus": 4, "memory_mb": 4096, "local_gb": 100},
             {"host": "b", "vcpus": 4, "memory_mb": 4096, "local_gb": 100}]


def test_claim_is_persisted_and_usage_matches(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    sel = s.select_destinations(_req(s, 2, 2048, 10), [U[0]])
    assert len(sel) == 1 and sel[0][0].host in ("a", "b")
    assert sel[0][0].allocation == {"vcpus": 2, "memory_mb": 2048, "disk_mb": 10240}
    assert list(_allocations(any_db)) == [U[0]]
    assert simulate.check_invariants(any_db) == []
    usage = simulate.node_usage(any_db)[sel[0][0].host]
    assert usage["memory_mb_used"] == 2048 and usage["local_gb_used"] == 10


def test_multi_instance_is_all_or_nothing(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(_req(s, 1, 3000, 1, num_instances=3), U[:3])
    assert err.value.summary["instance_index"] == 2
    assert _allocations(any_db) == {}
    assert simulate.check_invariants(any_db) == []
    # And the memory really came back: two fit afterwards.
    assert len(s.select_destinations(_req(s, 1, 3000, 1, num_instances=2), U[3:5])) == 2


def test_alternates(any_db, conf):
    hosts = [{"host": f"h{i}", "vcpus": 4, "memory_mb": 4096, "local_gb": 100}
             for i in range(5)]
    _fleet(any_db, hosts)
    s = _sched(any_db, conf)
    sel = s.select_destinations(_req(s), [U[0]], return_alternates=True)[0]
    assert len(sel) == conf.scheduler.max_attempts
    assert not sel[0].alternate and all(x.alternate for x in sel[1:])
    assert len({x.host for x in sel}) == len(sel)
    assert list(_allocations(any_db)) == [U[0]]      # alternates hold nothing


def test_dry_run_writes_nothing(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    sel = s.select_destinations(_req(s, 1, 3000, num_instances=2), U[:2], dry_run=True)
    # Each host has room for one: the dry run must account for the first.
    assert {x[0].host for x in sel} == {"a", "b"}
    assert _allocations(any_db) == {}
    assert all(u["running_vms"] == 0 for u in simulate.node_usage(any_db).values())


def test_release_is_idempotent(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    s.select_destinations(_req(s, 4, 4096), [U[0]])
    assert s.release(U[0]) is True
    assert s.release(U[0]) is True      # released (by the first call): idempotent
    assert all(u["vcpus_used"] == 0 for u in simulate.node_usage(any_db).values())
    # The cache saw the release: the same big request fits twice again.
    s.select_destinations(_req(s, 4, 4096, num_instances=2), U[1:3])


def test_reschedule_avoids_failed_host_and_counts_failure(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    first = s.select_destinations(_req(s), [U[0]])[0][0]
    again = s.reschedule(U[0], first.host)
    assert again[0].host != first.host
    assert _allocations(any_db).keys() == {U[0]}
    with any_db.reader_connection() as conn:
        fb = dict(conn.execute(sa.select(models.ComputeNode.host,
                                         models.ComputeNode.failed_builds)).all())
    assert fb[first.host] == 1 and fb[again[0].host] == 0
    # the same reschedule sent again (its answer lost): the placement it made,
    # the failure counted once
    retried = s.reschedule(U[0], first.host)
    assert (retried[0].host, retried[0].allocation) == (again[0].host, again[0].allocation)
    assert _allocations(any_db).keys() == {U[0]}
    with any_db.reader_connection() as conn:
        assert conn.execute(sa.select(models.ComputeNode.failed_builds).where(
            models.ComputeNode.host == first.host)).scalar_one() == 1
    with pytest.raises(exception.InvalidRequest):
        s.reschedule(U[0], "nowhere")       # it is not there, and never was
    with pytest.raises(exception.NotFound):
        s.reschedule(U[9], "a")


def test_duplicate_instance_uuid_is_invalid_unless_a_retry(any_db, conf):
    """The same UUID for another request is refused; for the same request (a
    retry after a lost reply, even through another scheduler) it gets the
    placement it has."""
    _fleet(any_db, TWO_HOSTS)
    s, other = _sched(any_db, conf), _sched(any_db, conf)
    first = s.select_destinations(_req(s), [U[0]])[0][0]
    with pytest.raises(exception.InvalidRequest) as err:
        s.select_destinations(_req(s, vcpus=2), [U[0]])
    assert err.value.field == "instance_uuids"
    again = other.select_destinations(_req(other), [U[0]])[0][0]
    assert (again.host, again.node, again.allocation) == \
        (first.host, first.node, first.allocation)
    assert list(_allocations(any_db)) == [U[0]]


def test_stale_cache_claim_conflict_never_overcommits(any_db, conf):
    _fleet(any_db, [{"host": "only", "vcpus": 4, "memory_mb": 4096, "local_gb": 100}])
    s1, s2 = _sched(any_db, conf), _sched(any_db, conf)
    s1.host_manager.refresh()
    s1.host_manager.refresh = lambda: None     # s1 never sees s2's claim by refresh
    s2.select_destinations(_req(s2, 2, 3000), [U[0]])
    with pytest.raises(exception.NoValidHost) as err:
        s1.select_destinations(_req(s1, 2, 3000), [U[1]])
    assert "claim" in str(err.value)
    assert simulate.check_invariants(any_db) == []
    assert list(_allocations(any_db)) == [U[0]]
    # After the conflict, s1 re-read the host: its cache is right again.
    assert s1.host_manager.hosts_named("only")[0].memory_mb_used == 3000


def test_cache_refresh_sees_external_changes(any_db, conf):
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    with pytest.raises(exception.NoValidHost):
        s.select_destinations(_req(s, 1, 8192), [U[0]])
    bigger = [dict(TWO_HOSTS[0], memory_mb=16384), TWO_HOSTS[1],
              {"host": "c", "vcpus": 2, "memory_mb": 2048, "local_gb": 10}]
    _fleet(any_db, bigger)
    assert s.select_destinations(_req(s, 1, 8192), [U[0]])[0][0].host == "a"
    assert {h.host for h in s.host_manager.host_states()} == {"a", "b", "c"}
    db_hosts.delete_host(any_db, "c")
    assert {h.host for h in s.host_manager.host_states()} == {"a", "b"}


def test_claim_guard_in_sql_refuses_over_capacity(sqlite_db, conf):
    _fleet(sqlite_db, [{"host": "x", "vcpus": 1, "memory_mb": 1024, "local_gb": 10}])
    s = _sched(sqlite_db, conf)
    hs = s.host_manager.host_states()[0]
    with pytest.raises(claims.ClaimConflict):
        claims.claim(sqlite_db, claims.ClaimRecord(
            instance_uuid=U[0], node_id=hs.node_id, seen_generation=hs.generation,
            items=((hs.providers[0][0], "VCPU", 5), (hs.providers[0][0], "MEMORY_MB", 1))))
    assert _allocations(sqlite_db) == {}


def test_no_valid_host_explains_per_filter(sqlite_db, conf):
    _fleet(sqlite_db, TWO_HOSTS + [{"host": "off", "vcpus": 64, "memory_mb": 65536,
                                    "local_gb": 100, "disabled": True}])
    s = _sched(sqlite_db, conf)
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(_req(s, 2, 8192))
    msg = str(err.value)
    assert "0/3 hosts available" in msg
    assert "1 ComputeFilter" in msg and "2 RamFilter (insufficient RAM: need 8192 MB)" in msg
    filters = {f["filter"]: f["removed"] for f in err.value.summary["filters"]}
    assert filters == {"ComputeFilter": 1, "RamFilter": 2}


def test_unknown_filter_fails_clearly(conf):
    with pytest.raises(exception.InvalidRequest) as err:
        load_filters(["RamFilter", "NoSuchFilter"], conf)
    assert "NoSuchFilter" in str(err.value)


def test_force_and_ignore_hosts(sqlite_db, conf):
    _fleet(sqlite_db, TWO_HOSTS)
    s = _sched(sqlite_db, conf)
    assert s.select_destinations(_req(s, force_hosts=["b"]))[0][0].host == "b"
    assert s.select_destinations(_req(s, ignore_hosts=["a"]))[0][0].host == "b"
    with pytest.raises(exception.NoValidHost) as err:
        s.select_destinations(_req(s, force_hosts=["zzz"]))
    assert "force_hosts" in str(err.value)


def test_info_log_says_which_filter_removed_how_many(sqlite_db, conf, caplog):
    _fleet(sqlite_db, TWO_HOSTS + [{"host": "off", "vcpus": 64, "memory_mb": 65536,
                                    "local_gb": 100, "disabled": True},
                                   {"host": "tiny", "vcpus": 1, "memory_mb": 512,
                                    "local_gb": 10}])
    s = _sched(sqlite_db, conf)
    with caplog.at_level("INFO", logger="scheduler.filter_scheduler"):
        s.select_destinations(_req(s, 1, 1024))
    line = next(r.getMessage() for r in caplog.records if "Placed" in r.getMessage())
    assert "2/4 hosts passed filters" in line
    assert "ComputeFilter -1" in line and "RamFilter -1" in line


def test_a_claim_persisted_but_not_applied_is_given_back(any_db, conf):
    """If applying a persisted claim to the cache fails, the claim is released
    and the request fails: nothing is held that the caller does not know of."""
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)

    def broken(*args, **kwargs):
        raise RuntimeError("cache broke")
    s.host_manager.apply_claim = broken
    with pytest.raises(RuntimeError):
        s.select_destinations(_req(s), [U[0]])
    assert _allocations(any_db) == {}
    assert simulate.check_invariants(any_db) == []


def test_a_request_killed_part_way_gives_its_claims_back(any_db, conf):
    """A BaseException between instances (eventlet's Timeout, a killed green
    thread) undoes the claims already made."""
    _fleet(any_db, TWO_HOSTS)
    s = _sched(any_db, conf)
    real = s._place_instance
    calls = []

    def second_dies(req, index, uuid):
        calls.append(index)
        if index == 1:
            raise KeyboardInterrupt("killed")
        return real(req, index, uuid)
    s._place_instance = second_dies
    with pytest.raises(KeyboardInterrupt):
        s.select_destinations(_req(s, num_instances=2), [U[0], U[1]])
    assert calls == [0, 1] and _allocations(any_db) == {}
