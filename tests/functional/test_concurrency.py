"""Real concurrency against one MariaDB fleet: green threads, then processes.

The fleet holds only some of the requests. Whatever the interleaving: no node
exceeds (total - reserved) x ratio, usage equals the sum of allocations, every
request gets a host or a NoValidHost, and every reported placement has exactly
one allocation row.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import simulate
from tests import services

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def fleet_db():
    name, url = services.create_mariadb_database()
    db = Database(url)
    try:
        migration.db_sync(db)
        hosts = [{"host": f"c{i:02d}", "vcpus": 8, "memory_mb": 16384, "local_gb": 200,
                  "cpu_allocation_ratio": 1.0, "reserved_host_memory_mb": 512}
                 for i in range(10)]
        db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))
        yield db, url
    finally:
        db.dispose()
        services.drop_mariadb_database(name)


def _run_workers(url: str, mode: str, procs: int, threads: int, requests: int,
                 subset: int = 1) -> list[dict]:
    cmds = [[sys.executable, "-m", "tests.functional.claim_worker", url, "--mode", mode,
             "--threads", str(threads), "--requests", str(requests), "--seed", str(i),
             "--subset", str(subset)] for i in range(procs)]
    running = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for c in cmds]
    results = []
    for p in running:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _assert_consistent(db: Database, results: list[dict], total_requests: int) -> None:
    placed = [u for r in results for u in r["placed"]]
    nvh = sum(r["no_valid_host"] for r in results)
    errors = [e for r in results for e in r["errors"]]
    assert errors == []
    assert len(placed) + nvh == total_requests
    assert len(set(placed)) == len(placed)
    assert simulate.check_invariants(db) == []
    with db.reader_connection() as conn:
        rows = set(conn.execute(sa.select(models.Consumer.uuid)).scalars())
    assert rows == set(placed)
    # The fleet cannot hold everything: some requests must have been refused.
    assert nvh > 0 and placed


def test_green_threads_never_overcommit(fleet_db):
    db, url = fleet_db
    results = _run_workers(url, "green", procs=1, threads=50, requests=200)
    _assert_consistent(db, results, 200)


def test_processes_never_overcommit(fleet_db):
    db, url = fleet_db
    results = _run_workers(url, "green", procs=4, threads=10, requests=50)
    _assert_consistent(db, results, 200)


def test_processes_with_threads_and_subset(fleet_db):
    db, url = fleet_db
    results = _run_workers(url, "thread", procs=4, threads=8, requests=60, subset=3)
    _assert_consistent(db, results, 240)


def test_first_members_of_a_new_group_at_once(fleet_db):
    """Claims that are the first to use a server group lock it by creating its
    row. Several at once on MariaDB can deadlock on that insert; the claim must
    then be retried as a whole (it was an InternalError: the savepoint around
    the insert was gone with the transaction InnoDB rolled back)."""
    import threading
    import uuid as uuidlib

    from db import claims
    from db.api import retry_on_deadlock

    db, _ = fleet_db
    failures: list[BaseException] = []
    for _ in range(5):
        group = str(uuidlib.uuid4())
        barrier = threading.Barrier(6)

        @retry_on_deadlock
        def first_use(group=group):
            with db.writer_connection() as conn:
                claims._lock_group(conn, group)

        def member(barrier=barrier, first_use=first_use):
            barrier.wait()
            try:
                first_use()
            except BaseException as e:      # noqa: BLE001 - reported below
                failures.append(e)

        threads = [threading.Thread(target=member) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failures == []
        with db.reader_connection() as conn:
            generation = conn.execute(sa.select(models.ServerGroup.generation).where(
                models.ServerGroup.uuid == group)).scalar_one()
        assert generation == 5          # created once, then locked by the five others
