"""Restarts and shutdowns of the real daemon: allocations survive a restart, and a
SIGTERM in the middle of a burst loses or half-writes no claim."""
from __future__ import annotations

import threading
import time

import oslo_messaging
import pytest

from tests.functional.daemon import Daemon, small_fleet

SMALL = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5}}


@pytest.fixture
def make_daemon(tmp_path):
    made: list[Daemon] = []

    def make(**kw) -> Daemon:
        d = Daemon(tmp_path, **kw)
        made.append(d)
        return d
    yield make
    for d in made:
        d.close()


@pytest.mark.parametrize("backend", ["eventlet", "threading"])
def test_restart_keeps_allocations(make_daemon, backend):
    d = make_daemon(backend=backend)
    d.start()
    api = d.api()
    placed = api.select_destinations(None, dict(SMALL, num_instances=6))
    uuids = [p[0]["instance_uuid"] for p in placed]
    before_usage, before_allocs = d.usage(), d.allocations()
    assert set(before_allocs) == set(uuids)
    assert d.stop() == 0, d.log_tail()

    d.start()
    assert d.allocations() == before_allocs and d.usage() == before_usage
    listed = {h["host"]: h["vcpus_used"] for h in api.list_hosts(None)}
    assert sum(listed.values()) == 6
    assert api.release(None, uuids[0]) is True      # the new process knows the old claims
    assert api.release(None, uuids[0]) is True      # released already (remembered)
    api.select_destinations(None, SMALL)
    d.assert_consistent()
    assert d.stop() == 0, d.log_tail()


@pytest.mark.parametrize("backend, workers", [("eventlet", 2), ("threading", 1)])
def test_sigterm_during_load_loses_no_claim(make_daemon, backend, workers):
    # Room for every request: any missing allocation is a lost claim, not a full fleet.
    d = make_daemon(backend=backend, workers=workers, fleet=small_fleet(n=8, vcpus=256,
                                                                          memory_mb=400000))
    d.start()
    api = d.api(timeout=8)
    replied: list[str] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def client() -> None:
        while not stop.is_set():
            try:
                # sync: what a client heard back is confirmed, or it heard an error
                sel = api.select_destinations(None, SMALL, confirm="sync")[0][0]
            except BaseException as e:
                with lock:
                    failed.append(e)
                return
            with lock:
                replied.append(sel["instance_uuid"])

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    deadline = time.monotonic() + 60        # a loaded machine answers later
    while not replied and not failed and time.monotonic() < deadline:
        time.sleep(0.1)
    in_flight_before = len(replied)
    assert d.stop() == 0, d.log_tail()              # drained, exit 0
    stop.set()
    for t in threads:
        t.join(30)
    assert in_flight_before > 0
    # Whatever the clients heard back is in MariaDB. A reply that came during the
    # drain may have found no worker left to take its confirm: that claim is
    # pending (the reaper releases it after claim_ttl), and nothing else is there.
    held = set(d.allocations())
    assert held - set(replied) <= d.pending() and held >= set(replied)
    assert not d.pending() & set(replied)
    assert len(replied) == len(set(replied))
    # A request sent after the drain either times out (queue gone, no reply) or
    # is refused by the broker (the auto-deleted test exchange went with the
    # last queue); both mean "never delivered", never a wrong answer.
    undelivered = (oslo_messaging.MessagingTimeout, oslo_messaging.MessageDeliveryFailure)
    assert all(isinstance(e, undelivered) for e in failed), failed
    d.assert_consistent()
