"""Admission control: a worker works on a bounded number of requests, lets a
bounded number wait a bounded time, bounds each caller, and answers pings
ahead of the work; the rest is ServiceUnavailable at once, having done nothing.
Also the bounds of one call: its message bytes and a capacity call's flavors."""
from __future__ import annotations

import json
import threading
import time

import pytest
from oslo_config import cfg

from scheduler import envelope as envelope_checks
from scheduler import exception
from scheduler.admission import Admission
from tests.unit.hardening import inproc
from tests.unit.hardening.raw_rpc import RawService, envelope, message, reply_queue
from tests.unit.hardening.test_envelopes import typed_failure


@pytest.fixture
def conf():
    assert envelope_checks.LIST_OPTS        # max_message_bytes registered
    conf = cfg.CONF
    conf([], project="berth")
    yield conf
    for name in ("max_concurrent_requests", "max_queued_requests", "queue_timeout",
                 "max_requests_per_caller", "max_message_bytes"):
        conf.clear_override(name, group="scheduler")


def _bounds(conf, active, queued, timeout, per_caller=0):
    conf.set_override("max_concurrent_requests", active, group="scheduler")
    conf.set_override("max_queued_requests", queued, group="scheduler")
    conf.set_override("queue_timeout", timeout, group="scheduler")
    conf.set_override("max_requests_per_caller", per_caller, group="scheduler")


class Holder:
    """A call holding a turn until released."""

    def __init__(self, admission, ctxt=None, method="select_destinations"):
        self.release = threading.Event()
        self.entered = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(admission, ctxt or {},
                                                                method))
        self.thread.start()

    def _run(self, admission, ctxt, method):
        try:
            with admission.turn(method, ctxt):
                self.entered.set()
                self.release.wait(10)
        except exception.ServiceUnavailable as e:
            self.error = e
            self.entered.set()


def test_a_full_queue_is_refused_at_once_and_a_waiter_after_the_timeout(conf):
    _bounds(conf, active=1, queued=1, timeout=0.3)
    admission = Admission(conf, pool_size=64)
    working = Holder(admission)
    assert working.entered.wait(5)
    waiting = Holder(admission)
    time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(exception.ServiceUnavailable) as caught:
        with admission.turn("release", {}):
            pass
    assert time.monotonic() - t0 < 0.1
    assert "max_concurrent_requests" in caught.value.message
    waiting.thread.join(5)
    assert isinstance(waiting.error, exception.ServiceUnavailable)
    assert "queue_timeout" in waiting.error.message
    with admission.turn("ping", {}):       # pings never wait
        pass
    working.release.set()
    working.thread.join(5)
    assert (admission.active, admission.queued) == (0, 0)
    with admission.turn("release", {}):     # a turn again
        pass


def test_a_waiter_gets_the_turn_that_frees(conf):
    _bounds(conf, active=1, queued=4, timeout=5)
    admission = Admission(conf, pool_size=64)
    working = Holder(admission)
    assert working.entered.wait(5)
    waiting = Holder(admission)
    time.sleep(0.05)
    assert not waiting.entered.is_set()
    working.release.set()
    assert waiting.entered.wait(5) and waiting.error is None
    waiting.release.set()
    waiting.thread.join(5)


def test_one_caller_is_bounded_the_others_are_not(conf):
    _bounds(conf, active=8, queued=8, timeout=1, per_caller=2)
    admission = Admission(conf, pool_size=64)
    a = {"project_id": "a", "user_id": "u"}
    holders = [Holder(admission, a) for _ in range(2)]
    assert all(h.entered.wait(5) for h in holders)
    with pytest.raises(exception.ServiceUnavailable) as caught:
        with admission.turn("select_destinations", a):
            pass
    assert "max_requests_per_caller" in caught.value.message
    with admission.turn("select_destinations", {"project_id": "b", "user_id": "u"}):
        pass
    for h in holders:
        h.release.set()
        h.thread.join(5)
    with admission.turn("select_destinations", a):
        pass


def test_the_queue_leaves_executor_threads_for_pings(conf):
    _bounds(conf, active=8, queued=100, timeout=1)
    assert Admission(conf, pool_size=64).max_queued == 64 - 8 - 8


# -- over the broker -----------------------------------------------------------------------

@pytest.fixture
def raw(sqlite_db, conf):
    conf = inproc.configure(conf)
    service = RawService(sqlite_db, conf)
    yield service
    service.close()
    inproc.unconfigure(conf)


def _call(raw, msg, timeout=10):
    q = reply_queue()
    return raw.call(envelope(dict(msg, _reply_q=q)), q, timeout=timeout)


