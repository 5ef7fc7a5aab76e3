"""Metric bookkeeping: what one request, one conflict, one retry adds, read back
from prometheus_client's registry (single-process mode in the unit tests)."""
from __future__ import annotations

import logging
import time

import numpy as np
import oslo_messaging
import pytest
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db import exception as db_exc
from prometheus_client import REGISTRY

from db import api as db_api
from db import hosts as db_hosts
from scheduler import exception, metrics, rpc
from scheduler import fleet as fleet_mod
from scheduler.filter_scheduler import FilterScheduler, load_filters
from scheduler.filters import BaseHostFilter
from scheduler.host_columns import HostColumns
from scheduler.host_manager import HostManager
from scheduler.manager import SchedulerManager
from tests.unit.scheduler.fakes import fake_host

FILTERS = ["ComputeFilter", "RamFilter", "CoreFilter", "DiskFilter"]
HOSTS = [{"host": "big", "vcpus": 8, "memory_mb": 8192, "local_gb": 100},
         {"host": "small", "vcpus": 8, "memory_mb": 1024, "local_gb": 100}]


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Sample values now, to compare with later ones."""

    def __init__(self, *keys):
        metrics.flush()         # what earlier tests left pending is theirs
        self.keys = keys
        self.before = {k: sample(k[0], **dict(k[1:])) for k in keys}

    def __call__(self, name: str, **labels) -> float:
        key = (name, *sorted(labels.items()))
        return sample(name, **labels) - self.before[key]


def key(name: str, **labels):
    return (name, *sorted(labels.items()))


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    c.set_override("enabled_filters", FILTERS, group="filter_scheduler")
    c.set_override("weight_classes", ["RAMWeigher"], group="filter_scheduler")
    yield c
    c.clear_override("enabled_filters", group="filter_scheduler")
    c.clear_override("weight_classes", group="filter_scheduler")
    c.clear_override("slow_request_ms", group="scheduler")


@pytest.fixture
def sched(sqlite_db, conf):
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": HOSTS}))
    return FilterScheduler(HostManager(sqlite_db, conf), conf)


def _spec(sched, ram=2048, **kw):
    return sched.parse_request({"flavor": {"vcpus": 1, "memory_mb": ram, "root_gb": 1},
                                **kw})


@pytest.mark.parametrize("error, method, result", [
    (None, "select_destinations", "placed"),
    (None, "reschedule", "placed"),
    (None, "release", "ok"),
    (exception.NoValidHost(reason="x"), "select_destinations", "no_valid_host"),
    (exception.InvalidRequest(field="f", reason="r"), "release", "invalid_request"),
    (fleet_mod.InvalidFleet(field="f", reason="r"), "report_compute_node",
     "invalid_request"),
    (exception.NotFound(kind="Host", name="h"), "show_host", "not_found"),
    (exception.Conflict(reason="r"), "aggregate_create", "conflict"),
    (ValueError("boom"), "select_destinations", "error"),
])
def test_result_label(error, method, result):
    assert metrics.result_of(error, method) == result


def _refused(cls, call, *args):
    """``call(*args)`` fails with ``cls`` (wrapped as oslo.messaging's expected)."""
    with pytest.raises(oslo_messaging.ExpectedException) as e:
        call(*args)
    assert isinstance(e.value.exc_info[1], cls)


def test_manager_counts_each_request_by_result(sqlite_db, sched, conf):
    manager = SchedulerManager(sqlite_db, sched, conf)
    ctxt = rpc.new_context()        # Berth's own tools' (service)
    sd = {"method": "select_destinations"}
    d = Delta(key("berth_requests_total", result="placed", **sd),
              key("berth_requests_total", result="no_valid_host", **sd),
              key("berth_requests_total", result="invalid_request", **sd),
              key("berth_requests_total", method="show_host", result="not_found"),
              key("berth_requests_total", method="release", result="ok"),
              key("berth_request_duration_seconds_count", **sd),
              key("berth_instances_placed_total", dry_run="false"))
    ok = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}
    manager.select_destinations(ctxt, ok)
    manager.select_destinations(ctxt, dict(ok, num_instances=2))
    _refused(exception.NoValidHost, manager.select_destinations, ctxt,
             {"flavor": {"vcpus": 1, "memory_mb": 10 ** 6, "root_gb": 1}})
    _refused(exception.InvalidRequest, manager.select_destinations, ctxt,
             {"flavor": {"vcpus": 0, "memory_mb": 512, "root_gb": 1}})
    _refused(exception.NotFound, manager.show_host, ctxt, "nowhere")
    assert manager.release(ctxt, "00000000-0000-0000-0000-000000000001") is False
    assert d("berth_requests_total", result="placed", **sd) == 2
    assert d("berth_requests_total", result="no_valid_host", **sd) == 1
    assert d("berth_requests_total", result="invalid_request", **sd) == 1
    assert d("berth_requests_total", method="show_host", result="not_found") == 1
    assert d("berth_requests_total", method="release", result="ok") == 1
    assert d("berth_request_duration_seconds_count", **sd) == 4
    assert d("berth_instances_placed_total", dry_run="false") == 3


