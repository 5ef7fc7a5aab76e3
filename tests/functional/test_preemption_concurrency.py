"""High-priority requests from several processes (each with green threads) compete
for the same victims on one MariaDB fleet filled with preemptible instances.

Whatever the interleaving: every victim is preempted once, by the placement that
names it and on that placement's host; each placement preempts exactly what it
needs (two 1-vCPU instances for 2 vCPUs on a full fleet); nothing is
over-committed and usage equals the sum of the allocations that still count.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

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
from tests import services

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS, VCPUS = 10, 8


@pytest.fixture
def full_fleet():
    """Ten 8-vCPU hosts, each full of eight 1-vCPU preemptible instances."""
    name, url = services.create_mariadb_database()
    db = Database(url)
    try:
        migration.db_sync(db)
        hosts = [{"host": f"c{i:02d}", "vcpus": VCPUS, "memory_mb": 16384,
                  "local_gb": 200, "cpu_allocation_ratio": 1.0} for i in range(HOSTS)]
        db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": hosts}))
        cfg.CONF([], project="berth")
        cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter",
                                                  "CoreFilter"], group="filter_scheduler")
        cfg.CONF.set_override("weight_classes", [], group="filter_scheduler")
        try:
            sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
            low = sched.parse_request({"num_instances": HOSTS * VCPUS, "flavor": {
                "vcpus": 1, "memory_mb": 512, "root_gb": 1,
                "extra_specs": {"berth:preemptible": "true"}}})
            sched.select_destinations(low)
        finally:
            cfg.CONF.clear_override("enabled_filters", group="filter_scheduler")
            cfg.CONF.clear_override("weight_classes", group="filter_scheduler")
        yield db, url
    finally:
        db.dispose()
        services.drop_mariadb_database(name)


def _run(url: str, procs: int, threads: int, requests: int) -> list[dict]:
    cmds = [[sys.executable, "-m", "tests.functional.preempt_worker", url, "--mode",
             "green", "--threads", str(threads), "--requests", str(requests)]
            for _ in range(procs)]
    running = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for c in cmds]
    results = []
    for p in running:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_concurrent_preemptions_take_each_victim_once(full_fleet):
    db, url = full_fleet
    procs, threads, requests = 3, 10, 16       # 48 requests; room for 40
    results = _run(url, procs, threads, requests)
    assert [e for r in results for e in r["errors"]] == []
    placed = [p for r in results for p in r["placed"]]
    refused = sum(r["no_valid_host"] for r in results)
    assert len(placed) + refused == procs * requests
    reasons = collections.Counter(r for res in results for r in res.get("reasons", ()))
    assert len(placed) == HOSTS * VCPUS // 2, reasons.most_common(5)  # every vCPU, no more
    victims = [v["instance_uuid"] for p in placed for v in p["victims"]]
    assert len(victims) == len(set(victims)), "a victim was preempted twice"
    assert all(len(p["victims"]) == 2 for p in placed), \
        collections.Counter(len(p["victims"]) for p in placed)
    assert all(v["host"] == p["host"] for p in placed for v in p["victims"])
    assert simulate.check_invariants(db) == []
    c = models.Consumer.__table__
    with db.reader_connection() as conn:
        rows = conn.execute(sa.select(c.c.uuid, c.c.consumer_type, c.c.preempted_by)).all()
    preempted = {u: by for u, kind, by in rows if kind == "preempted"}
    assert preempted == {v["instance_uuid"]: p["instance_uuid"]
                         for p in placed for v in p["victims"]}
    per_host = collections.Counter(p["host"] for p in placed)
    assert set(per_host.values()) == {VCPUS // 2}
