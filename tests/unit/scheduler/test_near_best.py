"""[filter_scheduler] near_best_spread: concurrent schedulers start from a random
near-best host instead of all claiming the best one (issue 17, part 4)."""
from __future__ import annotations

import collections
import threading

import pytest
from oslo_config import cfg

from db import hosts as db_hosts
from scheduler import fleet as fleet_mod
from scheduler import (
    metrics,
    service,  # noqa: F401  ([scheduler] workers)
)
from scheduler.filter_scheduler import NEAR_BEST_MAX, FilterScheduler
from scheduler.host_manager import HostManager

# 20 equal empty hosts, then 5 with usage (lower RAM weight: never near-best).
FLEET = {"hosts": [{"host": f"e{i:02}", "vcpus": 64, "memory_mb": 262144, "local_gb": 1000}
                   for i in range(20)]
         + [{"host": f"u{i}", "vcpus": 64, "memory_mb": 131072, "local_gb": 1000}
            for i in range(5)]}
SPEC = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}


@pytest.fixture
def spread():
    def set_(value):
        cfg.CONF.set_override("near_best_spread", value, group="filter_scheduler")
    yield set_
    cfg.CONF.clear_override("near_best_spread", group="filter_scheduler")
    cfg.CONF.clear_override("workers", group="scheduler")


def scheduler(db, seed=1):
    return FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF, seed=seed)


def first_picks(db, n=40):
    s = scheduler(db)
    return [s.select_destinations(s.parse_request(SPEC), dry_run=True)[0][0].host
            for _ in range(n)]


@pytest.fixture
def db(sqlite_db):
    cfg.CONF([], project="berth")
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet(FLEET))
    return sqlite_db


def test_off_the_best_host_always_comes_first(db, spread):
    spread(0.0)
    assert set(first_picks(db)) == {"e00"}


def test_on_a_random_near_best_host_comes_first(db, spread):
    spread(0.01)
    picks = collections.Counter(first_picks(db, 200))
    assert all(h.startswith("e") for h in picks)        # never a used host
    assert 8 <= len(picks) <= NEAR_BEST_MAX


def test_hosts_outside_the_spread_are_not_picked_first(db, spread):
    spread(10.0)        # every host is "near": still at most NEAR_BEST_MAX of them
    picks = set(first_picks(db, 200))
    assert len(picks) <= NEAR_BEST_MAX


def test_unset_means_on_only_with_several_workers(db, spread):
    spread(None)
    assert set(first_picks(db)) == {"e00"}
    cfg.CONF.set_override("workers", 2, group="scheduler")
    assert len(set(first_picks(db))) > 1


def test_workers_of_one_daemon_prefer_their_own_share(db, spread):
    """With a worker partition, each worker's first pick among the near-best
    is one of its own hosts (node id modulo the worker count)."""
    spread(0.01)
    picks = {}
    for index in (0, 1):
        s = scheduler(db, seed=index)
        s.partition = (index, 2)
        nodes = {h.host: h.node_id for h in s.host_manager.host_states()}
        picks[index] = {s.select_destinations(s.parse_request(SPEC), dry_run=True)[0][0].host
                        for _ in range(60)}
        assert {nodes[h] % 2 for h in picks[index]} == {index}
        assert len(picks[index]) > 3
    assert not picks[0] & picks[1]


def test_a_worker_with_no_share_among_the_near_best_takes_any(db, spread):
    spread(0.01)             # the empty hosts only
    s = scheduler(db)
    s.partition = (999, 1000)    # no node id here is 999 modulo 1000
    picks = {s.select_destinations(s.parse_request(SPEC), dry_run=True)[0][0].host
             for _ in range(60)}
    assert len(picks) > 3 and all(h.startswith("e") for h in picks)


@pytest.mark.parametrize("value", [0.0, 0.1])
def test_two_schedulers_racing_place_every_instance_once(db, spread, value):
    """Two schedulers (two workers' caches) place 60 instances at once with real
    threads: every instance placed once, whatever the pick order. (How many
    claims met on one host is measured by the fault suite, not asserted here:
    about 16-21 conflicts without the spread, 9-12 with it, on this fleet.)"""
    spread(value)
    a, b = scheduler(db, seed=1), scheduler(db, seed=2)
    for s in (a, b):
        s.host_manager.refresh()
    counter = metrics.CLAIM_CONFLICTS.labels("generation")
    before = counter._value.get()
    barrier = threading.Barrier(2)

    def run(s):
        barrier.wait()
        for _ in range(30):
            s.select_destinations(s.parse_request(SPEC))
    threads = [threading.Thread(target=run, args=(s,)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counter._value.get() - before < 60          # conflicts, then placed
    used = sum(h.memory_mb_used for h in scheduler(db).host_manager.host_states())
    assert used == 60 * 512                           # every instance placed once
