"""What keeping N workers' caches in step costs per placement, by counters and CPU time.

    python tools/bench/workers_refresh.py --size 10000 --workers 1,2,4 --placements 400

A generated fleet (``tools/bench/fleet.py``) is loaded into a throwaway MariaDB
database. For each worker count N, N schedulers (each with its own
``Database`` and ``HostManager``, as N worker processes have) place plain
one-instance requests in turn in this one process: the i-th placement is made
by scheduler i % N, which refreshes its cache first, so each placement's
scheduler finds the N - 1 placements the others made since its last one (one
client's requests spread over N workers). With ``--releases F`` a fraction F
of the placements is followed by the release of an earlier one, by a random
scheduler. Reported per placement: nodes re-read, journalled claims and
releases applied (``berth_cache_nodes_reloaded_total``,
``berth_cache_node_changes_applied_total``; 0 on a commit without the
journal), this process's CPU time for the whole placement and for the
refresh alone (``time.process_time``: no RPC, no broker; the database
server's CPU is not in it). Counters do not depend on the machine's load;
CPU times do a little (print ``uptime`` beside them).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

PLAIN = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}


def _counter(name: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name) or 0.0


def run(url: str, workers: int, placements: int, releases: float, seed: int) -> dict:
    from oslo_config import cfg

    from db.api import Database
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    conf = cfg.CONF
    scheds = [FilterScheduler(HostManager(Database(url), conf), conf) for _ in range(workers)]
    refresh_cpu = [0.0]
    for s in scheds:
        hm = s.host_manager
        hm.host_states()                    # the start-up load, not measured

        def timed(real=hm.refresh):
            t0 = time.process_time()
            try:
                real()
            finally:
                refresh_cpu[0] += time.process_time() - t0
        hm.refresh = timed
    rng = random.Random(seed)
    placed: list[str] = []

    def place(i: int) -> None:
        s = scheds[i % workers]
        placed.append(s.select_destinations(s.parse_request(PLAIN))[0][0].instance_uuid)
        if placed and rng.random() < releases:
            rng.choice(scheds).release(placed.pop(rng.randrange(len(placed))))

    for i in range(2 * workers):            # each cache sees the others once first
        place(i)
    reread0 = _counter("berth_cache_nodes_reloaded_total")
    applied0 = _counter("berth_cache_node_changes_applied_total")
    refresh_cpu[0] = 0.0
    t0 = time.process_time()
    for i in range(placements):
        place(i)
    cpu = time.process_time() - t0
    out = {"workers": workers, "placements": placements,
           "reread": (_counter("berth_cache_nodes_reloaded_total") - reread0) / placements,
           "applied": (_counter("berth_cache_node_changes_applied_total") - applied0)
           / placements,
           "cpu_ms": cpu * 1000 / placements, "refresh_cpu_ms": refresh_cpu[0] * 1000 / placements}
    for uuid in placed:
        scheds[0].release(uuid)
    for s in scheds:
        s.host_manager.close()
        s.host_manager.db.dispose()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="workers_refresh", description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--placements", type=int, default=400)
    p.add_argument("--releases", type=float, default=0.0,
                   help="fraction of placements followed by a release of an earlier one")
    args = p.parse_args(argv)

    from tools.bench import fleet as bench_fleet
    from tools.bench.run import configure

    configure()
    from db import node_changes

    node_changes.write(True)    # several caches on one database, as workers > 1
    t0 = time.perf_counter()
    fleet = bench_fleet.generate_fleet(args.size, args.seed)
    bdb = bench_fleet.create_database("mariadb")
    try:
        bench_fleet.load_fleet(bdb.db, fleet)
        del fleet
        bdb.db.dispose()
        print(f"fleet of {args.size:,} hosts loaded in {time.perf_counter() - t0:.0f} s",
              flush=True)
        print("workers  placements  re-read/placement  applied/placement  "
              "CPU ms/placement  refresh CPU ms/placement  load", flush=True)
        for n in (int(w) for w in args.workers.split(",")):
            r = run(bdb.url, n, args.placements, args.releases, args.seed)
            print(f"{n:>7}  {r['placements']:>10}  {r['reread']:>17.2f}  "
                  f"{r['applied']:>17.2f}  {r['cpu_ms']:>16.2f}  "
                  f"{r['refresh_cpu_ms']:>24.2f}  {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        bdb.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
