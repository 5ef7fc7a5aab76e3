"""Replay a trace (tools/bench/trace.py) cold, in-process or over RPC (issue 10).

In-process, ``run_cold`` starts a fresh Python process (``python -m
tools.bench.replay``) so that nothing is remembered from an earlier run: it builds a
``HostManager`` and ``FilterScheduler`` on the database, calls ``warm_up()`` and
freezes the loaded cache out of the garbage collector's way as the daemon does at
start-up (timed and reported apart), then times every operation of
the trace, the first included: ``parse_request`` + ``select_destinations`` with its
claims written, or ``release``. Nothing is dropped. ``--profile`` runs the replay
under cProfile and prints the top functions by cumulative time.

Over RPC, ``replay_rpc`` sends the same operations through ``scheduler.rpcapi``.

``burst`` places the members of one hard anti-affinity group and one hard affinity
group from 16 threads at once, each thread with its own scheduler (its own cache,
as 16 scheduler processes would have), so that claims race in the database.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid as uuidlib
import warnings
from collections.abc import Callable, Iterable, Sequence

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

from oslo_config import cfg  # noqa: E402

from scheduler import exception  # noqa: E402
from scheduler.filter_scheduler import DEFAULT_FILTERS, DEFAULT_WEIGHERS  # noqa: E402
from tools.bench import trace as bench_trace  # noqa: E402
from tools.bench.daemon import SERVICE_DOWN_TIME, Plugins  # noqa: E402

# The default filters plus those a realistic trace's hints and flavor keys need.
REALISTIC_FILTERS = DEFAULT_FILTERS + ["AggregateInstanceExtraSpecsFilter", "SameHostFilter",
                                       "DifferentHostFilter"]
REALISTIC_WEIGHERS = list(DEFAULT_WEIGHERS)


def realistic_plugins() -> Plugins:
    return Plugins(list(REALISTIC_FILTERS), list(REALISTIC_WEIGHERS), [],
                   [dict(a) for a in bench_trace.PCI_ALIASES])


def configure(conf: cfg.ConfigOpts, plugins: Plugins) -> None:
    """The plugins and aliases, and hosts kept up for the whole run (heartbeats are
    written once, at load time)."""
    from scheduler import opts

    opts.list_opts()               # registers every module's options
    conf([], project="berth", default_config_files=[])
    conf.set_override("enabled_filters", plugins.filters, group="filter_scheduler")
    conf.set_override("weight_classes", plugins.weighers, group="filter_scheduler")
    conf.set_override("alias", [json.dumps(a) for a in plugins.aliases], group="pci")
    conf.set_override("service_down_time", SERVICE_DOWN_TIME)
    journal_as_a_daemon(conf)


def journal_as_a_daemon(conf: cfg.ConfigOpts) -> None:
    """Write the node change journal as a daemon of ``[scheduler] workers``
    (1 here) would: a lone worker writes none that nobody would read."""
    try:
        from db import node_changes
        from scheduler import reaper, service  # noqa: F401  (registers [scheduler] workers)

        node_changes.write(reaper.journal_wanted(conf))
    except (ImportError, AttributeError, cfg.NoSuchOptError):
        pass                    # an older tree (the benches compare commits)


# -- one operation ------------------------------------------------------------------------

def _outcome_select(call: Callable[[], list], spec: dict) -> dict:
    try:
        result = call()
    except exception.NoValidHost as e:
        return {"outcome": "novalidhost", "reason": str(e)[:200]}
    except Exception as e:         # a scheduler bug: recorded, counted, fails the run
        return {"outcome": "error", "reason": f"{type(e).__name__}: {str(e)[:300]}"}
    hosts = [(sel[0]["host"] if isinstance(sel[0], dict) else sel[0].host) for sel in result]
    return {"outcome": "placed", "hosts": hosts}


def _outcome_release(call: Callable[[], bool]) -> dict:
    try:
        held = call()
    except Exception as e:
        return {"outcome": "error", "reason": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"outcome": "released" if held else "not-held"}


def replay_inprocess(sched, ops: Sequence[dict]) -> list[dict]:
    """Every operation timed (parse + select with claims, or release)."""
    records = []
    clock, cpu = time.perf_counter, time.thread_time
    for op in ops:
        c0 = cpu()
        t0 = clock()
        if op["op"] == "select":
            spec = op["spec"]

            def call(spec=spec):
                return sched.select_destinations(sched.parse_request(spec))

            rec = _outcome_select(call, spec)
        else:
            rec = _outcome_release(lambda op=op: sched.release(op["instance_uuid"]))
        rec["ms"] = (clock() - t0) * 1000
        rec["cpu_ms"] = (cpu() - c0) * 1000
        rec["i"], rec["kind"], rec["op"] = op["i"], op["kind"], op["op"]
        records.append(rec)
    return records


def replay_rpc(api, ops: Sequence[dict]) -> list[dict]:
    """The same operations through ``scheduler.rpcapi`` (one client, in order)."""
    records = []
    clock = time.perf_counter
    for op in ops:
        t0 = clock()
        if op["op"] == "select":
            rec = _outcome_select(lambda op=op: api.select_destinations(None, op["spec"]),
                                  op["spec"])
        else:
            rec = _outcome_release(lambda op=op: api.release(None, op["instance_uuid"]))
        rec["ms"] = (clock() - t0) * 1000
        rec["i"], rec["kind"], rec["op"] = op["i"], op["kind"], op["op"]
        records.append(rec)
    return records


# -- statistics ---------------------------------------------------------------------------

def pct(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(samples)
    index = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


def stats(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    return {"n": len(samples), "p50": statistics.median(samples), "p99": pct(samples, 99),
            "max": max(samples), "mean": statistics.fmean(samples)}


def summarize(records: Iterable[dict]) -> dict[str, dict]:
    """``all requests`` (every select), then one entry per kind (releases apart), each
    with p50/p99/max/mean in ms (wall clock), the CPU time of the calling thread
    (``cpu_p50``/``cpu_mean``, in-process only: less disturbed by other load on the
    machine, but blind to the database server's work) and outcome counts."""
    records = list(records)
    out: dict[str, dict] = {}
    selects = [r for r in records if r["op"] == "select"]
    groups = {"all requests": selects}
    by_kind = collections.defaultdict(list)
    for r in records:
        by_kind[r["kind"]].append(r)
    groups.update(sorted(by_kind.items()))
    for name, recs in groups.items():
        s = stats([r["ms"] for r in recs])
        cpu = [r["cpu_ms"] for r in recs if "cpu_ms" in r]
        if cpu and len(cpu) == len(recs):
            s["cpu_p50"], s["cpu_mean"] = statistics.median(cpu), statistics.fmean(cpu)
        s["outcomes"] = dict(collections.Counter(r["outcome"] for r in recs))
        out[name] = s
    return out


# -- a cold replay in a fresh process -------------------------------------------------------

def _child(url: str, trace_path: str, out_path: str, profile_top: int) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING)
    from db.api import Database
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    configure(cfg.CONF, realistic_plugins())
    ops = bench_trace.load(trace_path)
    db = Database(url)
    t0 = time.perf_counter()
    sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
    sched.warm_up()
    # as the daemon does after warm_up (scheduler/service.py): the cache is
    # moved out of the cyclic GC's way, so no full collection walks it later
    gc.collect()
    gc.freeze()
    startup = time.perf_counter() - t0
    prof = None
    if profile_top:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    records = replay_inprocess(sched, ops)
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    profile_text = ""
    if prof is not None:
        import pstats

        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).strip_dirs()
        stats.sort_stats("cumulative").print_stats(profile_top)
        stats.sort_stats("tottime").print_stats(profile_top)
        profile_text = buf.getvalue()
    db.dispose()
    with open(out_path, "w") as f:
        json.dump({"startup_s": startup, "wall_s": wall, "records": records,
                   "loadavg": [load0, load1],
                   "profile": profile_text}, f)
    return 0


