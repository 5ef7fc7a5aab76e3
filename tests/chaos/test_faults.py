"""Faults under load (issue 17): the database stopped, the broker stopped or
restarted, a worker killed, the daemon stopped, all while 16 clients send mixed
requests with releases to a 200-host fleet.

Each experiment ends the same way: the releases that got no answer are sent
again (release is idempotent), then the clients' knowledge is reconciled with
the database (nothing held missing, nothing released present, every orphan one
of the uncertain calls and pending), the reaper is given ``claim_ttl`` to give
the orphans back (none may be left), and the realistic benchmark's SQL checks
run (no over-commit, usage = sum of allocations, pinning, pages, groups, PCI).
"""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from tests.chaos import conftest, faults
from tests.chaos.load import (
    ANSWERED,
    Load,
    invariant_problems,
    latency_stats,
    reconcile,
    scrape,
    total,
)

WARM, HOLD, AFTER = 10.0, 15.0, 20.0


def wait_for_reaper(dep, ledger, timeout: float):
    """The reconciliation once the orphans are gone, or at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        rec = reconcile(dep.db, ledger)
        if not (rec.orphans_pending or rec.orphans_confirmed) or \
                time.monotonic() > deadline:
            return rec
        time.sleep(1)


def log_lines(dep, *needles: str) -> dict[str, int]:
    text = "".join(d.log.read_text(errors="replace") for d in dep.daemons)
    return {n: text.count(n) for n in needles}


def run_experiment(name: str, dep, fleet, report, inject: Callable[[], dict],
                   heal: Callable[[], dict], *, hold: float = HOLD, seed: int = 1) -> dict:
    api = dep.api(timeout=10)
    load = Load(api, fleet, threads=conftest.CLIENTS, seed=seed)
    scraped0 = [scrape(p) for p in dep.metrics_ports]
    load.start()
    try:
        time.sleep(WARM)
        t_fault = time.monotonic()
        info = inject() or {}
        time.sleep(max(0.0, hold - (time.monotonic() - t_fault)))
        t_heal = time.monotonic()
        info.update(heal() or {})
        t_back = time.monotonic()
        time.sleep(AFTER)
    finally:
        load.stop()
    t_end = time.monotonic()
    for d in dep.daemons:
        assert d.proc.poll() is None, f"{name}: a daemon exited:\n{d.log_tail()}"
    resent = load.release_the_uncertain()
    before = reconcile(dep.db, load.ledger)
    after = wait_for_reaper(dep, load.ledger, conftest.CLAIM_TTL + 30)
    invariants = invariant_problems(dep.db, fleet, load.ledger)
    for d in dep.daemons:
        d.assert_consistent()
    scraped = [scrape(p) for p in dep.metrics_ports]

    def delta(metric: str, **labels) -> float:
        return sum(total(s, metric, **labels) - total(s0, metric, **labels)
                   for s, s0 in zip(scraped, scraped0, strict=True))

    placed = delta("berth_instances_placed_total", dry_run="false")
    ops = load.ops
    result = {
        "experiment": name,
        "fault": info,
        "calls": len(ops),
        "outcomes_before_fault": load.outcomes(until=t_fault),
        "outcomes_during_fault": load.outcomes(t_fault, t_back),
        "outcomes_after_fault": load.outcomes(t_back, t_end),
        "latency_ms_before": latency_stats([o for o in ops if o.t1 < t_fault]),
        "latency_ms_after": latency_stats([o for o in ops if o.t0 >= t_back + 5]),
        # how long a caller waited for its error while the fault lasted
        "latency_ms_failed_during_fault": latency_stats(
            [o for o in ops if t_fault <= o.t0 < t_back and o.outcome not in ANSWERED]),
        "fault_s": round(t_heal - t_fault, 1),
        "recovery_s": _round(load.first_answer_after(t_back)),
        "releases_resent": resent,
        "uncertain_calls": len(load.ledger.uncertain),
        "orphans_before_reaper": len(before.orphans_pending) + len(before.orphans_confirmed),
        "orphans_after_reaper": len(after.orphans_pending) + len(after.orphans_confirmed),
        "reaped": delta("berth_claims_reaped_total"),
        "placed": placed,
        "claim_conflicts": delta("berth_claim_conflicts_total"),
        "conflicts_per_placement": round(delta("berth_claim_conflicts_total")
                                         / placed, 4) if placed else None,
        "log": log_lines(dep, "Traceback", " ERROR ", " WARNING "),
    }
    report(result)
    problems = before.problems() + after.problems() + invariants + \
        conftest.fault_problems(dep, load)
    assert not problems, f"{name}: {problems}\n{result}"
    assert not after.orphans_pending and not after.orphans_confirmed, result
    assert result["recovery_s"] is not None, result
    return result


def _round(v):
    return None if v is None else round(v, 2)


@pytest.mark.parametrize("workers", [1, 2])
def test_database_stopped(deploy, fleet, report, workers):
    dep = deploy(workers=workers)
    result = run_experiment(
        f"database stopped {HOLD:.0f} s, {workers} worker(s)", dep, fleet, report,
        lambda: {"stop_s": round(faults.stop_mariadb(), 1)},
        lambda: {"start_s": round(faults.start_mariadb(), 1)})
    during = result["outcomes_during_fault"]
    # callers got Berth's typed, retryable error, not a RemoteError(DBConnectionError)
    assert not any("RemoteError" in k or "InternalError" in k for k in during), during
    assert any("ServiceUnavailable" in k for k in during), during


def test_database_stopped_two_daemons(deploy, fleet, report):
    dep = deploy(workers=1, daemons=2)
    run_experiment(f"database stopped {HOLD:.0f} s, two daemons on one topic", dep, fleet,
                   report,
                   lambda: {"stop_s": round(faults.stop_mariadb(), 1)},
                   lambda: {"start_s": round(faults.start_mariadb(), 1)}, seed=2)


def test_broker_stopped(deploy, fleet, report):
    dep = deploy(workers=2)
    run_experiment(f"broker stopped {HOLD:.0f} s, 2 workers", dep, fleet, report,
                   lambda: {"stop_s": round(faults.stop_rabbitmq_app(), 1)},
                   lambda: {"start_s": round(faults.start_rabbitmq_app(), 1)}, seed=3)


def test_broker_restarted(deploy, fleet, report):
    dep = deploy(workers=2)
    run_experiment("broker node restarted, 2 workers", dep, fleet, report,
                   lambda: {"restart_s": round(faults.restart_rabbitmq(), 1)},
                   lambda: {}, hold=0.0, seed=4)


def test_worker_killed(deploy, fleet, report):
    dep = deploy(workers=2)
    killed = []

    def kill() -> dict:
        pid = dep.worker_pids()[0]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        return {"killed_pid": pid}

    def replaced() -> dict:
        started = time.monotonic()
        while set(dep.worker_pids()) & set(killed) or len(dep.worker_pids()) < 2:
            time.sleep(0.1)
            assert time.monotonic() - started < 60, "the worker was not replaced"
        return {"replaced_after_s": round(time.monotonic() - started, 1)}

    run_experiment("one of 2 workers SIGKILLed", dep, fleet, report, kill, replaced,
                   hold=0.0, seed=5)


def test_daemon_stopped_and_started(deploy, fleet, report):
    dep = deploy(workers=2)
    d = dep.daemons[0]
    run_experiment("daemon SIGTERM, started again 15 s later, 2 workers", dep, fleet,
                   report,
                   lambda: {"exit_status": d.stop(timeout=60)},
                   lambda: (d.start(timeout=120), {})[1], seed=6)
