"""One CPU-heavy request and cheap ones in green threads of one eventlet process,
as they share a berth-scheduler worker (run by ``test_slow_request.py`` in a
process of its own, since eventlet must patch the process before anything else).

``python -m tests.unit.hardening.slow_request DB_PATH MODE`` prints one JSON
object: how the slow request ended and after how long, how late a 5 ms ticker
green thread ran while it did (the longest stall of the worker), the latency of
pings and cheap dry-run requests made meanwhile, and the allocations and usage
left in the database. ``MODE``: ``place`` (every host passes the slow filter
after burning CPU: instances are claimed one after the other until the
deadline) or ``explain`` (the request fits nowhere; the slow filter comes first
in the configured order, so the NoValidHost explanation asks it of every host).
"""
from __future__ import annotations

import eventlet

eventlet.monkey_patch()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import oslo_messaging  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from oslo_config import cfg  # noqa: E402

from db import hosts as db_hosts  # noqa: E402
from db import migration, models  # noqa: E402
from db.api import Database  # noqa: E402
from scheduler import fleet as fleet_mod  # noqa: E402
from scheduler import rpc  # noqa: E402
from scheduler.filter_scheduler import FilterScheduler, load_filters  # noqa: E402
from scheduler.host_manager import HostManager  # noqa: E402
from scheduler.manager import SchedulerManager  # noqa: E402
from tests import ledger  # noqa: E402
from tests.slow_filter import SlowTestFilter  # noqa: E402

HOSTS = 3000
TIMEOUT = 1.0
TICK = 0.005
FLAVOR = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}


def _call(method, *args, **kwargs):
    """Call the endpoint as the dispatcher would; Berth's errors come back raised."""
    try:
        return method(rpc.new_context(roles=["service"]), *args, **kwargs)
    except oslo_messaging.ExpectedException as e:
        raise e.exc_info[1] from None


def main(path: str, mode: str) -> dict:
    conf = cfg.CONF
    conf([], project="berth")
    conf.set_override("request_timeout", TIMEOUT, group="scheduler")
    conf.set_override("weight_classes", ["RAMWeigher", "CPUWeigher"],
                      group="filter_scheduler")
    db = Database(f"sqlite:///{path}")
    migration.db_sync(db)
    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": [
        {"host": f"h{i:04d}", "vcpus": 32, "memory_mb": 65536, "local_gb": 1000}
        for i in range(HOSTS)]}))
    slow = SlowTestFilter(conf)
    vector = load_filters(["ComputeFilter", "RamFilter", "CoreFilter", "DiskFilter"], conf)
    filters = [slow, *vector] if mode == "explain" else [*vector, slow]
    scheduler = FilterScheduler(HostManager(db, conf), conf, filters=filters)
    scheduler.warm_up()
    manager = SchedulerManager(db, scheduler, conf, backend="eventlet")
    if mode == "explain":
        heavy = {"flavor": dict(FLAVOR, memory_mb=10 ** 6,
                                extra_specs={"test:burn_us": "2000"})}
    else:
        heavy = {"flavor": dict(FLAVOR, extra_specs={"test:burn_us": "100"}),
                 "num_instances": 10}
    out: dict = {"mode": mode, "hosts": HOSTS, "timeout": TIMEOUT}
    done = eventlet.event.Event()

    def slow_request():
        started = time.perf_counter()
        try:
            _call(manager.select_destinations, heavy)
            out["slow"] = {"error": None}
        except Exception as e:
            out["slow"] = {"error": type(e).__name__,
                           "instance_index": getattr(e, "kwargs", {}).get("instance_index")}
        out["slow"]["elapsed"] = time.perf_counter() - started
        done.send()

    def ticker():
        late = 0.0
        while not done.ready():
            t = time.perf_counter()
            eventlet.sleep(TICK)
            late = max(late, time.perf_counter() - t - TICK)
        out["max_tick_late"] = late

    def cheap_requests():
        pings, selects = [], []
        eventlet.sleep(0.1)
        while not done.ready():
            t = time.perf_counter()
            _call(manager.ping)
            pings.append(time.perf_counter() - t)
            t = time.perf_counter()
            placed = _call(manager.select_destinations, {"flavor": FLAVOR}, dry_run=True)
            selects.append(time.perf_counter() - t)
            assert placed[0][0]["host"]
            eventlet.sleep(0.05)
        out["pings"] = len(pings)
        out["max_ping"] = max(pings, default=None)
        out["cheap_selects"] = len(selects)
        out["max_cheap_select"] = max(selects, default=None)

    threads = [eventlet.spawn(f) for f in (ticker, cheap_requests, slow_request)]
    for t in threads:
        t.wait()
    with db.reader_connection() as conn:
        out["allocations"] = conn.execute(sa.select(sa.func.count()).select_from(
            models.Consumer.__table__)).scalar_one()
        out["vcpus_used"] = ledger.total_used(db)
        out["request_specs"] = conn.execute(sa.select(sa.func.count()).select_from(
            models.RequestSpecRow.__table__)).scalar_one()
    cached = sum(h.vcpus_used for h in scheduler.host_manager.host_states())
    out["cached_vcpus_used"] = cached
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