def test_a_killed_call_counts_as_an_error_not_a_success(sqlite_db, sched, conf):
    """A call stopped by a BaseException (eventlet's Timeout, GreenletExit) is
    counted as result error, and the exception goes on up."""
    class Killed(BaseException):
        pass

    def killed(*args, **kwargs):
        raise Killed()

    manager = SchedulerManager(sqlite_db, sched, conf)
    manager.scheduler.select_destinations = killed
    sd = {"method": "select_destinations"}
    d = Delta(key("berth_requests_total", result="placed", **sd),
              key("berth_requests_total", result="error", **sd),
              key("berth_request_duration_seconds_count", **sd))
    with pytest.raises(Killed):
        manager.select_destinations(rpc.new_context(),
                                    {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}})
    assert d("berth_requests_total", result="placed", **sd) == 0
    assert d("berth_requests_total", result="error", **sd) == 1
    assert d("berth_request_duration_seconds_count", **sd) == 1


def test_phases_filters_and_plugins_once_per_request(sched):
    phases = ("refresh", "filter", "weigh", "claim")
    d = Delta(*[key("berth_select_phase_duration_seconds_count", phase=p) for p in phases],
              *[key("berth_select_phase_duration_seconds_sum", phase=p) for p in phases],
              key("berth_filter_hosts_removed_total", filter="RamFilter"),
              key("berth_filter_hosts_removed_total", filter="CoreFilter"),
              *[key("berth_plugin_duration_seconds_total", plugin=f, kind="filter")
                for f in FILTERS],
              key("berth_plugin_duration_seconds_total", plugin="RAMWeigher",
                  kind="weigher"),
              key("berth_instances_placed_total", dry_run="true"),
              key("berth_instances_placed_total", dry_run="false"))
    # 2048 MB: "small" (1024 MB) is removed by RamFilter for each instance.
    sched.select_destinations(_spec(sched, num_instances=2))
    sched.select_destinations(_spec(sched), dry_run=True)
    with pytest.raises(exception.NoValidHost):
        sched.select_destinations(_spec(sched, ram=10 ** 6))
    # Per-filter and per-plugin sums wait in the process for the next flush.
    assert d("berth_filter_hosts_removed_total", filter="RamFilter") == 0
    metrics.flush()
    for p in phases:
        # Three requests; the refused one never weighed nor claimed.
        want = 3 if p in ("refresh", "filter") else 2
        assert d("berth_select_phase_duration_seconds_count", phase=p) == want, p
        assert d("berth_select_phase_duration_seconds_sum", phase=p) > 0, p
    # 2 instances + 1 dry run lose "small", the refused request loses both.
    assert d("berth_filter_hosts_removed_total", filter="RamFilter") == 2 + 1 + 2
    assert d("berth_filter_hosts_removed_total", filter="CoreFilter") == 0
    for f in FILTERS:
        assert d("berth_plugin_duration_seconds_total", plugin=f, kind="filter") > 0, f
    assert d("berth_plugin_duration_seconds_total", plugin="RAMWeigher",
             kind="weigher") == 0   # one candidate each time: nothing to weigh
    assert d("berth_instances_placed_total", dry_run="false") == 2
    assert d("berth_instances_placed_total", dry_run="true") == 1


