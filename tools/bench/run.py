"""Berth benchmark: ``tox -e bench [-- --quick | --sizes ... | --e2e | --profile]``.

Two tables, the realistic one first.

Realistic (issue 10, ``tools/bench/realistic.py``): per fleet size a seeded
heterogeneous fleet with usage already on it (``fleet.py``) and a seeded mixed
trace (``trace.py``), replayed cold in a fresh process on each backend with every
call timed and every claim written (``replay.py``); p50/p99/max/mean overall and
per request kind; the database checked for violations after each run
(``check.py``); a 16-thread burst on one hard anti-affinity and one hard affinity
group; with ``--e2e`` the same trace through the daemon over RabbitMQ. Exits 1 on
any violation or scheduler error.

Steady state (issue 7): identical requests repeated (the first call is a warm-up
and dropped, claims released between calls), so remembered answers serve most
timed calls: the host-state refresh after 10 changed hosts, the start-up load and,
with ``--e2e``, the daemon at 1 and 16 clients and its peak RSS.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import gc
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
import warnings
from collections.abc import Callable, Iterator

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

import sqlalchemy as sa  # noqa: E402
from oslo_config import cfg  # noqa: E402

from db import models  # noqa: E402
from db.inventory import MEMORY_MB, VCPU  # noqa: E402
from scheduler import exception  # noqa: E402
from scheduler.filter_scheduler import (  # noqa: E402
    DEFAULT_FILTERS,
    DEFAULT_WEIGHERS,
    FilterScheduler,
)
from scheduler.filters import FILTER_NAMESPACE  # noqa: E402
from scheduler.host_manager import HostManager  # noqa: E402
from scheduler.weights import WEIGHER_NAMESPACE  # noqa: E402
from tools.bench import fleet as bench_fleet  # noqa: E402
from tools.bench import realistic as bench_realistic  # noqa: E402
from tools.bench.daemon import (  # noqa: E402
    SERVICE_DOWN_TIME,
    TRANSPORT_URL,
    Daemon,
    Plugins,
    e2e_available,
    mariadb_available,
    running_daemon,
)

PCI_ALIAS = {"name": "vf", "vendor_id": bench_fleet.VENDOR,
             "product_id": bench_fleet.VF_PRODUCT, "device_type": "type-VF",
             "numa_policy": "required"}


# -- the request mix ----------------------------------------------------------------------

def _plain() -> dict:
    return {"flavor": {"name": "m1.medium", "vcpus": 2, "memory_mb": 4096, "root_gb": 20},
            "project_id": "bench", "user_id": "bench"}


def _multi() -> dict:
    return {"flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 10},
            "num_instances": 10, "project_id": "bench", "user_id": "bench"}


def _anti_affinity() -> dict:
    return {"flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 10},
            "num_instances": 3, "project_id": "bench", "user_id": "bench",
            "instance_group": {"uuid": str(uuidlib.uuid4()), "policy": "anti-affinity"}}


def _pinned() -> dict:
    return {"flavor": {"name": "pinned.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 40,
                       "extra_specs": {"hw:cpu_policy": "dedicated",
                                       "hw:mem_page_size": "large"}},
            "project_id": "bench", "user_id": "bench"}


def _pci() -> dict:
    return {"flavor": {"name": "nfv.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 40,
                       "extra_specs": {"hw:cpu_policy": "dedicated",
                                       "hw:mem_page_size": "large",
                                       "pci_passthrough:alias": "vf:1"}},
            "project_id": "bench", "user_id": "bench"}


def _nowhere() -> dict:
    return {"flavor": {"name": "huge", "vcpus": 512, "memory_mb": 4 * 1024 * 1024,
                       "root_gb": 100}, "project_id": "bench", "user_id": "bench"}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    label: str
    payload: Callable[[], dict]
    expect_novalidhost: bool = False
    dry_run: bool = False


CASES = (
    Case("plain", "plain 2 vCPU / 4 GiB", _plain),
    Case("plain_dry", "plain, dry run (no claim)", _plain, dry_run=True),
    Case("multi10", "multi-instance x10", _multi),
    Case("anti_affinity", "anti-affinity group x3", _anti_affinity),
    Case("pinned", "pinned CPUs + huge pages", _pinned),
    Case("pci", "pinned + PCI VF (numa required)", _pci),
    Case("nowhere", "fits nowhere (NoValidHost)", _nowhere, expect_novalidhost=True),
)


# -- targets (issue 7) ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Target:
    text: str
    size: int
    check: Callable[[float], bool]


def _le(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def _ge(limit: float) -> Callable[[float], bool]:
    return lambda v: v >= limit


TARGETS: dict[str, list[Target]] = {
    "inproc.plain.p50_ms": [Target("<= 2 ms @10k", 10000, _le(2.0)),
                            Target("<= 20 ms @100k", 100000, _le(20.0))],
    "inproc.pinned.p50_ms": [Target("<= 10 ms @10k", 10000, _le(10.0))],
    "inproc.pci.p50_ms": [Target("<= 10 ms @10k", 10000, _le(10.0))],
    "refresh.changed10.p50_ms": [Target("<= 5 ms @10k", 10000, _le(5.0))],
    "e2e.w1.c1.p50_ms": [Target("<= 5 ms @10k", 10000, _le(5.0))],
    "e2e.w1.c16.rps": [Target(">= 300 req/s @10k", 10000, _ge(300.0))],
    "e2e.w2.c16.rps": [Target(">= 300 req/s @10k", 10000, _ge(300.0))],
    "rss.w1.peak_mib": [Target("<= 1.5 GiB @100k", 100000, _le(1536.0))],
}


# -- results --------------------------------------------------------------------------------

@dataclasses.dataclass
class Row:
    """One figure of the table (and of the JSON)."""

    key: str
    label: str
    size: int
    backend: str
    value: float | None = None
    unit: str = ""
    detail: str = ""
    target: str = ""
    status: str = ""
    p99_ms: float | None = None


class Results:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.notes: list[str] = []

    def add(self, key: str, label: str, size: int, backend: str, value: float | None,
            unit: str, detail: str = "") -> Row:
        row = Row(key, label, size, backend, value, unit, detail)
        for t in TARGETS.get(key, ()):
            if t.size == size:
                row.target = t.text
                if value is not None:
                    row.status = "PASS" if t.check(value) else "MISS"
            elif not row.target:
                row.target = f"({t.text})"
        self.rows.append(row)
        print(f"  {label:<40} {_fmt(value, unit):>14}  {detail}", flush=True)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  note: {text}", flush=True)

    def table(self) -> str:
        head = ("fleet", "db", "measurement", "value", "detail", "target", "")
        lines = [(f"{r.size:,}" if r.size else "", r.backend, r.label, _fmt(r.value, r.unit),
                  r.detail, r.target, r.status) for r in self.rows]
        widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
        out = ["  ".join(str(c).ljust(w) if i != 3 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(h, widths, strict=True))).rstrip()
               for h in [head, tuple("-" * w for w in widths), *lines]]
        out.extend(f"note: {n}" for n in self.notes)
        return "\n".join(out)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit in ("ms",):
        return f"{value:.2f} ms" if value < 100 else f"{value:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "req/s":
        return f"{value:.0f} req/s"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:g} {unit}".strip()


def _pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(samples)
    index = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


# -- configuration --------------------------------------------------------------------------

def available_plugins(namespace: str, names: list[str]) -> tuple[list[str], list[str]]:
    """(loadable, missing) entry-point names, in the given order."""
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=namespace)}
    ok, missing = [], []
    for name in names:
        try:
            eps[name].load()
            ok.append(name)
        except Exception:
            missing.append(name)
    return ok, missing


def configure() -> Plugins:
    """Default filters (incl. NUMA + PCI) and all weighers, minus any not installed yet."""
    filters, miss_f = available_plugins(FILTER_NAMESPACE, list(DEFAULT_FILTERS))
    weighers, miss_w = available_plugins(WEIGHER_NAMESPACE, list(DEFAULT_WEIGHERS))
    conf = cfg.CONF
    conf([], project="berth", default_config_files=[])
    conf.set_override("enabled_filters", filters, group="filter_scheduler")
    conf.set_override("weight_classes", weighers, group="filter_scheduler")
    conf.set_override("alias", [json.dumps(PCI_ALIAS)], group="pci")
    # Heartbeats are written once at load time; keep the hosts up for the whole run.
    conf.set_override("service_down_time", SERVICE_DOWN_TIME)
    from tools.bench.replay import journal_as_a_daemon

    journal_as_a_daemon(conf)
    try:
        import scheduler.rpc  # noqa: F401  (registers [DEFAULT] transport_url)
    except ImportError:
        return Plugins(filters, weighers, miss_f + miss_w, [PCI_ALIAS])
    conf.set_override("transport_url", TRANSPORT_URL)
    return Plugins(filters, weighers, miss_f + miss_w, [PCI_ALIAS])


# -- in-process -----------------------------------------------------------------------------

def bench_inprocess(db, size: int, backend: str, res: Results, iterations: int,
                    budget_s: float, profile: str | None, cases: tuple[Case, ...] = CASES
                    ) -> None:
    """Start-up load, the request mix, and the changed-rows refresh."""
    conf = cfg.CONF
    hm = HostManager(db, conf)
    sched = FilterScheduler(hm, conf)
    t0 = time.perf_counter()
    hosts = hm.host_states()
    startup = time.perf_counter() - t0
    res.add("startup.load_s", "start-up load (first host_states)", size, backend, startup,
            "s", f"{len(hosts):,} hosts")

    for case in cases:
        try:
            samples, placed = _run_case(sched, case, iterations, budget_s)
        except Exception as e:      # keep measuring the rest; say what broke
            res.add(f"inproc.{case.name}.p50_ms", case.label, size, backend, None, "ms",
                    f"ERROR {type(e).__name__}: {str(e)[:80]}")
            continue
        mode = "dry run" if case.dry_run else "claim+release"
        row = res.add(f"inproc.{case.name}.p50_ms", f"{case.label} p50", size, backend,
                      statistics.median(samples) * 1000, "ms",
                      f"p99 {_pct(samples, 99) * 1000:.2f} ms, n={len(samples)}, {mode}"
                      + ("" if case.expect_novalidhost else f", {placed} placed"))
        row.p99_ms = _pct(samples, 99) * 1000

    for changed in (0, 10):
        samples = _bench_refresh(db, hm, changed, max(iterations, 20), budget_s)
        key = "refresh.changed10.p50_ms" if changed else "refresh.unchanged.p50_ms"
        row = res.add(key, f"refresh, {changed} hosts changed p50", size, backend,
                      statistics.median(samples) * 1000, "ms",
                      f"p99 {_pct(samples, 99) * 1000:.2f} ms, n={len(samples)}")
        row.p99_ms = _pct(samples, 99) * 1000

    if profile:
        _profile(sched, profile, size, backend, iterations)


def _run_case(sched: FilterScheduler, case: Case, iterations: int, budget_s: float
              ) -> tuple[list[float], int]:
    """Timed ``select_destinations`` calls (parse excluded); releases are untimed."""
    samples: list[float] = []
    placed = 0
    deadline = time.perf_counter() + budget_s
    for i in range(iterations + 1):            # the first call is a warm-up
        spec = sched.parse_request(case.payload())
        t0 = time.perf_counter()
        try:
            result = sched.select_destinations(spec, dry_run=case.dry_run)
        except exception.NoValidHost:
            if not case.expect_novalidhost:
                raise
            result = []
        else:
            if case.expect_novalidhost:
                raise RuntimeError("expected NoValidHost, got a placement")
        elapsed = time.perf_counter() - t0
        if i:
            samples.append(elapsed)
        if not case.dry_run:
            for alternatives in result:
                sched.release(alternatives[0].instance_uuid)
                placed += 1
        if i >= 3 and time.perf_counter() > deadline:
            break
    return samples, placed


def _bench_refresh(db, hm: HostManager, changed: int, iterations: int, budget_s: float
                   ) -> list[float]:
    """Time ``hm.refresh()`` after ``changed`` random nodes got new usage, generation and
    updated_at in SQL as a claim writes them: the root provider's VCPU and MEMORY_MB
    ``used``, the node's generation and ``updated_at`` (usage alternates +1/-1 so the
    fleet ends as it started)."""
    cn = models.ComputeNode.__table__
    rp = models.ResourceProvider.__table__
    inv = models.ProviderInventory.__table__
    ids = [h.node_id for h in hm.host_states()]
    rng = random.Random(7)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    hm.refresh()
    for i in range(iterations + (iterations % 2)):
        if changed:
            pick = rng.sample(ids, changed)
            sign = 1 if i % 2 == 0 else -1
            before = {n: hm.get(n).vcpus_used for n in pick}
            roots = sa.select(rp.c.id).where(rp.c.compute_node_id.in_(pick),
                                             rp.c.parent_id.is_(None))
            with db.writer_connection() as conn:
                conn.execute(sa.update(inv).where(
                    inv.c.provider_id.in_(roots), inv.c.resource_class.in_((VCPU, MEMORY_MB))
                ).values(used=inv.c.used + sa.case((inv.c.resource_class == VCPU, sign),
                                                   else_=512 * sign)))
                conn.execute(sa.update(cn).where(cn.c.id.in_(pick)).values(
                    generation=cn.c.generation + 1, updated_at=models.utcnow()))
        t0 = time.perf_counter()
        hm.refresh()
        samples.append(time.perf_counter() - t0)
        if changed:
            missed = [n for n in pick if hm.get(n).vcpus_used != before[n] + sign]
            if missed:
                raise RuntimeError(f"refresh missed nodes {missed}")
        if i >= 9 and i % 2 == 1 and time.perf_counter() > deadline:
            break
    return samples


def _profile(sched: FilterScheduler, name: str, size: int, backend: str,
             iterations: int) -> None:
    case = next(c for c in CASES if c.name == name)
    print(f"\n== profile: {case.label} @ {size:,} hosts, {backend} ==")
    try:
        from pyinstrument import Profiler
    except ImportError:
        Profiler = None
    if Profiler is not None:
        prof = Profiler(interval=0.0005)
        prof.start()
        _run_case(sched, case, iterations, 60.0)
        prof.stop()
        print(prof.output_text(unicode=True, color=False, show_all=False))
        return
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    _run_case(sched, case, iterations, 60.0)
    pr.disable()
    pstats.Stats(pr).sort_stats("cumulative").print_stats(30)


# -- end to end -----------------------------------------------------------------------------

def _warm_up(api, workers: int) -> float:
    """Make every worker load its host-state cache; returns the slowest first call (s)."""
    slowest = 0.0
    uuids = []

    def one() -> float:
        t0 = time.perf_counter()
        sel = api.select_destinations(None, _plain())
        uuids.append(sel[0][0]["instance_uuid"])
        return time.perf_counter() - t0

    with concurrent.futures.ThreadPoolExecutor(max(4, workers * 4)) as pool:
        for t in pool.map(lambda _: one(), range(max(4, workers * 4))):
            slowest = max(slowest, t)
    _release_all(api, uuids)
    return slowest


def _release_all(api, uuids: list[str]) -> None:
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda u: api.release(None, u), uuids))


def _measure_clients(api, clients: int, requests: int, budget_s: float
                     ) -> tuple[list[float], float, int]:
    """Plain selects from ``clients`` threads until ``requests`` are done or ``budget_s``
    has passed (at least 2 per client): (latencies, wall seconds, errors)."""
    latencies: list[float] = []
    uuids: list[str] = []
    errors = [0]
    lock = threading.Lock()
    per_client = max(2, requests // clients)
    deadline = time.perf_counter() + budget_s

    def client() -> None:
        for i in range(per_client):
            if i >= 2 and time.perf_counter() > deadline:
                break
            t0 = time.perf_counter()
            try:
                sel = api.select_destinations(None, _plain())
            except Exception:
                with lock:
                    errors[0] += 1
                continue
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                uuids.append(sel[0][0]["instance_uuid"])

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    _release_all(api, uuids)
    return latencies, wall, errors[0]


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """The e2e clients share this process with the generated fleet (hundreds of
    thousands of objects) that a compute API would not hold: keep the cyclic
    GC from walking it while they are measured."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def bench_e2e(url: str, size: int, backend: str, res: Results, plugins: Plugins,
              workdir: str, requests: int, budget_s: float,
              worker_counts: tuple[int, ...], concurrency: str = "eventlet") -> None:
    """Latency at 1 and 16 clients and throughput, per worker count; peak RSS.
    Rows for the threading backend are named ``e2e threading ...``."""
    tag = "" if concurrency == "eventlet" else f"{concurrency} "
    key = "e2e" if concurrency == "eventlet" else f"e2e.{concurrency}"
    for workers in worker_counts:
        try:
            with running_daemon(url, workers, plugins, workdir, 60 + size / 500,
                                concurrency) as (d, api):
                first = _warm_up(api, workers)
                res.add(f"{key}.w{workers}.ready_s",
                        f"e2e {tag}{workers}w start-up until ready (cache loaded)",
                        size, backend, d.ready_s, "s")
                res.add(f"{key}.w{workers}.first_s", f"e2e {tag}{workers}w first requests, slowest",
                        size, backend, first, "s")
                for clients in (1, 16):
                    n = requests if clients == 1 else requests * 4
                    lat, wall, errors = _measure_clients(api, clients, n, budget_s)
                    if not lat:
                        raise RuntimeError(f"all {errors} requests failed")
                    p99 = _pct(lat, 99) * 1000
                    row = res.add(f"{key}.w{workers}.c{clients}.p50_ms",
                                  f"e2e {tag}{workers}w {clients:>2} client(s) p50", size,
                                  backend, statistics.median(lat) * 1000, "ms",
                                  f"p99 {p99:.2f} ms, n={len(lat)}"
                                  + (f", {errors} errors" if errors else ""))
                    row.p99_ms = p99
                    res.add(f"{key}.w{workers}.c{clients}.rps",
                            f"e2e {tag}{workers}w {clients:>2} client(s) throughput", size,
                            backend, len(lat) / wall, "req/s")
                if not tag:
                    _add_rss(res, d, size, backend, workers)
        except Exception as e:
            res.add(f"{key}.w{workers}", f"e2e {tag}{workers}w", size, backend, None, "",
                    f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:100]}")


