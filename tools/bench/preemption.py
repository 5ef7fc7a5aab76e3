"""Preemption benchmark: a full fleet, 30 % of its instances preemptible, and
high-priority requests that can only be placed by preempting.

``python -m tools.bench.preemption --hosts 1000 --backend mariadb``

1. Seeded fleet of three host shapes, filled until no flavor fits anywhere (the
   smallest flavor last), 30 % of the instances ``berth:preemptible`` at
   priority 0 or -1; rows bulk-inserted, then checked (``db.invariants``).
2. Sequential: ``--sequential`` requests of priority 10 that allow preemption;
   before each, a brute force over every host's subsets of eligible instances
   gives the fewest victims any host needs, compared with what the placement
   preempted.
3. Burst: ``--procs`` processes x ``--threads`` green threads place
   ``--burst`` requests in all; every victim must be named once, and the
   ledger's invariants hold after.

``--ask-vcpus N`` asks N vCPUs and 4 GiB per vCPU instead of 4 (above 8, no
single instance of a full host holds enough: most placements need several
victims).

Prints one JSON document (timings in ms: p50, p95, max per phase).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid as uuidlib

SHAPES = [  # vcpus, memory_mb
    (32, 131072), (64, 262144), (96, 393216)]
FLAVORS = [(8, 32768), (4, 16384), (2, 8192), (1, 4096)]   # largest first; 1 vCPU last
ASK = (4, 16384)


def build(db, hosts: int, seed: int, preemptible_share: float = 0.3) -> dict:
    """Import ``hosts`` hosts and fill them; returns counts."""
    import sqlalchemy as sa

    from db import hosts as db_hosts
    from db import models
    from scheduler import fleet as fleet_mod

    rng = random.Random(seed)
    shapes = [rng.choice(SHAPES) for _ in range(hosts)]
    doc = {"hosts": [{"host": f"c{i:06d}", "vcpus": v, "memory_mb": m, "local_gb": 4000,
                      "cpu_allocation_ratio": 1.0, "ram_allocation_ratio": 1.0,
                      "disk_allocation_ratio": 1.0}
                     for i, (v, m) in enumerate(shapes)]}
    t0 = time.perf_counter()
    db_hosts.import_fleet(db, fleet_mod.load_fleet(doc))
    imported = time.perf_counter() - t0
    cn, rp = models.ComputeNode.__table__, models.ResourceProvider.__table__
    inv, cons = models.ProviderInventory.__table__, models.Consumer.__table__
    alloc = models.Allocation.__table__
    with db.reader_connection() as conn:
        nodes = conn.execute(sa.select(cn.c.id, cn.c.host)).all()
        roots = dict(conn.execute(sa.select(rp.c.compute_node_id, rp.c.id)
                                  .where(rp.c.parent_id.is_(None))).all())
    shape_of = {f"c{i:06d}": s for i, s in enumerate(shapes)}
    consumers, amounts = [], []
    now = models.utcnow()
    n = 0
    for node_id, host in nodes:
        vcpus, memory = shape_of[host]
        free_v, free_m = vcpus, memory
        for fv, fm in FLAVORS:
            while free_v >= fv and free_m >= fm and (fv == 1 or rng.random() < 0.6):
                free_v -= fv
                free_m -= fm
                n += 1
                preemptible = rng.random() < preemptible_share
                consumers.append({
                    "id": n, "uuid": str(uuidlib.UUID(int=rng.getrandbits(128))),
                    "consumer_type": "instance", "compute_node_id": node_id,
                    "project_id": "bench", "user_id": "bench", "pending": False,
                    "priority": rng.choice([0, -1]) if preemptible else 0,
                    "preemptible": preemptible,
                    "created_at": now - datetime.timedelta(seconds=rng.randrange(10 ** 6))})
                consumers[-1]["instance_uuid"] = consumers[-1]["uuid"]
                for rc, amount in (("VCPU", fv), ("MEMORY_MB", fm), ("DISK_GB", 10)):
                    amounts.append({"consumer_id": n, "provider_id": roots[node_id],
                                    "resource_class": rc, "amount": amount})
    t1 = time.perf_counter()
    with db.writer_connection() as conn:
        for i in range(0, len(consumers), 5000):
            conn.execute(cons.insert(), consumers[i:i + 5000])
        for i in range(0, len(amounts), 15000):
            conn.execute(alloc.insert(), amounts[i:i + 15000])
        counts = collections.Counter(c["compute_node_id"] for c in consumers)
        sums = collections.defaultdict(int)
        for a in amounts:
            sums[(a["provider_id"], a["resource_class"])] += a["amount"]
        stmt = (sa.update(inv).where(inv.c.provider_id == sa.bindparam("p"),
                                     inv.c.resource_class == sa.bindparam("rc"))
                .values(used=sa.bindparam("u")))
        conn.execute(stmt, [{"p": p, "rc": rc, "u": u} for (p, rc), u in sums.items()])
        conn.execute(sa.update(cn).where(cn.c.id == sa.bindparam("i"))
                     .values(running_vms=sa.bindparam("r"), generation=cn.c.generation + 1),
                     [{"i": node_id, "r": counts.get(node_id, 0)} for node_id, _ in nodes])
    return {"hosts": hosts, "instances": len(consumers),
            "preemptible": sum(c["preemptible"] for c in consumers),
            "import_s": round(imported, 1), "fill_s": round(time.perf_counter() - t1, 1)}


def eligible_by_node(db, priority: int) -> dict:
    """node id -> [(uuid, vcpus, memory_mb)] of the instances ``priority`` may preempt,
    and node id -> (free vcpus, free memory), from the database."""
    import sqlalchemy as sa

    from db import models

    cons, alloc = models.Consumer.__table__, models.Allocation.__table__
    inv, rp = models.ProviderInventory.__table__, models.ResourceProvider.__table__
    out: dict[int, list] = collections.defaultdict(list)
    held: dict[tuple, dict] = collections.defaultdict(dict)
    free: dict[int, dict] = collections.defaultdict(dict)
    with db.reader_connection() as conn:
        for uuid, node, rc, amount in conn.execute(
                sa.select(cons.c.uuid, cons.c.compute_node_id, alloc.c.resource_class,
                          alloc.c.amount).join(alloc, alloc.c.consumer_id == cons.c.id)
                .where(cons.c.consumer_type == "instance", cons.c.preemptible == sa.true(),
                       cons.c.priority < priority)):
            held[(node, uuid)][rc] = amount
        for node, rc, total, reserved, ratio, used in conn.execute(
                sa.select(rp.c.compute_node_id, inv.c.resource_class, inv.c.total,
                          inv.c.reserved, inv.c.allocation_ratio, inv.c.used)
                .join(rp, rp.c.id == inv.c.provider_id)):
            free[node][rc] = (total - reserved) * ratio - used
    for (node, uuid), amounts in held.items():
        out[node].append((uuid, amounts.get("VCPU", 0), amounts.get("MEMORY_MB", 0)))
    return out, free


def brute_force_minimum(eligible, free, ask, limit: int = 4) -> int | None:
    """The fewest victims any host needs for ``ask`` (None: none within ``limit``)."""
    if any(f.get("VCPU", 0) >= ask[0] and f.get("MEMORY_MB", 0) >= ask[1]
           for f in free.values()):
        return 0
    best = None
    for node, victims in eligible.items():
        fv, fm = free[node].get("VCPU", 0), free[node].get("MEMORY_MB", 0)
        top = best - 1 if best is not None else limit
        for k in range(1, top + 1):
            if any(fv + sum(v[1] for v in c) >= ask[0] and fm + sum(v[2] for v in c) >= ask[1]
                   for c in itertools.combinations(victims, k)):
                best = k
                break
        if best == 1:
            return 1
    return best


def _percentiles(ms: list[float]) -> dict:
    if not ms:
        return {}
    ms = sorted(ms)
    return {"n": len(ms), "p50": round(statistics.median(ms), 1),
            "p95": round(ms[min(len(ms) - 1, int(len(ms) * 0.95))], 1),
            "max": round(ms[-1], 1)}


def scheduler_for(url: str):
    from oslo_config import cfg

    from db.api import Database
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    cfg.CONF([], project="berth")
    cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                              "DiskFilter"], group="filter_scheduler")
    cfg.CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    cfg.CONF.set_override("max_per_host_per_minute", 0, group="preemption")
    cfg.CONF.set_override("claim_retries", 3, group="scheduler")
    db = Database(url, max_pool_size=40, max_overflow=10)
    sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
    sched.host_manager.refresh()
    return db, sched


def _request(sched):
    return sched.parse_request({"flavor": {
        "vcpus": ASK[0], "memory_mb": ASK[1], "root_gb": 10,
        "extra_specs": {"berth:priority": "10"}}})


def sequential(url: str, count: int, check: bool) -> dict:
    from scheduler import exception

    db, sched = scheduler_for(url)
    times, victims, mismatches = [], [], []
    for _ in range(count):
        minimum = None
        if check:
            minimum = brute_force_minimum(*eligible_by_node(db, 10), ASK)
        t = time.perf_counter()
        try:
            [[sel]] = sched.select_destinations(_request(sched), allow_preemption=True)
        except exception.NoValidHost:
            if minimum is not None:
                mismatches.append({"expected": minimum, "got": None})
            continue
        times.append((time.perf_counter() - t) * 1000)
        victims.append(len(sel.preempted))
        if check and minimum != len(sel.preempted):
            mismatches.append({"expected": minimum, "got": len(sel.preempted)})
    db.dispose()
    return {"placed": len(times), "latency_ms": _percentiles(times),
            "preempting_latency_ms": _percentiles([t for t, k in zip(times, victims,
                                                                      strict=True) if k]),
            "victims_per_placement": dict(collections.Counter(victims)),
            "brute_force_mismatches": mismatches}


def worker(url: str, threads: int, requests: int) -> None:
    """One process of the burst (green threads); prints its placements as JSON."""
    import eventlet

    from scheduler import exception

    db, sched = scheduler_for(url)
    out = {"placed": [], "refused": 0, "errors": [], "ms": []}

    def one(_):
        t = time.perf_counter()
        try:
            [[sel]] = sched.select_destinations(_request(sched), allow_preemption=True)
            out["ms"].append((time.perf_counter() - t) * 1000)
            out["placed"].append({"host": sel.host, "victims": [
                v["instance_uuid"] for v in sel.preempted]})
        except exception.NoValidHost:
            out["refused"] += 1
        except Exception as e:  # noqa: BLE001 - reported
            out["errors"].append(f"{type(e).__name__}: {e}")

    pool = eventlet.GreenPool(threads)
    for i in range(requests):
        pool.spawn_n(one, i)
    pool.waitall()
    db.dispose()
    print(json.dumps(out))


def burst(url: str, procs: int, threads: int, total: int) -> dict:
    per = total // procs
    t = time.perf_counter()
    running = [subprocess.Popen([sys.executable, "-m", "tools.bench.preemption", "--worker",
                                 url, "--threads", str(threads), "--burst", str(per),
                                 "--ask-vcpus", str(ASK[0])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                                    os.path.abspath(__file__)))))
               for _ in range(procs)]
    results = []
    for p in running:
        out, err = p.communicate(timeout=1800)
        if p.returncode:
            raise RuntimeError(err[-2000:])
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - t
    placed = [p for r in results for p in r["placed"]]
    victims = [v for p in placed for v in p["victims"]]
    return {"requests": per * procs, "placed": len(placed),
            "refused": sum(r["refused"] for r in results),
            "errors": [e for r in results for e in r["errors"]][:5],
            "victims_per_placement": dict(collections.Counter(len(p["victims"])
                                                              for p in placed)),
            "victims_chosen_twice": len(victims) - len(set(victims)),
            "latency_ms": _percentiles([m for r in results for m in r["ms"]]),
            "wall_s": round(wall, 1)}


def main(argv=None) -> int:
    global ASK
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--backend", choices=["sqlite", "mariadb"], default="mariadb")
    p.add_argument("--seed", type=int, default=29)
    p.add_argument("--sequential", type=int, default=30)
    p.add_argument("--no-check", action="store_true",
                   help="skip the brute-force comparison (large fleets)")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--burst", type=int, default=200)
    p.add_argument("--ask-vcpus", type=int, default=4,
                   help="vCPUs each request asks (and 4 GiB per vCPU)")
    p.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    ASK = (args.ask_vcpus, args.ask_vcpus * 4096)
    if args.worker:
        import eventlet

        eventlet.monkey_patch()
        worker(args.worker, args.threads, args.burst)
        return 0
    from db import invariants
    from tools.bench import fleet as bench_fleet

    target = bench_fleet.create_database(args.backend)
    try:
        report = {"fleet": build(target.db, args.hosts, args.seed)}
        with target.db.reader_connection() as conn:
            assert invariants.check(conn) == [], "fleet breaks the invariants"
        report["sequential"] = sequential(target.url, args.sequential, not args.no_check)
        if args.burst:
            report["burst"] = burst(target.url, args.procs, args.threads, args.burst)
        with target.db.reader_connection() as conn:
            report["invariant_failures"] = invariants.check(conn)[:5]
        print(json.dumps(report, indent=2))
        return 1 if report["invariant_failures"] or report["sequential"][
            "brute_force_mismatches"] or report.get("burst", {}).get(
            "victims_chosen_twice") else 0
    finally:
        target.drop()


if __name__ == "__main__":
    sys.exit(main())