def test_weigher_time_is_counted_when_there_is_a_choice(sched):
    d = Delta(key("berth_plugin_duration_seconds_total", plugin="RAMWeigher",
                  kind="weigher"))
    sched.select_destinations(_spec(sched, ram=512))       # both hosts are candidates
    metrics.flush()
    assert d("berth_plugin_duration_seconds_total", plugin="RAMWeigher",
             kind="weigher") > 0


def test_claim_conflict_and_retry_are_counted(sqlite_db, sched):
    sched.host_manager.refresh()
    d = Delta(key("berth_claim_conflicts_total", kind="generation"),
              key("berth_claim_retries_total", reason="conflict"),
              key("berth_cache_nodes_reloaded_total"))
    with sqlite_db.writer_connection() as conn:
        # Behind the cache's back: the changes probe cannot see an old updated_at.
        conn.execute(sa.text("UPDATE compute_nodes SET generation = generation + 1, "
                             "updated_at = '2000-01-01 00:00:00'"))
    sched.select_destinations(_spec(sched))
    assert d("berth_claim_conflicts_total", kind="generation") == 1
    assert d("berth_claim_retries_total", reason="conflict") == 1
    assert d("berth_cache_nodes_reloaded_total") == 1


def test_cache_refreshes_and_size(sched):
    d = Delta(key("berth_cache_refreshes_total", kind="full"),
              key("berth_cache_refreshes_total", kind="changes"),
              key("berth_cache_refresh_changed_rows_count"))
    sched.host_manager.refresh()
    sched.host_manager.refresh()
    sched.host_manager.refresh()
    assert d("berth_cache_refreshes_total", kind="full") == 1
    assert d("berth_cache_refreshes_total", kind="changes") == 2
    assert d("berth_cache_refresh_changed_rows_count") == 2
    assert sample("berth_cache_hosts") == len(HOSTS)


def test_retried_database_errors_are_counted():
    calls = []

    @db_api.retry_on_deadlock
    def flaky_transaction():
        calls.append(1)
        if len(calls) < 3:
            raise db_exc.DBDeadlock()
        return "done"

    d = Delta(key("berth_db_errors_retried_total", operation="flaky_transaction"))
    assert flaky_transaction() == "done"
    assert len(calls) == 3
    assert d("berth_db_errors_retried_total", operation="flaky_transaction") == 2


class _Slow(BaseHostFilter):
    """Takes its time on every host."""

    def host_passes(self, host, state):
        time.sleep(0.002)
        return None


def test_slow_request_logs_one_line_with_phases_and_filters(sqlite_db, conf, caplog):
    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": HOSTS}))
    filters = [*load_filters(FILTERS, conf), _Slow(conf)]
    sched = FilterScheduler(HostManager(sqlite_db, conf), conf, filters=filters)
    caplog.set_level(logging.INFO, logger="scheduler.metrics")
    conf.set_override("slow_request_ms", 0, group="scheduler")
    sched.select_destinations(_spec(sched))
    assert not [r for r in caplog.records if "Slow select" in r.getMessage()]
    conf.set_override("slow_request_ms", 1, group="scheduler")
    sched.select_destinations(_spec(sched))
    lines = [r.getMessage() for r in caplog.records if "Slow select" in r.getMessage()]
    assert len(lines) == 1
    line = lines[0]
    assert "for 1 instance(s), placed" in line
    for phase in ("refresh", "filter", "weigh", "claim"):
        assert f"{phase} " in line.split("phases ms:")[1]
    assert "2 hosts, filters: RamFilter -1" in line
    conf.set_override("slow_request_ms", 60_000, group="scheduler")
    sched.select_destinations(_spec(sched))
    assert len([r for r in caplog.records if "Slow select" in r.getMessage()]) == 1