def bench_rss_only(url: str, size: int, backend: str, res: Results, plugins: Plugins,
                   workdir: str) -> None:
    """Start the daemon (1 worker), load its cache with a few requests, read VmHWM."""
    try:
        with running_daemon(url, 1, plugins, workdir, 60 + size / 500) as (d, api):
            first = _warm_up(api, 1)
            res.add("e2e.w1.ready_s", "e2e 1w start-up until ready (cache loaded)", size,
                    backend, d.ready_s, "s")
            res.add("e2e.w1.first_s", "e2e 1w first requests, slowest", size, backend,
                    first, "s")
            _add_rss(res, d, size, backend, 1)
    except Exception as e:
        res.add("rss.w1.peak_mib", "daemon peak RSS (1 worker)", size, backend, None, "",
                f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:100]}")


def _add_rss(res: Results, d: Daemon, size: int, backend: str, workers: int) -> None:
    rss = d.peak_rss_mib()
    if not rss:
        return
    sup = d.proc.pid if workers > 1 else None
    worker_rss = [v for pid, v in rss.items() if pid != sup]
    detail = f"{len(worker_rss)} worker(s), total {sum(rss.values()):.0f} MiB"
    if sup in rss:
        detail += f" (supervisor {rss[sup]:.0f} MiB)"
    res.add(f"rss.w{workers}.peak_mib", f"daemon peak RSS per worker ({workers}w)", size,
            backend, max(worker_rss or [0.0]), "MiB", detail)


