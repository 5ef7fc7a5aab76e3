"""Read-your-writes on a 3-node MariaDB Galera cluster on loopback (``tox -e chaos``;
it leaves the shared MariaDB alone).

A scheduler per node (each its own Database, host cache and claims): a claim
committed through one node is confirmed through a second and released through
the third at once, while other threads claim and release through the first.
Every read that decides those answers waits for the cluster's earlier writes
(``[database] wsrep_sync_wait``), so none answers "unknown" or "held nothing"
for what another node just wrote. The same loop with the setting off is run to
show what it prevents (its misses are printed, not asserted: they depend on
timing). At the end every node holds the same consumers and the invariants hold
on each.
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import simulate
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from tests.galera import GaleraCluster

FLEET = {"hosts": [{"host": f"g{i}", "vcpus": 64, "memory_mb": 131072, "local_gb": 4000,
                    "cpu_allocation_ratio": 1.0} for i in range(8)]}
ONE = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}, "project_id": "p1"}
ROUNDS = 60


@pytest.fixture(scope="module")
def cluster():
    # not under pytest's private temp directory: the nodes run as mysql
    base = tempfile.mkdtemp(prefix="berth-galera-")
    c = GaleraCluster(base, 3)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def schedulers(cluster):
    import uuid

    name = "berth_galera_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(cluster.nodes[0].url + "/")
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    dbs = [Database(f"{n.url}/{name}?charset=utf8mb4") for n in cluster.nodes]
    migration.db_sync(dbs[0])
    db_hosts.import_fleet(dbs[0], fleet_mod.load_fleet(FLEET))
    conf = cfg.CONF
    conf([], project="berth")
    try:
        yield [FilterScheduler(HostManager(db, conf), conf) for db in dbs]
    finally:
        for db in dbs:
            db.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def _place(sched, pending=True):
    return sched.select_destinations(sched.parse_request(ONE), None, pending=pending)[0][0]


def _consumers(db) -> set[str]:
    c = models.Consumer.__table__
    with db.causal_reader() as conn:
        return set(conn.execute(sa.select(c.c.uuid)).scalars())


def _rounds(a, b, c, n: int) -> dict:
    """Claim on a, confirm on b, release on c, release again on a; what each
    answered wrong and how long the confirms took."""
    wrong = {"confirm unknown": 0, "release held nothing": 0, "re-release": 0}
    took = []
    for _ in range(n):
        vm = _place(a).instance_uuid
        started = time.perf_counter()
        confirmed, unknown = b.confirm([vm])
        took.append((time.perf_counter() - started) * 1000)
        wrong["confirm unknown"] += bool(unknown)
        if unknown:                 # what the client does: give it back
            a.release(vm)
            continue
        wrong["release held nothing"] += not c.release(vm)
        wrong["re-release"] += not a.release(vm)
    return {"wrong": wrong, "confirm_ms_p50": round(statistics.median(took), 2),
            "confirm_ms_p99": round(sorted(took)[int(len(took) * 0.99) - 1], 2)}


def _noise(sched, stop: threading.Event) -> None:
    """Claims and releases through one node while the rounds run."""
    while not stop.is_set():
        sched.release(_place(sched, pending=False).instance_uuid)


@pytest.mark.parametrize("sync_wait", [0, 1])
def test_answers_read_the_other_nodes_writes(schedulers, sync_wait, capsys):
    a, b, c = schedulers
    for s in schedulers:
        s.db.sync_wait = sync_wait
        s.db.dispose()          # new connections with the setting
    stop = threading.Event()
    noise = [threading.Thread(target=_noise, args=(a, stop)) for _ in range(2)]
    for t in noise:
        t.start()
    try:
        result = _rounds(a, b, c, ROUNDS)
    finally:
        stop.set()
        for t in noise:
            t.join()
    with capsys.disabled():
        print(f"\nGalera, wsrep_sync_wait={sync_wait}, {ROUNDS} rounds: {result}")
    if sync_wait:
        assert result["wrong"] == {"confirm unknown": 0, "release held nothing": 0,
                                   "re-release": 0}, result
    held = [_consumers(s.db) for s in schedulers]
    assert held[0] == held[1] == held[2] == set()
    for s in schedulers:
        with s.db.causal_reader() as conn:
            assert simulate.check_invariants(s.db, conn=conn) == []
