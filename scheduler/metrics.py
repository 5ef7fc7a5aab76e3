"""Prometheus metrics of a scheduler worker, and the slow-request log line.

Every metric is listed in doc/source/admin/metrics.rst (name, type, labels, meaning).
Recording costs a few counter increments per request, never one per host:
the request's phases and plugins are timed with ``perf_counter`` into a
:class:`SelectTimings` (per-request state) and written once when the request
ends. The per-plugin and per-filter sums (two dozen series a request) are
added to plain process-local sums and written to the metrics by ``flush``,
which the worker's status reporter calls every ``[metrics] status_interval``
(a write to a multiprocess metric costs ~1.5 us; the sums cost ~0.1). Fleet
gauges (hosts by state, capacity per zone) are computed from the host
columns by the same reporter, not per request.

With several workers the daemon runs prometheus_client in multiprocess mode:
``scheduler.monitoring.prepare`` sets ``PROMETHEUS_MULTIPROC_DIR`` before this
module (and so prometheus_client) is first imported, and the monitoring port
merges the files of every worker into one scrape.
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping
from importlib import metadata

import numpy as np
from oslo_config import cfg
from oslo_log import log as logging
from prometheus_client import Counter, Gauge, Histogram

from db import api as db_api

LOG = logging.getLogger(__name__)

slow_request_opts = [
    cfg.IntOpt("slow_request_ms", default=1000, min=0,
               help="A select_destinations call that takes longer than this many "
                    "milliseconds logs one INFO line with its phase times (refresh, "
                    "filter, weigh, claim) and how many hosts each filter removed. "
                    "0 turns the line off."),
]
cfg.CONF.register_opts(slow_request_opts, group="scheduler")

LIST_OPTS = [("scheduler", slow_request_opts)]

#: Seconds; from a cache hit on a small fleet to a cold 100,000-host request.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)
ROWS_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 500, 1000, 5000, 10000)

# -- requests --------------------------------------------------------------------------
REQUESTS = Counter("berth_requests", "RPC requests handled, by method and result "
                   "(placed, ok, no_valid_host, invalid_request, not_found, conflict, "
                   "error).", ["method", "result"])
REQUEST_DURATION = Histogram("berth_request_duration_seconds",
                             "Time to answer an RPC request, end to end in the worker "
                             "(validation included), by method.", ["method"],
                             buckets=LATENCY_BUCKETS)
INSTANCES_PLACED = Counter("berth_instances_placed", "Instances given a host "
                           "(dry_run=true: chosen, nothing claimed).", ["dry_run"])
PHASE_DURATION = Histogram("berth_select_phase_duration_seconds",
                           "Time one select_destinations spent in each phase, summed "
                           "over its instances: refresh (cache), filter, weigh, claim "
                           "(recheck under the host lock and the claim transaction).",
                           ["phase"], buckets=LATENCY_BUCKETS)
FILTER_REMOVED = Counter("berth_filter_hosts_removed", "Hosts removed by each filter "
                         "(counted where it ran in the fast order, per instance).",
                         ["filter"])
PLUGIN_SECONDS = Counter("berth_plugin_duration_seconds", "Time spent in each filter "
                         "and weigher (kind=filter|weigher).", ["plugin", "kind"])

# -- claims and the database -------------------------------------------------------------
CLAIM_CONFLICTS = Counter("berth_claim_conflicts", "Claims the database refused: "
                          "generation (another scheduler changed the host first), "
                          "group_policy (a hard server-group policy the cache had not "
                          "seen), refused (the database's own guard, nothing changed).",
                          ["kind"])
CLAIM_RETRIES = Counter("berth_claim_retries", "Claims tried again: conflict (the host "
                        "re-read and re-checked), group_changed (the instance placed "
                        "again with fresh group members).", ["reason"])
CLAIMS_REAPED = Counter("berth_claims_reaped", "Pending claims released by the claim "
                        "reaper: not confirmed within [scheduler] claim_ttl.")
MOVES = Counter("berth_moves", "Moves made, by kind (resize, migrate, live-migrate, "
                "evacuate, rebuild, unshelve).", ["kind"])
MOVES_REVERTED = Counter("berth_moves_reverted", "Moves the claim reaper reverted: neither "
                         "confirmed nor reverted within [scheduler] move_ttl.")
PENDING_CLAIMS = Gauge("berth_claims_pending", "Claims not confirmed yet, as the "
                       "deployment's claim reaper last counted them (other workers "
                       "report 0).", multiprocess_mode="livemax")
PREEMPTIONS = Counter("berth_preemptions", "Instances preempted to place instances of "
                      "higher priority, by the preempting request's priority and the "
                      "host's availability zone.", ["priority", "availability_zone"])
PREEMPTED_UNRELEASED = Gauge("berth_preempted_unreleased", "Preempted instances the caller "
                             "has not released yet (berth-manage allocations list "
                             "--preempted), as the deployment's claim reaper last counted "
                             "them (other workers report 0).", multiprocess_mode="livemax")
DB_ERRORS_RETRIED = Counter("berth_db_errors_retried", "Deadlocks and lost database "
                            "connections met by a retried operation (the last try of one "
                            "that gave up included).", ["operation"])

# -- the host-state cache ------------------------------------------------------------------
CACHE_REFRESHES = Counter("berth_cache_refreshes", "Host-state cache refreshes: full "
                          "(every row) or changes (rows whose updated_at moved).",
                          ["kind"])
REFRESH_CHANGED_ROWS = Histogram("berth_cache_refresh_changed_rows", "Node rows the "
                                 "changes probe returned, per refresh.",
                                 buckets=ROWS_BUCKETS)
NODES_RELOADED = Counter("berth_cache_nodes_reloaded", "Full node rows re-read because "
                         "their generation was newer than the cached one (refreshes "
                         "and claim conflicts).")
NODE_CHANGES_APPLIED = Counter("berth_cache_node_changes_applied", "Other schedulers' "
                               "claims and releases taken into the cache from the node "
                               "change journal instead of re-reading their nodes.")
CACHE_HOSTS = Gauge("berth_cache_hosts", "Hosts in the worker's cache (label pid: "
                    "the worker process).", multiprocess_mode="liveall")

# -- the fleet, per availability zone (updated every [metrics] status_interval) -----------
HOSTS = Gauge("berth_hosts", "Hosts by availability zone and state (up, down: no "
              "heartbeat within service_down_time, disabled).",
              ["availability_zone", "state"], multiprocess_mode="livemostrecent")
CAPACITY = Gauge("berth_capacity", "Schedulable capacity of the up and enabled hosts per "
                 "zone: (total - reserved) x allocation ratio; resource is vcpus, "
                 "memory_mb or disk_mb.", ["availability_zone", "resource"],
                 multiprocess_mode="livemostrecent")
USAGE = Gauge("berth_usage", "Resources held by allocations on the up and enabled hosts "
              "per zone (same resources as berth_capacity).",
              ["availability_zone", "resource"], multiprocess_mode="livemostrecent")

# -- workers ---------------------------------------------------------------------------
WORKER_READY = Gauge("berth_worker_ready", "1 when the worker is ready (cache loaded, "
                     "database and broker reachable, serving), else 0.", ["worker"],
                     multiprocess_mode="liveall")
BUILD_INFO = Gauge("berth_build_info", "Always 1; the labels say which release and RPC "
                   "API version the workers run.", ["version", "api_version"],
                   multiprocess_mode="livemax")

_RESOURCES = (("vcpus", "vcpus_limit", "vcpus_used"),
              ("memory_mb", "memory_limit", "memory_used"),
              ("disk_mb", "disk_limit", "disk_used"))

# Label children, looked up once: .labels() validates and locks on every call.
_children: dict[tuple, object] = {}


def _child(metric, *labels):
    key = (metric, labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


# -- recording -------------------------------------------------------------------------

RESULTS = {"NoValidHost": "no_valid_host", "InvalidRequest": "invalid_request",
           "NotFound": "not_found", "Conflict": "conflict",
           "ServiceUnavailable": "unavailable"}


def result_of(error: BaseException | None, method: str) -> str:
    """The ``result`` label of a request that ended with ``error`` (None: success)."""
    if error is None:
        return "placed" if method in ("select_destinations", "reschedule") else "ok"
    for cls in type(error).__mro__:
        name = RESULTS.get(cls.__name__)
        if name:
            return name
    return "error"


def count_request(method: str, error: BaseException | None, seconds: float) -> None:
    """One RPC request answered (or failed) after ``seconds``."""
    _child(REQUESTS, method, result_of(error, method)).inc()
    _child(REQUEST_DURATION, method).observe(seconds)


class SelectTimings:
    """What one select_destinations measured about itself (per-request state).

    ``phase(name, since)`` adds the time since ``since`` (a ``perf_counter``
    value) to a phase; the Cycle adds each plugin's time and the filters' host
    counts; ``record`` writes it all to the metrics once, at the end.
    """

    __slots__ = ("started", "phases", "removed", "hosts", "placed")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        #: phase -> seconds, for the phases the request reached.
        self.phases: dict[str, float] = {}
        #: filter -> hosts it removed, summed over the request's instances.
        self.removed: dict[str, int] = {}
        self.hosts = 0
        self.placed = 0

    def phase(self, name: str, since: float) -> float:
        """Add ``now - since`` to phase ``name``; returns now."""
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - since
        return now

    def add_removed(self, removed: Mapping[str, int]) -> None:
        for name, n in removed.items():
            if n:
                self.removed[name] = self.removed.get(name, 0) + n

    def record(self, filter_seconds: Mapping[str, float],
               weigher_seconds: Mapping[str, float], dry_run: bool, outcome: str,
               slow_ms: int, num_instances: int) -> float:
        """Write this request's numbers; log the slow-request line when it took
        longer than ``slow_ms`` (0: never). Returns the elapsed seconds."""
        elapsed = time.perf_counter() - self.started
        for name, seconds in self.phases.items():
            _child(PHASE_DURATION, name).observe(seconds)
        if self.placed:
            _child(INSTANCES_PLACED, "true" if dry_run else "false").inc(self.placed)
        _pending.add(self.removed, filter_seconds, weigher_seconds)
        if slow_ms and elapsed * 1000 > slow_ms:
            LOG.info("%s", self.slow_line(elapsed, outcome, num_instances, dry_run))
        return elapsed

    def slow_line(self, elapsed: float, outcome: str, num_instances: int,
                  dry_run: bool) -> str:
        phases = ", ".join(f"{name} {seconds * 1000:.1f}" for name, seconds
                           in self.phases.items())
        removed = ", ".join(f"{name} -{n}" for name, n in self.removed.items()) \
            or "none removed"
        return (f"Slow select_destinations: {elapsed * 1000:.1f} ms for {num_instances} "
                f"instance(s){' [dry run]' if dry_run else ''}, {outcome}; phases ms: "
                f"{phases}; {self.hosts} hosts, filters: {removed}")


class _PendingSums:
    """Per-filter and per-plugin sums not yet written to the metrics."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.removed: dict[str, int] = {}
        self.filters: dict[str, float] = {}
        self.weighers: dict[str, float] = {}

    def add(self, removed: Mapping[str, int], filters: Mapping[str, float],
            weighers: Mapping[str, float]) -> None:
        with self.lock:
            for into, values in ((self.removed, removed), (self.filters, filters),
                                 (self.weighers, weighers)):
                for name, v in values.items():
                    into[name] = into.get(name, 0) + v

    def take(self) -> tuple[dict, dict, dict]:
        with self.lock:
            out = self.removed, self.filters, self.weighers
            self.removed, self.filters, self.weighers = {}, {}, {}
        return out