def run_cold(url: str, trace_path: str, workdir: str, profile_top: int = 0) -> dict:
    """Replay in a fresh interpreter; returns its JSON (records, startup_s, profile)."""
    out = os.path.join(workdir, f"replay-{uuidlib.uuid4().hex[:8]}.json")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [sys.executable, "-m", "tools.bench.replay", "--url", url, "--trace", trace_path,
           "--out", out]
    if profile_top:
        cmd += ["--profile", str(profile_top)]
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"replay process failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    with open(out) as f:
        data = json.load(f)
    os.unlink(out)
    return data


# -- the burst ------------------------------------------------------------------------------

def burst(url: str, threads: int = 16) -> dict:
    """Each of ``threads`` threads, with its own scheduler and cache, places one member
    of a hard anti-affinity group and one of a hard affinity group, all at once.
    Returns the specs, records (per thread) and the two group uuids."""
    from db.api import Database
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    anti = str(uuidlib.uuid4())
    aff = str(uuidlib.uuid4())
    flavor = {"name": "burst", "vcpus": 1, "memory_mb": 1024, "root_gb": 10}
    scheds, dbs = [], []
    for _ in range(threads):
        db = Database(url)
        sched = FilterScheduler(HostManager(db, cfg.CONF), cfg.CONF)
        sched.warm_up()            # every cache loaded before the burst: all stale after
        scheds.append(sched)
        dbs.append(db)
    gate = threading.Barrier(threads)
    ops: list[dict] = []
    lock = threading.Lock()

    def worker(k: int) -> list[dict]:
        mine = []
        for kind, group, policy in (("burst-anti-affinity", anti, "anti-affinity"),
                                    ("burst-affinity", aff, "affinity")):
            spec = {"flavor": flavor, "instance_uuids": [str(uuidlib.uuid4())],
                    "instance_group": {"uuid": group, "policy": policy}}
            op = {"i": 100000 + 2 * k + (kind == "burst-affinity"), "kind": kind,
                  "op": "select", "spec": spec}
            mine.append(op)
        with lock:
            ops.extend(mine)
        gate.wait()
        return replay_inprocess(scheds[k], mine)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        records = [r for rs in pool.map(worker, range(threads)) for r in rs]
    wall = time.perf_counter() - t0
    for db in dbs:
        db.dispose()
    return {"ops": ops, "records": records, "wall_s": wall,
            "groups": {anti: ("anti-affinity", None), aff: ("affinity", None)}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="replay a trace in this fresh process")
    p.add_argument("--url", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="cProfile the replay, keep the top N functions")
    args = p.parse_args(argv)
    return _child(args.url, args.trace, args.out, args.profile)


if __name__ == "__main__":
    sys.exit(main())