# -- main -----------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tox -e bench --", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke mode: 200 hosts, a 60-operation trace, few steady iterations")
    p.add_argument("--sizes", help="fleet sizes, e.g. 1000,10000 (default: quick 200; "
                                   "full 1000,10000,100000)")
    p.add_argument("--backends", default="sqlite,mariadb", help="sqlite,mariadb")
    p.add_argument("--trace-size", type=int,
                   help="operations in the realistic trace (default: quick 60, full 300)")
    p.add_argument("--seed", type=int, default=42,
                   help="fleet seed (the trace uses seed + 1)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--realistic-only", action="store_true", help="skip the steady table")
    only.add_argument("--steady-only", action="store_true", help="skip the realistic table")
    p.add_argument("--e2e", action="store_true",
                   help="also run the berth-scheduler daemon over RabbitMQ (realistic: the "
                        "same trace; steady: 1 and 16 clients, 1 and 2 workers, RSS)")
    p.add_argument("--e2e-size", type=int, help="fleet size for the e2e parts "
                                                "(default: 10000 if measured, else the first)")
    p.add_argument("--burst-threads", type=int, default=16,
                   help="threads of the realistic group burst (0: no burst)")
    p.add_argument("--burst-max", type=int, default=10000,
                   help="largest fleet the burst runs on (each thread caches the fleet)")
    p.add_argument("--profile", type=int, nargs="?", const=40, default=0, metavar="N",
                   help="cProfile every realistic replay and print the top N (default 40) "
                        "functions by cumulative time")
    p.add_argument("--mariadb-max", type=int, default=100000,
                   help="largest fleet loaded into MariaDB (larger: SQLite only)")
    p.add_argument("--json", metavar="PATH", help="also write both tables as JSON")
    p.add_argument("--workdir", help="where databases, traces and daemon logs go (kept); "
                                     "default: a temporary directory removed at the end")
    steady = p.add_argument_group("steady state")
    steady.add_argument("--iterations", type=int, help="timed calls per request kind "
                                                       "(default: quick 5, full 100)")
    steady.add_argument("--budget", type=float, help="max seconds per request kind "
                                                     "(default: quick 0.5, full 20)")
    steady.add_argument("--e2e-requests", type=int,
                        help="requests at 1 client (x4 at 16 clients; default quick 100, "
                             "full 500)")
    steady.add_argument("--e2e-budget", type=float,
                        help="max seconds per e2e phase (default: quick 4, full 30)")
    steady.add_argument("--e2e-concurrency", default="eventlet",
                        help="daemon concurrency backends for the e2e part: eventlet,threading")
    steady.add_argument("--no-rss", action="store_true",
                        help="skip starting the daemon at sizes other than --e2e-size")
    steady.add_argument("--profile-case", metavar="CASE", choices=[c.name for c in CASES],
                        help="profile one steady request kind (pyinstrument if installed, "
                             "else cProfile) at every size/backend measured")
    steady.add_argument("--cases", help="steady request kinds to run, comma-separated "
                                        f"(default all: {','.join(c.name for c in CASES)})")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    quick = args.quick
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")] if args.sizes else \
        ([200] if quick else [1000, 10000, 100000])
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "mariadb"}
    if unknown:
        raise SystemExit(f"unknown backend(s): {', '.join(sorted(unknown))}")
    e2e_size = args.e2e_size or (10000 if 10000 in sizes else sizes[0])
    started = time.perf_counter()
    logging_quiet()
    notes = []
    if "mariadb" in backends and not mariadb_available():
        backends.remove("mariadb")
        notes.append(f"MariaDB skipped: cannot connect to {bench_fleet.MYSQL_URL}")
        print(f"note: {notes[-1]}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="berth-bench-")
    os.makedirs(workdir, exist_ok=True)
    print(f"Berth bench: sizes {sizes}, backends {backends}, seed {args.seed}, "
          f"workdir {workdir}")
    try:
        return _run(args, quick, sizes, backends, e2e_size, workdir, notes, started)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, quick: bool, sizes: list[int], backends: list[str],
         e2e_size: int, workdir: str, notes: list[str], started: float) -> int:

    realistic = None
    if not args.steady_only:
        realistic = bench_realistic.run(
            sizes, backends, args.trace_size or (60 if quick else 300), args.seed, workdir,
            profile_top=args.profile, e2e=args.e2e, e2e_size=e2e_size,
            burst_threads=args.burst_threads, mariadb_max=args.mariadb_max,
            burst_max=args.burst_max)
        realistic.notes.extend(notes)
    steady = None
    if not args.realistic_only:
        steady = run_steady(args, sizes, backends, workdir, e2e_size)
        steady.notes.extend(notes)

    load = os.getloadavg()
    revision = git_revision()
    print("\n" + "=" * 100)
    print(f"Berth benchmark — {revision}, {platform.node()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, load average {load[0]:.1f} at the end; "
          f"{time.perf_counter() - started:.0f} s total")
    if realistic is not None:
        print(f"\nREALISTIC: heterogeneous fleet, mixed trace of "
              f"{args.trace_size or (60 if quick else 300)} operations (seed {args.seed})")
        print(realistic.table())
    if steady is not None:
        print("\nSTEADY STATE: identical requests repeated, first call dropped; claims "
              "released between calls unless marked dry run")
        print(steady.table())
    if args.json:
        doc = {"meta": {"revision": revision, "sizes": sizes, "backends": backends,
                        "seed": args.seed, "quick": quick, "cpus": os.cpu_count(),
                        "python": platform.python_version(), "loadavg_end": load,
                        "seconds": round(time.perf_counter() - started, 1)},
               "realistic": realistic.to_primitive() if realistic else None,
               "steady": ({"rows": [dataclasses.asdict(r) for r in steady.rows],
                           "notes": steady.notes} if steady else None)}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"JSON written to {args.json}")
    if realistic is not None and not realistic.ok:
        print(f"\nFAILED: {len(realistic.violations)} violation(s), "
              f"{len(realistic.errors)} error(s)")
        return 1
    return 0