def test_over_the_broker_a_busy_worker_refuses_and_still_answers_pings(raw, monkeypatch):
    """One request works (it waits on an event), none may wait: a second is
    ServiceUnavailable at once, a ping is answered, and the first then ends."""
    raw.service.admission.max_active, raw.service.admission.max_queued = 1, 0
    gate = threading.Event()
    manager = raw.service.manager
    monkeypatch.setattr(type(manager), "list_hosts",
                        lambda self, ctxt: gate.wait(10) and [], raising=True)
    manager.list_hosts.__func__.rpc_method = True
    replies = []
    first = threading.Thread(target=lambda: replies.append(
        _call(raw, message("list_hosts"), timeout=15)))
    first.start()
    deadline = time.monotonic() + 5
    while raw.service.admission.active == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    refused = _call(raw, message("aggregate_list"))
    assert typed_failure(refused, exception.ServiceUnavailable)["reason"].startswith(
        "the scheduler is busy")
    t0 = time.monotonic()
    pong = _call(raw, message("ping"))
    assert pong["failure"] is None and time.monotonic() - t0 < 2
    gate.set()
    first.join(15)
    assert replies and replies[0]["failure"] is None


def test_a_message_over_the_byte_bound_is_refused_unread(raw, conf):
    conf.set_override("max_message_bytes", 64 * 1024, group="scheduler")
    spec = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                       "extra_specs": {f"k{i}": "v" * 1000 for i in range(100)}}}
    kwargs = typed_failure(_call(raw, message("select_destinations",
                                              {"request_spec": spec, "dry_run": True})))
    assert kwargs["field"] == "message" and "max_message_bytes" in kwargs["reason"]


def test_a_capacity_call_is_bounded_in_flavors(raw):
    flavors = [{"vcpus": 1, "memory_mb": 512 + i, "root_gb": 1} for i in range(1001)]
    kwargs = typed_failure(_call(raw, message("capacity", {"request_spec": flavors})))
    assert kwargs["field"] == "requests"
    assert json.dumps(kwargs)   # plain values


def test_a_ping_is_answered_while_every_executor_thread_is_busy(sqlite_db, conf,
                                                                  monkeypatch):
    """Two executor threads, both held by requests and a third waiting for a
    thread: a ping is answered by the thread that reads the broker."""
    from oslo_messaging import server as messaging_server

    conf = inproc.configure(conf)
    conf.register_opts(messaging_server._pool_opts)
    conf.set_override("executor_thread_pool_size", 2)
    gate = threading.Event()
    from scheduler.manager import SchedulerManager

    def blocked(self, ctxt):
        gate.wait(20)
        return []
    blocked.rpc_method = True
    monkeypatch.setattr(SchedulerManager, "list_hosts", blocked)
    raw = RawService(sqlite_db, conf)
    try:
        raw.service.admission.max_active, raw.service.admission.max_queued = 10, 10
        callers = [threading.Thread(target=_call, args=(raw, message("list_hosts"), 30))
                   for _ in range(3)]
        for c in callers:
            c.start()
        deadline = time.monotonic() + 5
        while raw.service.admission.active < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert raw.service.admission.active == 2
        t0 = time.monotonic()
        pong = _call(raw, message("ping"), timeout=5)
        assert pong is not None and pong["failure"] is None, pong
        assert time.monotonic() - t0 < 2
    finally:
        gate.set()
        for c in callers:
            c.join(30)
        raw.close()
        conf.clear_override("executor_thread_pool_size")
        inproc.unconfigure(conf)


def test_the_client_library_sends_a_busy_call_again(raw, conf, monkeypatch):
    """A call refused as busy did nothing: SchedulerAPI sends it again until a
    turn frees (within busy_retry_timeout); with 0 the caller gets the refusal."""
    from scheduler.manager import SchedulerManager
    from scheduler.rpcapi import SchedulerAPI

    raw.service.admission.max_active, raw.service.admission.max_queued = 1, 0
    gate = threading.Event()

    def blocked(self, ctxt):
        gate.wait(10)
        return []
    blocked.rpc_method = True
    monkeypatch.setattr(SchedulerManager, "list_hosts", blocked)
    api = SchedulerAPI(conf, transport=raw.transport, topic=raw.topic, timeout=20)
    first = threading.Thread(target=api.list_hosts, args=(None,))
    first.start()
    deadline = time.monotonic() + 5
    while raw.service.admission.active == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    conf.set_override("busy_retry_timeout", 0, group="scheduler")
    with pytest.raises(exception.ServiceUnavailable):
        api.aggregate_list(None)
    conf.clear_override("busy_retry_timeout", group="scheduler")
    threading.Timer(0.5, gate.set).start()
    t0 = time.monotonic()
    assert api.aggregate_list(None) == []       # sent again until the turn freed
    assert time.monotonic() - t0 >= 0.4
    first.join(10)
