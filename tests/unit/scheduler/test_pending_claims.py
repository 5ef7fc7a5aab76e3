"""Pending claims: held until the caller confirms them, released by the one
reaper of the deployment once older than ``[scheduler] claim_ttl``.

Issue 17, part 2: a claim whose reply was lost (or that a failed request could
not give back) is capacity nobody knows it holds; here it is given back.
"""
from __future__ import annotations

import datetime
import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import claims, leases, models
from db import hosts as db_hosts
from db.models import utcnow
from scheduler import exception, metrics, rpc
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.manager import SchedulerManager
from scheduler.reaper import LEASE, ClaimReaper
from scheduler.rpcapi import SchedulerAPI
from tests.unit.scheduler.inprocess_daemon import serving

FLEET = {"hosts": [{"host": f"c{i}", "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
                    "cpu_allocation_ratio": 1.0}
                   for i in range(3)]}
ONE = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}, "project_id": "pa"}
TWO = dict(ONE, num_instances=2)
_alloc = models.Consumer.__table__
_cn = models.ComputeNode.__table__


@pytest.fixture
def sched(any_db):
    conf = cfg.CONF
    conf([], project="berth")
    db_hosts.import_fleet(any_db, fleet_mod.load_fleet(FLEET))
    return FilterScheduler(HostManager(any_db, conf), conf)


@pytest.fixture
def ttl():
    cfg.CONF.set_override("claim_ttl", 60, group="scheduler")
    cfg.CONF.set_override("reaper_interval", 1.0, group="scheduler")
    yield 60
    cfg.CONF.clear_override("claim_ttl", group="scheduler")
    cfg.CONF.clear_override("reaper_interval", group="scheduler")


def rows(db) -> dict[str, bool]:
    """instance uuid -> pending, for every allocation."""
    with db.reader_connection() as conn:
        return {r.instance_uuid: bool(r.pending)
                for r in conn.execute(sa.select(_alloc.c.instance_uuid, _alloc.c.pending))}


def vcpus_used(db) -> int:
    """VCPU handed out over every node."""
    inv = models.ProviderInventory.__table__
    with db.reader_connection() as conn:
        return conn.execute(sa.select(sa.func.coalesce(sa.func.sum(inv.c.used), 0)).where(
            inv.c.resource_class == "VCPU")).scalar_one()


def place(sched, spec, **kw) -> list[str]:
    result = sched.select_destinations(sched.parse_request(spec), **kw)
    return [sel[0].instance_uuid for sel in result]


def later(seconds: float) -> datetime.datetime:
    return utcnow() + datetime.timedelta(seconds=seconds)


def test_pending_claims_are_held_until_confirmed(any_db, sched):
    held = place(sched, TWO, pending=True)
    assert rows(any_db) == dict.fromkeys(held, True)
    assert vcpus_used(any_db) == 4                   # pending claims hold capacity
    stranger = str(uuid.uuid4())
    assert sched.confirm([held[0], stranger]) == ([], [stranger])   # all or none
    assert rows(any_db) == dict.fromkeys(held, True)
    assert sched.confirm([held[0]]) == ([held[0]], [])
    assert rows(any_db) == {held[0]: False, held[1]: True}
    assert sched.confirm([held[0]]) == ([held[0]], [])       # idempotent


def test_claims_of_a_caller_that_does_not_confirm_are_held_at_once(any_db, sched):
    one = place(sched, ONE)
    several = place(sched, TWO)        # pending while placing, confirmed when all are
    assert rows(any_db) == dict.fromkeys(one + several, False)


def test_the_reaper_releases_pending_claims_older_than_the_ttl(any_db, sched, ttl):
    kept = place(sched, ONE, pending=True)
    sched.confirm(kept)
    legacy = place(sched, ONE)
    lost = place(sched, TWO, pending=True)
    reaper = ClaimReaper(any_db, sched, cfg.CONF)
    before = metrics.CLAIMS_REAPED._value.get()
    assert reaper.run_once(now=later(ttl - 5)) == 0         # not old enough yet
    assert set(rows(any_db)) == set(kept + legacy + lost)
    assert reaper.run_once(now=later(ttl + 1)) == 2
    assert set(rows(any_db)) == set(kept + legacy)
    assert metrics.CLAIMS_REAPED._value.get() - before == 2
    assert vcpus_used(any_db) == 4
    # The reaping worker's own cache follows: the room is offered again.
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 4
    assert len(place(sched, dict(ONE, num_instances=10))) == 10      # 24 vCPUs in all


def test_a_confirm_that_wins_the_race_keeps_the_claim(any_db, sched, ttl):
    held = place(sched, ONE, pending=True)
    cutoff = later(ttl + 1)
    sched.confirm(held)     # arrives between the reaper's query and its release
    assert not sched.release(held[0], pending_before=cutoff)
    assert rows(any_db) == {held[0]: False}