_pending = _PendingSums()


def flush() -> None:
    """Write the pending per-filter and per-plugin sums to the metrics."""
    removed, filters, weighers = _pending.take()
    for name, n in removed.items():
        _child(FILTER_REMOVED, name).inc(n)
    for plugin, seconds in filters.items():
        _child(PLUGIN_SECONDS, plugin, "filter").inc(seconds)
    for plugin, seconds in weighers.items():
        _child(PLUGIN_SECONDS, plugin, "weigher").inc(seconds)


def count_claim_conflict(kind: str) -> None:
    _child(CLAIM_CONFLICTS, kind).inc()


def count_claim_retry(reason: str) -> None:
    _child(CLAIM_RETRIES, reason).inc()


def count_claim_reaped() -> None:
    CLAIMS_REAPED.inc()


def count_move(kind: str) -> None:
    _child(MOVES, kind).inc()


def count_move_reverted() -> None:
    MOVES_REVERTED.inc()


def set_pending_claims(n: int) -> None:
    PENDING_CLAIMS.set(n)


def count_preemption(victims: int, priority: int, availability_zone: str | None) -> None:
    if victims:
        PREEMPTIONS.labels(str(priority), availability_zone or "").inc(victims)


def set_preempted_unreleased(n: int) -> None:
    PREEMPTED_UNRELEASED.set(n)


