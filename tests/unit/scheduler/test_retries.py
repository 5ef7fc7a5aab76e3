"""A lost reply costs nothing: a retry of a placed request gets its placements.

The scheduler recognises a retry (the same instance UUIDs, allocations made for
the same request) and answers with what it placed; the client library retries a
timed-out select once with the same UUIDs, picking them itself when the caller
gave none.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import models
from scheduler import exception, rpc
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService

FLEET = {"hosts": [{"host": f"c{i}", "vcpus": 8, "memory_mb": 16384, "local_gb": 100}
                   for i in range(4)]}
SPEC = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}, "num_instances": 2}


@pytest.fixture
def sched(sqlite_db):
    conf = cfg.CONF
    conf([], project="berth")
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(FLEET))
    return FilterScheduler(HostManager(sqlite_db, conf), conf)


def _allocations(db):
    with db.reader_connection() as conn:
        return conn.execute(sa.select(models.Consumer.__table__.c.uuid,
                                      models.Consumer.__table__.c.compute_node_id)).all()


def test_a_retry_of_a_placed_request_returns_its_placements(sqlite_db, sched):
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    first = sched.select_destinations(sched.parse_request(SPEC), uuids)
    again = sched.select_destinations(sched.parse_request(SPEC), uuids)
    assert [[s.host for s in sel] for sel in again] == [[s.host for s in sel] for sel in first]
    assert [sel[0].allocation for sel in again] == [sel[0].allocation for sel in first]
    assert len(_allocations(sqlite_db)) == 2                 # claimed once
    used = sum(h.vcpus_used for h in sched.host_manager.host_states())
    assert used == 4


def test_the_same_uuids_for_another_request_are_refused(sqlite_db, sched):
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    sched.select_destinations(sched.parse_request(SPEC), uuids)
    other = dict(SPEC, flavor={"vcpus": 4, "memory_mb": 2048, "root_gb": 10})
    with pytest.raises(exception.InvalidRequest, match="already allocated"):
        sched.select_destinations(sched.parse_request(other), uuids)
    # One of them placed, the other new: refused too, and nothing claimed.
    with pytest.raises(exception.InvalidRequest, match="already allocated"):
        sched.select_destinations(sched.parse_request(SPEC), [uuids[0], str(uuid.uuid4())])
    assert len(_allocations(sqlite_db)) == 2


def test_a_dry_run_is_never_taken_for_a_retry(sqlite_db, sched):
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    sched.select_destinations(sched.parse_request(SPEC), uuids, dry_run=True)
    sched.select_destinations(sched.parse_request(SPEC), uuids)
    assert len(_allocations(sqlite_db)) == 2


class LosesFirstReply:
    """The real scheduler, but the first reply arrives after the client gave up."""

    def __init__(self, real):
        self.real = real
        self.calls = 0
        self.placed = threading.Event()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def select_destinations(self, spec, instance_uuids=None, **kw):
        self.calls += 1
        result = self.real.select_destinations(spec, instance_uuids, **kw)
        if self.calls == 1:
            self.placed.set()
            time.sleep(2.5)
        return result


def test_the_client_retries_a_lost_reply_with_the_same_uuids(sqlite_db, sched):
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    cfg.CONF.set_override("topic", "retry_" + uuid.uuid4().hex[:8], group="scheduler")
    cfg.CONF.set_override("long_rpc_timeout", 1, group="scheduler")
    slow = LosesFirstReply(sched)
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=slow, db=sqlite_db)
    service.start()
    try:
        api = SchedulerAPI(cfg.CONF, transport=transport, timeout=1)
        result = api.select_destinations(None, SPEC)
        assert slow.calls == 2 and slow.placed.is_set()
        held = {u for u, _ in _allocations(sqlite_db)}
        assert {sel[0]["instance_uuid"] for sel in result} == held and len(held) == 2
        cfg.CONF.set_override("select_retries", 0, group="scheduler")
        import oslo_messaging
        with pytest.raises(oslo_messaging.MessagingTimeout):
            slow.calls = 0
            api.select_destinations(None, SPEC)
    finally:
        service.stop(5)
        transport.cleanup()
        for name in ("topic", "long_rpc_timeout", "select_retries"):
            cfg.CONF.clear_override(name, group="scheduler")


def test_a_retry_when_its_own_claims_filled_the_fleet(sqlite_db):
    """The first call took the last room; the retry finds no host, yet gets its
    placements (a retry is recognised on that path too)."""
    conf = cfg.CONF
    conf([], project="berth")
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "only", "vcpus": 4, "memory_mb": 4096, "local_gb": 100,
                    "cpu_allocation_ratio": 1.0}]}))
    s = FilterScheduler(HostManager(sqlite_db, conf), conf)
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    first = s.select_destinations(s.parse_request(SPEC), uuids)
    again = s.select_destinations(s.parse_request(SPEC), uuids)
    assert [sel[0].host for sel in again] == [sel[0].host for sel in first] == ["only"] * 2
    with pytest.raises(exception.NoValidHost):
        s.select_destinations(s.parse_request(SPEC), [str(uuid.uuid4()) for _ in range(2)])
    assert len(_allocations(sqlite_db)) == 2


def _pending(db) -> dict[str, bool]:
    a = models.Consumer.__table__
    with db.reader_connection() as conn:
        return {u: bool(p) for u, p in conn.execute(sa.select(a.c.instance_uuid, a.c.pending))}


def test_a_retry_of_a_request_stopped_part_way_places_the_rest(sqlite_db, sched, monkeypatch):
    """The first try claimed one of two instances, then stopped without giving
    it back (its worker died; here the undo cannot run): the retry keeps that
    claim and places the other, once."""
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    real_place = sched._place_instance

    def dies_at_the_second(req, index, instance_uuid):
        if index == 1:
            raise exception.ServiceUnavailable(reason="the database does not answer")
        return real_place(req, index, instance_uuid)

    monkeypatch.setattr(sched, "_place_instance", dies_at_the_second)
    monkeypatch.setattr(sched, "_undo", lambda claimed, pending: None)
    with pytest.raises(exception.ServiceUnavailable):
        sched.select_destinations(sched.parse_request(SPEC), uuids)
    assert _pending(sqlite_db) == {uuids[0]: True}      # left pending: the reaper's
    monkeypatch.undo()
    first_node = dict(_allocations(sqlite_db))[uuids[0]]

    again = sched.select_destinations(sched.parse_request(SPEC), uuids)
    assert [sel[0].instance_uuid for sel in again] == uuids
    assert _pending(sqlite_db) == {uuids[0]: False, uuids[1]: False}
    assert dict(_allocations(sqlite_db))[uuids[0]] == first_node
    used = sum(h.vcpus_used for h in sched.host_manager.host_states())
    assert used == 4                                    # claimed once each
    # asked once more: all held now, the same placements
    third = sched.select_destinations(sched.parse_request(SPEC), uuids)
    assert [sel[0].host for sel in third] == [sel[0].host for sel in again]
    assert len(_allocations(sqlite_db)) == 2


def test_a_resumed_request_that_fails_gives_back_what_it_held(sqlite_db):
    conf = cfg.CONF
    conf([], project="berth")
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(
        {"hosts": [{"host": "only", "vcpus": 4, "memory_mb": 4096, "local_gb": 100,
                    "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0}]}))
    s = FilterScheduler(HostManager(sqlite_db, conf), conf)
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    # the first try held the first instance (pending), then stopped
    s.select_destinations(s.parse_request(dict(SPEC, num_instances=1)), uuids[:1],
                          pending=True)
    s.select_destinations(s.parse_request(dict(SPEC, num_instances=1)))   # the last room
    with pytest.raises(exception.NoValidHost):
        s.select_destinations(s.parse_request(SPEC), uuids)
    assert uuids[0] not in _pending(sqlite_db)          # given back at once
    assert sum(h.vcpus_used for h in s.host_manager.host_states()) == 2


def test_a_mix_with_a_confirmed_placement_is_still_refused(sqlite_db, sched):
    placed = str(uuid.uuid4())
    sched.select_destinations(sched.parse_request(dict(SPEC, num_instances=1)), [placed])
    with pytest.raises(exception.InvalidRequest, match="already allocated"):
        sched.select_destinations(sched.parse_request(SPEC), [placed, str(uuid.uuid4())])
    assert len(_allocations(sqlite_db)) == 1


THREE = dict(SPEC, num_instances=3)


def test_two_tries_of_one_request_meet_and_both_keep_the_placements(sqlite_db, sched):
    """Another try of this request (a retry still running, or one that stopped
    part-way) holds one of the instances, pending: this try keeps its own
    claims and answers the whole request instead of giving them back."""
    uuids = [str(uuid.uuid4()) for _ in range(3)]
    sched.select_destinations(sched.parse_request(dict(SPEC, num_instances=1)), uuids[2:],
                              pending=True)           # the other try's claim
    placed = sched.select_destinations(sched.parse_request(THREE), uuids)
    assert [sel[0].instance_uuid for sel in placed] == uuids
    assert _pending(sqlite_db) == dict.fromkeys(uuids, False)
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 6


def test_a_request_whose_claim_was_released_meanwhile_holds_nothing(sqlite_db, sched,
                                                                    monkeypatch):
    """One of the request's claims is released before the request is confirmed
    (reaped, or given back by a failed try of the same request): the request
    fails with Conflict and holds nothing, instead of answering a placement
    that has no allocation."""
    uuids = [str(uuid.uuid4()) for _ in range(3)]
    real_place = sched._place_instance

    def reaped_meanwhile(req, index, instance_uuid):
        if index == 2:
            sched.release(uuids[0], pending_before=models.utcnow() + __import__(
                "datetime").timedelta(days=1))
        return real_place(req, index, instance_uuid)

    monkeypatch.setattr(sched, "_place_instance", reaped_meanwhile)
    with pytest.raises(exception.Conflict, match=uuids[0]):
        sched.select_destinations(sched.parse_request(THREE), uuids)
    assert _pending(sqlite_db) == {}
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 0


def test_a_failed_try_does_not_give_back_what_another_try_answered(sqlite_db, sched,
                                                                  monkeypatch):
    """Two tries of one request: try A claimed the first instance (pending);
    try B met it, placed the second and answered the whole request (its claims
    confirmed). A then fails (NoValidHost, a timeout, the database): its undo
    must not release the claim B answered, else the caller holds a placement
    with no allocation behind it."""
    uuids = [str(uuid.uuid4()) for _ in range(2)]
    real_place = sched._place_instance
    answered = {}

    def other_try_meanwhile(req, index, instance_uuid):
        if index == 1 and not answered:
            monkeypatch.setattr(sched, "_place_instance", real_place)
            answered["b"] = sched.select_destinations(sched.parse_request(SPEC), uuids)
            raise exception.NoValidHost(reason="the other try took the last room")
        return real_place(req, index, instance_uuid)

    monkeypatch.setattr(sched, "_place_instance", other_try_meanwhile)
    a = sched.select_destinations(sched.parse_request(SPEC), uuids)
    b = answered["b"]
    held = dict(_allocations(sqlite_db))
    assert set(held) == set(uuids) and _pending(sqlite_db) == dict.fromkeys(uuids, False)
    assert [sel[0].host for sel in a] == [sel[0].host for sel in b]
    nodes = {h.host: h.node_id for h in sched.host_manager.host_states()}
    assert [held[u] for u in uuids] == [nodes[sel[0].host] for sel in b]
    assert sum(h.vcpus_used for h in sched.host_manager.host_states()) == 4


def test_confirm_is_all_or_none(sqlite_db, sched):
    from db import claims

    held = [str(uuid.uuid4())]
    sched.select_destinations(sched.parse_request(dict(SPEC, num_instances=1)), held,
                              pending=True)
    gone = str(uuid.uuid4())
    assert claims.confirm(sqlite_db, held + [gone]) == ([], [gone])
    assert _pending(sqlite_db) == {held[0]: True}           # still pending
    assert claims.confirm(sqlite_db, held) == (held, [])
    assert _pending(sqlite_db) == {held[0]: False}
