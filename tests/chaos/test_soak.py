"""A soak at steady load (issue 17): 16 clients of mixed requests with releases
on a 200-host fleet, two workers, for ``BERTH_CHAOS_SOAK_S`` seconds (360 by
default), measured per window of a sixth of that. The fleet stays at a steady
fill (every client keeps a bounded number of instances), so latency and
throughput must not drift: the issue saw server p50 go from 34-38 ms to 62 ms
and throughput fall by a third over six minutes.
"""
from __future__ import annotations

import os
import time

import psutil
import sqlalchemy as sa

from db import models
from tests.chaos import conftest
from tests.chaos.load import Load, invariant_problems, latency_stats, reconcile, scrape, total

SOAK_S = float(os.environ.get("BERTH_CHAOS_SOAK_S", "360"))
WINDOWS = 6


def _rows(db) -> dict[str, int]:
    with db.reader_connection() as conn:
        def count(table) -> int:
            return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        return {"allocations": count(models.Consumer.__table__),
                "request_specs": count(models.RequestSpecRow.__table__),
                "pending": conn.execute(sa.select(sa.func.count()).select_from(
                    models.Consumer.__table__).where(
                        models.Consumer.pending == sa.true())).scalar_one()}


def test_soak_does_not_drift(deploy, fleet, report):
    dep = deploy(workers=2)
    port = dep.metrics_ports[0]
    api = dep.api(timeout=10)
    load = Load(api, fleet, threads=conftest.CLIENTS, seed=11)
    window = SOAK_S / WINDOWS
    windows = []
    load.start()
    started = time.monotonic()
    before = scrape(port)
    for i in range(WINDOWS):
        time.sleep(max(0.0, started + (i + 1) * window - time.monotonic()))
        now = scrape(port)
        ops = [o for o in load.ops if started + i * window <= o.t0 < started + (i + 1) * window]
        placed = total(now, "berth_instances_placed_total", dry_run="false") - \
            total(before, "berth_instances_placed_total", dry_run="false")
        conflicts = total(now, "berth_claim_conflicts_total") - \
            total(before, "berth_claim_conflicts_total")
        sel_n = total(now, "berth_request_duration_seconds_count",
                      method="select_destinations") - \
            total(before, "berth_request_duration_seconds_count", method="select_destinations")
        sel_s = total(now, "berth_request_duration_seconds_sum",
                      method="select_destinations") - \
            total(before, "berth_request_duration_seconds_sum", method="select_destinations")
        before = now
        windows.append({
            "window": i + 1,
            "calls_per_s": round(len(ops) / window, 1),
            "client_ms": latency_stats(ops),
            "server_select_mean_ms": round(sel_s / sel_n * 1000, 1) if sel_n else None,
            "conflicts_per_placement": round(conflicts / placed, 3) if placed else None,
            "worker_rss_mib": [round(psutil.Process(p).memory_info().rss / 2 ** 20)
                               for p in dep.worker_pids()],
            "rows": _rows(dep.db),
        })
    load.stop()
    load.release_the_uncertain()
    rec = reconcile(dep.db, load.ledger)
    invariants = invariant_problems(dep.db, fleet, load.ledger)
    dep.daemons[0].assert_consistent()
    result = {"experiment": f"soak {SOAK_S:.0f} s, 2 workers, {conftest.CLIENTS} clients",
              "outcomes": load.outcomes(), "windows": windows}
    report(result)
    assert not rec.problems() and not invariants, (rec.problems(), invariants)
    assert not conftest.fault_problems(dep, load), conftest.fault_problems(dep, load)
    first, last = windows[0], windows[-1]
    # No drift beyond noise: the last window within 1.5x (+20 ms) of the first.
    assert last["client_ms"]["p50"] <= 1.5 * first["client_ms"]["p50"] + 20, windows
    assert last["calls_per_s"] >= 0.7 * first["calls_per_s"], windows
    # Memory: the NUMA memos fill up to their bounds (one worker of this load
    # levelled off ~90 MiB above its start after ~15 minutes); a leak beyond
    # that shows in a longer soak (BERTH_CHAOS_SOAK_S=1800).
    rss_growth = max(b - a for a, b in zip(first["worker_rss_mib"], last["worker_rss_mib"],
                                           strict=False))
    assert rss_growth < 128, windows