def run_steady(args: argparse.Namespace, sizes: list[int], backends: list[str],
               workdir: str, e2e_size: int) -> Results:
    """The identical-request table (issue 7)."""
    quick = args.quick
    iterations = args.iterations or (5 if quick else 100)
    budget = args.budget or (0.5 if quick else 20.0)
    e2e_requests = args.e2e_requests or (100 if quick else 500)
    e2e_budget = args.e2e_budget or (4.0 if quick else 30.0)
    cases = CASES
    if args.cases:
        wanted = {c.strip() for c in args.cases.split(",")}
        unknown = wanted - {c.name for c in CASES}
        if unknown:
            raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}")
        cases = tuple(c for c in CASES if c.name in wanted)
    plugins = configure()
    res = Results()
    print(f"\n== steady state: {iterations} iterations (budget {budget:g} s per kind) ==")
    print(f"filters: {', '.join(plugins.filters)}")
    print(f"weighers: {', '.join(plugins.weighers)}")
    if plugins.missing:
        res.note("not installed yet, left out: " + ", ".join(plugins.missing))
    e2e_skip = "not asked (--e2e)" if not args.e2e else e2e_available()
    if e2e_skip:
        res.add("e2e", f"e2e: skipped — {e2e_skip}", 0, "", None, "")

    for size in sizes:
        t0 = time.perf_counter()
        fleet = bench_fleet.generate_fleet(size, args.seed)
        c = fleet.counts()
        print(f"\n== steady {size:,} hosts: generated in {time.perf_counter() - t0:.1f} s: "
              f"{c['numa_hosts']:,} NUMA, {c['pci_hosts']:,} with PCI "
              f"({c['pci_devices']:,} devices), {c['instances']:,} instances "
              f"({c['allocations']:,} allocation rows), "
              f"{c['aggregates']} aggregates ==")
        size_backends = [b for b in backends if b != "mariadb" or size <= args.mariadb_max]
        if len(size_backends) < len(backends):
            res.note(f"{size:,} hosts: MariaDB skipped (--mariadb-max {args.mariadb_max:,})")
        daemon_backend = "mariadb" if "mariadb" in size_backends else \
            (size_backends[0] if size_backends else None)
        for backend in size_backends:
            print(f"-- {backend} --")
            bdb = bench_fleet.create_database(backend, workdir)
            try:
                load_s = bench_fleet.load_fleet(bdb.db, fleet)
                res.add("load.bulk_s", "bulk load of the fleet (Core executemany)", size,
                        backend, load_s, "s", f"{c['pci_devices']:,} PCI rows, "
                        f"{c['instances']:,} instances, {c['allocations']:,} allocation rows")
                bench_inprocess(bdb.db, size, backend, res, iterations, budget,
                                args.profile_case, cases)
                if backend == daemon_backend and not e2e_skip:
                    bdb.db.dispose()
                    if size == e2e_size:
                        with _gc_frozen():
                            for concurrency in args.e2e_concurrency.split(","):
                                bench_e2e(bdb.url, size, backend, res, plugins, workdir,
                                          e2e_requests, e2e_budget, (1, 2), concurrency)
                    elif not args.no_rss and not quick:
                        bench_rss_only(bdb.url, size, backend, res, plugins, workdir)
            finally:
                bdb.drop()
        del fleet
    return res


def git_revision() -> str:
    """Short commit of the working tree, with ``+dirty`` when it has changes."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev or "unknown") + ("+dirty" if dirty else "")


def logging_quiet() -> None:
    """Keep the scheduler's INFO lines out of the table (warnings still show)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    sys.exit(main())