def test_claims_a_failed_undo_left_behind_are_reaped(any_db, sched, ttl, monkeypatch):
    """A request of three instances fails on its third; the database refuses the
    undo: the two claims stay, pending, until the reaper gives them back."""
    spec = dict(ONE, num_instances=3,
                flavor={"vcpus": 8, "memory_mb": 2048, "root_gb": 10})
    real_claim, real_release = claims.claim, claims.release
    calls = []

    def third_fails(db, rec):
        calls.append(rec.instance_uuid)
        if len(calls) == 3:
            raise exception.ServiceUnavailable(reason="database went away")
        return real_claim(db, rec)

    def refused(db, instance_uuid, pending_before=None, **kw):
        if pending_before is None or pending_before.year == 9999:
            # the undo (it gives back only what is still pending); the reaper's
            # release works
            raise exception.ServiceUnavailable(reason="database went away")
        return real_release(db, instance_uuid, pending_before=pending_before, **kw)

    monkeypatch.setattr(claims, "claim", third_fails)
    monkeypatch.setattr(claims, "release", refused)
    with pytest.raises(exception.ServiceUnavailable):
        place(sched, spec)
    assert rows(any_db) == dict.fromkeys(calls[:2], True)
    assert ClaimReaper(any_db, sched, cfg.CONF).run_once(now=later(ttl + 1)) == 2
    assert rows(any_db) == {} and vcpus_used(any_db) == 0


def test_a_retry_of_a_placed_request_confirms_its_claims(any_db, sched):
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    place(sched, TWO, instance_uuids=uuids, pending=True)     # the reply was lost
    again = place(sched, TWO, instance_uuids=uuids)            # an old client retries
    assert again == uuids and rows(any_db) == dict.fromkeys(uuids, False)


def test_one_reaper_per_deployment(any_db, sched, ttl):
    a = ClaimReaper(any_db, sched, cfg.CONF, worker=0)
    b = ClaimReaper(any_db, sched, cfg.CONF, worker=1)
    lost = place(sched, ONE, pending=True)
    now = later(ttl + 1)
    assert a.run_once(now=now) == 1 and a.leader
    lost = place(sched, ONE, pending=True)
    assert b.run_once(now=later(ttl + 2)) == 0 and not b.leader     # a holds the lease
    assert rows(any_db) == {lost[0]: True}
    # a stops renewing (it died): the lease expires three intervals later.
    assert b.run_once(now=now + datetime.timedelta(seconds=3.5)) == 1 and b.leader
    assert a.run_once(now=now + datetime.timedelta(seconds=4)) == 0 and not a.leader
    # b stops cleanly: a takes over at once.
    b.stop()
    assert leases.acquire(any_db, LEASE, a.holder, 3) is True


def test_the_lease_goes_to_exactly_one_of_many_candidates(any_db):
    import concurrent.futures

    holders = [f"h{i}" for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda h: leases.acquire(any_db, "race", h, 30), holders))
    assert won.count(True) == 1
    assert leases.holder_of(any_db, "race")[0] == holders[won.index(True)]


def test_a_zero_ttl_turns_the_reaper_off(any_db, sched):
    cfg.CONF.set_override("claim_ttl", 0, group="scheduler")
    try:
        place(sched, ONE, pending=True)
        assert ClaimReaper(any_db, sched, cfg.CONF).run_once(now=later(10 ** 6)) == 0
        assert leases.holder_of(any_db, LEASE) is None
    finally:
        cfg.CONF.clear_override("claim_ttl", group="scheduler")


def test_a_failing_reaper_warns_once_per_outage(any_db, sched, ttl, caplog, monkeypatch):
    """Rounds that fail while the database is away: one WARNING when it starts,
    one INFO when rounds work again, not a line per round."""
    import logging
    import threading

    from oslo_db import exception as db_exc

    cfg.CONF.set_override("reaper_interval", 0.1, group="scheduler")
    reaper = ClaimReaper(any_db, sched, cfg.CONF)
    rounds: list[int] = []
    done = threading.Event()

    def run_once():
        rounds.append(1)
        if len(rounds) in (2, 3, 4, 5, 8, 9):        # two outages
            raise db_exc.DBConnectionError("Can't connect to MySQL server")
        if len(rounds) >= 11:
            done.set()
        return 0

    monkeypatch.setattr(reaper, "run_once", run_once)
    caplog.set_level(logging.DEBUG, logger="scheduler.reaper")
    reaper.start()
    try:
        assert done.wait(10)
    finally:
        reaper.stop()
    records = [r for r in caplog.records if r.name == "scheduler.reaper"]
    warnings = [r for r in records if r.levelno == logging.WARNING]
    back = [r for r in records if r.levelno == logging.INFO and "work again" in r.getMessage()]
    assert len(warnings) == 2 and len(back) == 2, [r.getMessage() for r in records]
    assert "DBConnectionError" in warnings[0].getMessage()


# -- the RPC method and the client ---------------------------------------------------

def test_confirm_checks_its_arguments(any_db, sched):
    manager = SchedulerManager(any_db, sched, cfg.CONF)
    for bad, field in (([], "instance_uuids"), ("x", "instance_uuids"),
                       (["not-a-uuid"], "instance_uuids[0]")):
        with pytest.raises(Exception) as caught:
            manager.confirm(rpc.new_context(), bad)
        error = getattr(caught.value, "exc_info", (None, caught.value))[1]
        assert isinstance(error, exception.InvalidRequest) and error.field == field


