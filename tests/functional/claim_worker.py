"""A scheduler process for the concurrency tests.

``python -m tests.functional.claim_worker URL --mode green --threads 50 --requests 200``
places ``requests`` single-instance requests against the fleet in URL, from
green threads (eventlet, monkey-patched first) or plain threads, with its own
HostManager and FilterScheduler, and prints a JSON summary on stdout.
"""
from __future__ import annotations

import sys

if __name__ == "__main__" and "--mode" in sys.argv and \
        sys.argv[sys.argv.index("--mode") + 1] == "green":
    import eventlet

    eventlet.monkey_patch()

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402

FLAVORS = [
    {"vcpus": 1, "memory_mb": 1024, "root_gb": 10},
    {"vcpus": 2, "memory_mb": 2048, "root_gb": 20},
    {"vcpus": 4, "memory_mb": 4096, "root_gb": 40},
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--mode", choices=["green", "thread"], default="green")
    p.add_argument("--threads", type=int, default=50)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--subset", type=int, default=1)
    args = p.parse_args(argv)

    from oslo_config import cfg

    from db.api import Database
    from scheduler import exception
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    cfg.CONF([], project="berth")
    cfg.CONF.set_override("enabled_filters", ["ComputeFilter", "RamFilter", "CoreFilter",
                                              "DiskFilter"], group="filter_scheduler")
    cfg.CONF.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    cfg.CONF.set_override("host_subset_size", args.subset, group="filter_scheduler")
    db = Database(args.url, max_pool_size=args.threads, max_overflow=10)
    sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
    rng = random.Random(args.seed)
    jobs = [rng.choice(FLAVORS) for _ in range(args.requests)]
    out = {"placed": [], "no_valid_host": 0, "errors": []}

    def one(flavor):
        try:
            sels = sched.select_destinations(sched.parse_request({"flavor": flavor}))
            out["placed"].append(sels[0][0].instance_uuid)
        except exception.NoValidHost:
            out["no_valid_host"] += 1
        except Exception as e:  # reported, and the test fails on any
            out["errors"].append(f"{type(e).__name__}: {e}")

    if args.mode == "green":
        import eventlet

        pool = eventlet.GreenPool(args.threads)
        for job in jobs:
            pool.spawn_n(one, job)
        pool.waitall()
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.threads) as ex:
            list(ex.map(one, jobs))
    db.dispose()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