def count_db_error_retried(operation: str) -> None:
    _child(DB_ERRORS_RETRIED, operation).inc()


def count_refresh(kind: str, changed_rows: int | None = None) -> None:
    _child(CACHE_REFRESHES, kind).inc()
    if changed_rows is not None:
        REFRESH_CHANGED_ROWS.observe(changed_rows)


def count_nodes_reloaded(n: int) -> None:
    if n:
        NODES_RELOADED.inc(n)


def count_node_changes_applied(n: int) -> None:
    if n:
        NODE_CHANGES_APPLIED.inc(n)


def set_cache_hosts(n: int) -> None:
    CACHE_HOSTS.set(n)


# -- the fleet -------------------------------------------------------------------------

def fleet_totals(cols, down_before: float) -> dict:
    """Hosts by (zone, state) and capacity/usage by (zone, resource) of the up and
    enabled hosts, from the host columns (``down_before``: the oldest heartbeat,
    in epoch seconds, that still counts as up). One pass over the hosts for
    their zones; the sums are numpy."""
    n = cols.n
    zones: dict[str, int] = {}
    codes = np.fromiter((zones.setdefault(h.availability_zone or "", len(zones))
                         for h in cols.hosts), dtype=np.intp, count=n)
    names = list(zones)
    disabled = cols.disabled
    down = ~disabled & (cols.heartbeat < down_before)
    up = ~disabled & ~down
    hosts: dict[tuple[str, str], int] = {}
    capacity: dict[tuple[str, str], float] = {}
    usage: dict[tuple[str, str], float] = {}
    size = len(names)
    for state, mask in (("up", up), ("down", down), ("disabled", disabled)):
        counts = np.bincount(codes[mask], minlength=size)
        for z, c in zip(names, counts.tolist(), strict=True):
            hosts[(z, state)] = c
    for resource, limit, used in _RESOURCES:
        cap = np.bincount(codes[up], weights=getattr(cols, limit)[up], minlength=size)
        use = np.bincount(codes[up], weights=getattr(cols, used)[up], minlength=size)
        for z, c, u in zip(names, cap.tolist(), use.tolist(), strict=True):
            capacity[(z, resource)] = c
            usage[(z, resource)] = u
    return {"hosts": hosts, "capacity": capacity, "usage": usage}


_fleet_labels: dict[str, set] = {"hosts": set(), "capacity": set(), "usage": set()}


def set_fleet(totals: dict) -> None:
    """Publish ``fleet_totals``; zones that disappeared drop to 0 (a multiprocess
    gauge cannot be removed from the other workers' files)."""
    for key, gauge in (("hosts", HOSTS), ("capacity", CAPACITY), ("usage", USAGE)):
        values = totals[key]
        for labels in _fleet_labels[key] - set(values):
            _child(gauge, *labels).set(0)
        for labels, value in values.items():
            _child(gauge, *labels).set(value)
        _fleet_labels[key] |= set(values)


def set_worker_ready(worker: int, ready: bool) -> None:
    _child(WORKER_READY, str(worker)).set(1 if ready else 0)


def set_build_info(version: str, api_version: str) -> None:
    _child(BUILD_INFO, version, api_version).set(1)


@functools.cache
def release() -> str:
    """Berth's release (the installed package's version)."""
    try:
        return metadata.version("berth")
    except metadata.PackageNotFoundError:
        return "unknown"


db_api.retry_listeners.append(count_db_error_retried)
