"""A scheduler process for the preemption concurrency test.

``python -m tests.functional.preempt_worker URL --mode green --threads 20 --requests 15``
places ``requests`` single-instance requests of priority 10 that allow preemption,
from green threads (eventlet, monkey-patched first) or plain threads, with its own
HostManager and FilterScheduler, and prints a JSON summary on stdout: each
placement with its host and its victims.
"""
from __future__ import annotations

import sys

if __name__ == "__main__" and "--mode" in sys.argv and \
        sys.argv[sys.argv.index("--mode") + 1] == "green":
    import eventlet

    eventlet.monkey_patch()

import argparse  # noqa: E402
import json  # noqa: E402

FLAVOR = {"vcpus": 2, "memory_mb": 2048, "root_gb": 10,
          "extra_specs": {"berth:priority": "10"}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--mode", choices=["green", "thread"], default="green")
    p.add_argument("--threads", type=int, default=20)
    p.add_argument("--requests", type=int, default=15)
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
    cfg.CONF.set_override("max_per_host_per_minute", 0, group="preemption")
    cfg.CONF.set_override("claim_retries", 3, group="scheduler")
    db = Database(args.url, max_pool_size=args.threads, max_overflow=10)
    sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
    out = {"placed": [], "no_valid_host": 0, "errors": []}

    def one(_):
        try:
            [[sel]] = sched.select_destinations(sched.parse_request({"flavor": FLAVOR}),
                                                allow_preemption=True)
            out["placed"].append({"instance_uuid": sel.instance_uuid, "host": sel.host,
                                  "victims": [dict(v) for v in sel.preempted]})
        except exception.NoValidHost as e:
            out["no_valid_host"] += 1
            out.setdefault("reasons", []).append(str(e))
        except Exception as e:  # reported, and the test fails on any
            out["errors"].append(f"{type(e).__name__}: {e}")

    if args.mode == "green":
        import eventlet

        pool = eventlet.GreenPool(args.threads)
        for job in range(args.requests):
            pool.spawn_n(one, job)
        pool.waitall()
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.threads) as ex:
            list(ex.map(one, range(args.requests)))
    db.dispose()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