def test_only_the_owner_or_a_service_may_confirm(any_db, sched):
    """Another project's confirm changes nothing and is answered as for
    instances that hold nothing (it does not learn that they exist)."""
    from oslo_context import context

    held = place(sched, ONE, pending=True)
    manager = SchedulerManager(any_db, sched, cfg.CONF)
    other = context.RequestContext(project_id="pb", roles=["member"])
    assert manager.confirm(other, held) == {"confirmed": [], "unknown": held}
    assert rows(any_db) == {held[0]: True}
    owner = context.RequestContext(project_id="pa", roles=["member"])
    assert manager.confirm(owner, held) == {"confirmed": held, "unknown": []}


@pytest.fixture
def daemon(any_db, sched):
    with serving(any_db, sched) as (_, api):
        yield api


def test_the_client_confirms_what_it_received(any_db, daemon):
    auto = [s[0]["instance_uuid"] for s in daemon.select_destinations(None, TWO)]
    manual = [s[0]["instance_uuid"]
              for s in daemon.select_destinations(None, ONE, confirm="manual")]
    old = [s[0]["instance_uuid"]
           for s in daemon.select_destinations(None, ONE, confirm="none")]
    sync = [s[0]["instance_uuid"]
            for s in daemon.select_destinations(None, ONE, confirm="sync")]
    assert rows(any_db)[sync[0]] is False           # confirmed before the call returned
    daemon.wait_confirmed(auto, timeout=10)         # auto: confirmed in the background
    assert rows(any_db) == {**dict.fromkeys(auto + sync, False), manual[0]: True,
                            old[0]: False}
    assert daemon.confirm(None, manual) == {"confirmed": manual, "unknown": []}
    assert rows(any_db)[manual[0]] is False
    with pytest.raises(exception.InvalidRequest, match="confirm"):
        daemon.select_destinations(None, ONE, confirm="later")


def test_a_placement_reaped_before_its_confirm_is_an_error(any_db, sched, daemon, ttl):
    held = [s[0]["instance_uuid"]
            for s in daemon.select_destinations(None, ONE, confirm="manual")]
    ClaimReaper(any_db, sched, cfg.CONF).run_once(now=later(ttl + 1))
    assert daemon.confirm(None, held) == {"confirmed": [], "unknown": held}
    real_confirm = daemon.confirm

    def reaped_first(ctxt, uuids):      # the reaper gets there before the confirm
        for u in uuids:
            sched.release(u)
        return real_confirm(ctxt, uuids)

    daemon.confirm = reaped_first
    with pytest.raises(exception.ClaimExpired) as caught:
        daemon.select_destinations(None, ONE, confirm="sync")
    assert len(caught.value.instance_uuids) == 1 and rows(any_db) == {}
    # auto: the reply comes back at once; the loss is told by wait_confirmed
    placed = [s[0]["instance_uuid"] for s in daemon.select_destinations(None, ONE)]
    with pytest.raises(exception.ClaimExpired) as caught:
        daemon.wait_confirmed(placed, timeout=10)
    assert caught.value.instance_uuids == placed and rows(any_db) == {}


def test_a_capped_client_sends_nothing_new(any_db, daemon):
    cfg.CONF.set_override("rpc_version_cap", "1.0", group="scheduler")
    try:
        capped = SchedulerAPI(cfg.CONF, transport=daemon.transport, timeout=10)
        placed = [s[0]["instance_uuid"] for s in capped.select_destinations(None, ONE)]
        assert rows(any_db) == {placed[0]: False}          # held at once, as 1.0 did
    finally:
        cfg.CONF.clear_override("rpc_version_cap", group="scheduler")


def test_a_request_whose_confirm_finds_one_instance_reaped_holds_nothing(
        any_db, sched, daemon, monkeypatch):
    """One of two instances was reaped before the confirm: the request failed
    as a whole, so the client gives the other back too (it was an orphan:
    confirmed, held by nobody)."""
    real_confirm = daemon.confirm

    def reaped_first(ctxt, uuids):
        sched.release(uuids[0], pending_before=later(10))     # as the reaper would
        return real_confirm(ctxt, uuids)

    monkeypatch.setattr(daemon, "confirm", reaped_first)
    with pytest.raises(exception.ClaimExpired):
        daemon.select_destinations(None, TWO, confirm="sync")
    assert rows(any_db) == {}
    assert vcpus_used(any_db) == 0


def test_a_confirm_that_gets_no_answer_gives_the_claims_back(any_db, sched, daemon,
                                                            monkeypatch):
    tries = []

    def database_away(ctxt, uuids):
        tries.append(uuids)
        raise exception.ServiceUnavailable(reason="the database does not answer")

    monkeypatch.setattr(daemon, "confirm", database_away)
    with pytest.raises(exception.ServiceUnavailable):
        daemon.select_destinations(None, TWO, confirm="sync")
    assert len(tries) == cfg.CONF.scheduler.select_retries + 1
    assert rows(any_db) == {}           # released, not left for the reaper