def test_slow_line_format():
    t = metrics.SelectTimings()
    t.phases = {"refresh": 0.001, "filter": 0.25}
    t.add_removed({"ComputeFilter": 0, "RamFilter": 7})
    t.add_removed({"RamFilter": 2, "CoreFilter": 1})
    t.hosts = 10
    assert t.slow_line(0.3, "no valid host", 2, dry_run=True) == (
        "Slow select_destinations: 300.0 ms for 2 instance(s) [dry run], no valid host; "
        "phases ms: refresh 1.0, filter 250.0; 10 hosts, filters: RamFilter -9, "
        "CoreFilter -1")


def test_fleet_totals_match_a_per_host_count():
    rng = np.random.default_rng(7)
    hosts = []
    for i in range(60):
        vcpus, memory = int(rng.integers(4, 64)), int(rng.integers(1, 64)) * 1024
        h = fake_host(f"h{i}", vcpus=vcpus, memory_mb=memory,
                      vcpus_used=int(rng.integers(0, vcpus)),
                      memory_mb_used=int(rng.integers(0, memory)),
                      disabled=bool(rng.random() < 0.2))
        h.availability_zone = ("az1", "az2", "az3")[i % 3]
        if rng.random() < 0.3:
            h.last_heartbeat = h.last_heartbeat.replace(year=2000)   # down
        hosts.append(h)
    cols = HostColumns(hosts)
    cutoff = float(np.median(cols.heartbeat))            # old ones are below it
    totals = metrics.fleet_totals(cols, cutoff)

    want_hosts: dict = {}
    want_cap: dict = {}
    want_use: dict = {}
    for i, h in enumerate(hosts):
        z = h.availability_zone
        state = "disabled" if h.disabled else \
            ("down" if cols.heartbeat[i] < cutoff else "up")
        want_hosts[(z, state)] = want_hosts.get((z, state), 0) + 1
        if state == "up":
            for res, limit, used in (("vcpus", h.vcpus_limit, h.vcpus_used),
                                     ("memory_mb", h.memory_mb_limit, h.memory_mb_used),
                                     ("disk_mb", h.disk_mb_limit, h.disk_mb_used)):
                want_cap[(z, res)] = want_cap.get((z, res), 0) + limit
                want_use[(z, res)] = want_use.get((z, res), 0) + used
    assert {k: v for k, v in totals["hosts"].items() if v} == want_hosts
    assert {k: v for k, v in totals["capacity"].items() if v} == \
        pytest.approx({k: v for k, v in want_cap.items() if v})
    assert {k: v for k, v in totals["usage"].items() if v} == \
        pytest.approx({k: v for k, v in want_use.items() if v})
    assert sum(totals["hosts"].values()) == 60

    metrics.set_fleet(totals)
    assert sample("berth_hosts", availability_zone="az1", state="up") == \
        want_hosts.get(("az1", "up"), 0)
    # A zone that disappears drops to 0 rather than keeping its last value.
    for h in hosts:
        h.availability_zone = "az1"
    metrics.set_fleet(metrics.fleet_totals(HostColumns(hosts), cutoff))
    assert sample("berth_hosts", availability_zone="az2", state="up") == 0
    assert sample("berth_capacity", availability_zone="az3", resource="vcpus") == 0

    empty = metrics.fleet_totals(HostColumns([]), cutoff)
    assert empty == {"hosts": {}, "capacity": {}, "usage": {}}
