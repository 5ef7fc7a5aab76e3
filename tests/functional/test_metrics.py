"""The monitoring port of the real daemon: /metrics after a burst of requests
to two workers, /healthz and /readyz, and readiness when the database goes away.

Everything is read from the real endpoint (Prometheus text parsed with the
client library's own parser) of a real daemon over RabbitMQ and MariaDB.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from db import migration
from db.api import Database
from scheduler import exception
from scheduler.manager import RPC_API_VERSION
from tests import services
from tests.functional.daemon import ROOT, Daemon

SMALL = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}
TOO_BIG = {"flavor": {"vcpus": 1, "memory_mb": 10 ** 6, "root_gb": 1}}
INVALID = {"flavor": {"vcpus": -1, "memory_mb": 512, "root_gb": 1}}
HOSTS, VCPUS, MEMORY_MB, RESERVED_MB = 8, 16, 32768, 512   # tests.functional.daemon.small_fleet


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(port: int) -> list[tuple[str, dict, float]]:
    code, text = _get(port, "/metrics")
    assert code == 200
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


def value(samples, name: str, **labels) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == w for k, w in labels.items()))


def series(samples, name: str) -> list[dict]:
    return [lab for n, lab, _ in samples if n == name]


def wait_for(predicate, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _monitored(tmp_path, workers: int, **kw) -> tuple[Daemon, int]:
    port = _free_port()
    d = Daemon(tmp_path, workers=workers, extra=f"""[metrics]
enabled = true
port = {port}
status_interval = 0.3
multiprocess_dir = {tmp_path / "metrics"}
""", **kw)
    return d, port


def _status_cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scheduler.cmd.client", "--config-file",
                           str(daemon.config), "status", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("metrics")
    d, port = _monitored(tmp_path, workers=2)
    # Every select is "slow", so each one logs its line.
    d.config.write_text(d.config.read_text().replace("workers = 2",
                                                     "workers = 2\nslow_request_ms = 1"))
    try:
        d.start()
        yield d, port, tmp_path
        assert d.stop() == 0, d.log_tail()
    finally:
        d.close()


def test_metrics_of_two_workers_after_a_burst(two_workers):
    daemon, port, tmp_path = two_workers
    wait_for(lambda: _get(port, "/readyz")[0] == 200, what="/readyz 200:\n"
             + daemon.log_tail())
    before = scrape(port)
    api = daemon.api()
    requests = [SMALL] * 24 + [dict(SMALL, num_instances=2)] * 4 + [TOO_BIG] * 3 \
        + [INVALID] * 2
    outcomes: list[str] = []
    lock = threading.Lock()

    def client(mine):
        for spec in mine:
            try:
                api.select_destinations(None, spec)
                result = "placed"
            except exception.NoValidHost:
                result = "no_valid_host"
            except exception.InvalidRequest:
                result = "invalid_request"
            with lock:
                outcomes.append(result)

    threads = [threading.Thread(target=client, args=(requests[i::6],)) for i in range(6)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    burst_s = time.monotonic() - started
    assert sorted(outcomes) == sorted(["placed"] * 28 + ["no_valid_host"] * 3
                                      + ["invalid_request"] * 2)

    # Per-filter sums reach the files at each worker's next status report.
    def flushed():
        now = scrape(port)
        removed = value(now, "berth_filter_hosts_removed_total") \
            - value(before, "berth_filter_hosts_removed_total")
        return now if removed >= 3 * HOSTS else None
    after = wait_for(flushed, what="the per-filter counts")

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    sd = {"method": "select_destinations"}
    assert delta("berth_requests_total", result="placed", **sd) == 28
    assert delta("berth_requests_total", result="no_valid_host", **sd) == 3
    assert delta("berth_requests_total", result="invalid_request", **sd) == 2
    assert delta("berth_requests_total", result="error") == 0
    assert delta("berth_instances_placed_total", dry_run="false") == 24 + 4 * 2
    assert delta("berth_request_duration_seconds_count", **sd) == 33
    assert delta("berth_request_duration_seconds_sum", **sd) > 0
    # The histogram's buckets are cumulative: +Inf holds every request.
    assert delta("berth_request_duration_seconds_bucket", le="+Inf", **sd) == 33
    # Invalid requests stop at validation; the 31 others ran every phase once.
    for phase in ("refresh", "filter", "weigh", "claim"):
        count = delta("berth_select_phase_duration_seconds_count", phase=phase)
        assert count == (31 if phase in ("refresh", "filter") else 28), phase
        assert delta("berth_select_phase_duration_seconds_sum", phase=phase) > 0, phase
    # Only the too-big requests lose hosts, all to RamFilter.
    assert delta("berth_filter_hosts_removed_total", filter="RamFilter") == 3 * HOSTS
    assert delta("berth_filter_hosts_removed_total") == 3 * HOSTS
    assert delta("berth_plugin_duration_seconds_total", plugin="RamFilter",
                 kind="filter") > 0
    assert delta("berth_plugin_duration_seconds_total", plugin="RAMWeigher",
                 kind="weigher") > 0
    # Concurrent requests share a refresh: at most one each, every one sized;
    # each worker's status reporter refreshes too, once per status interval
    # (0.3 s) while the burst runs and until the counts were flushed.
    refreshes = delta("berth_cache_refreshes_total", kind="changes")
    reporter_rounds = 2 * (int((time.monotonic() - started) / 0.3) + 1)
    assert 1 <= refreshes <= 31 + reporter_rounds, (refreshes, burst_s)
    assert delta("berth_cache_refresh_changed_rows_count") == refreshes

    # One scrape shows both workers: each loaded the cache once, and each
    # worker process left its own files in the directory.
    assert value(after, "berth_cache_refreshes_total", kind="full") == 2
    pids = {lab["pid"] for lab in series(after, "berth_cache_hosts")}
    assert len(pids) == 2
    assert value(after, "berth_cache_hosts") == 2 * HOSTS
    ready = {lab["worker"]: v for n, lab, v in after if n == "berth_worker_ready"}
    assert ready == {"0": 1.0, "1": 1.0}
    files = os.listdir(tmp_path / "metrics")
    assert {f.split("_")[-1] for f in files if f.startswith("counter_")} \
        == {f"{p}.db" for p in pids}, files
    assert value(after, "berth_build_info", api_version=RPC_API_VERSION) >= 1

    # Fleet gauges per zone follow the allocations (the reporters refresh them).
    used_vcpus = sum(u[0] for u in daemon.usage().values())
    used_mb = sum(u[1] for u in daemon.usage().values())
    assert used_vcpus >= 32

    def fleet_caught_up():
        now = scrape(port)
        return now if value(now, "berth_usage", resource="memory_mb") == used_mb else None
    now = wait_for(fleet_caught_up, what="berth_usage to reach the allocations")
    assert value(now, "berth_hosts", availability_zone="nova", state="up") == HOSTS
    assert value(now, "berth_hosts", state="down") == 0
    assert value(now, "berth_capacity", availability_zone="nova", resource="vcpus") \
        == HOSTS * VCPUS
    assert value(now, "berth_capacity", resource="memory_mb") \
        == HOSTS * (MEMORY_MB - RESERVED_MB)
    assert value(now, "berth_usage", resource="vcpus") == used_vcpus

    # The slow-request line (threshold 1 ms): phases and the filters' counts.
    log = daemon.log.read_text()
    slow = [line for line in log.splitlines() if "Slow select_destinations" in line]
    assert len(slow) >= 1, daemon.log_tail()
    assert all("phases ms: refresh" in line and "filter" in line for line in slow)
    for line in slow:
        if "no valid host" in line:
            assert "filters: RamFilter -8" in line, line
        else:
            assert "placed" in line and "weigh" in line and "claim" in line, line

    # berth status: both workers, ready, with their release.
    out = _status_cli(daemon)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready (2/2 workers ready)" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines()[3:]]
    assert sorted(r[0] for r in rows) == ["0", "1"]
    assert {r[1] for r in rows} == pids
    assert all(r[2] == "yes" and r[3] == "0.1.0" and r[4] == RPC_API_VERSION for r in rows), rows


def test_claim_conflict_is_counted(two_workers):
    """A generation moved behind the caches' backs: the claim loses the race,
    re-reads the host and wins on the retry."""
    daemon, port, _ = two_workers
    wait_for(lambda: _get(port, "/readyz")[0] == 200, what="/readyz 200")
    before = scrape(port)
    with daemon.db.writer_connection() as conn:
        # updated_at in the past: the changes probe cannot see it, the claim must.
        conn.execute(sa.text("UPDATE compute_nodes SET generation = generation + 1, "
                             "updated_at = '2000-01-01 00:00:00'"))
    daemon.api().select_destinations(None, SMALL)
    after = scrape(port)
    assert value(after, "berth_claim_conflicts_total", kind="generation") \
        - value(before, "berth_claim_conflicts_total", kind="generation") == 1
    assert value(after, "berth_claim_retries_total", reason="conflict") \
        - value(before, "berth_claim_retries_total", reason="conflict") == 1
    # The claiming worker re-reads the node once; the other worker may re-read
    # it too when its own refresh sees the claim's change before the scrape.
    assert value(after, "berth_cache_nodes_reloaded_total") \
        - value(before, "berth_cache_nodes_reloaded_total") in (1, 2)
    daemon.assert_consistent()


def test_a_dead_worker_is_replaced_and_its_gauges_dropped(two_workers):
    """SIGKILL one worker: the supervisor starts another; one scrape then shows
    the two live workers' gauges only, and the dead one's counters are kept."""
    daemon, port, _ = two_workers
    wait_for(lambda: _get(port, "/readyz")[0] == 200, what="/readyz 200")
    before = scrape(port)
    report = json.loads(_get(port, "/readyz")[1])
    victim = report["workers"][0]["pid"]
    os.kill(victim, signal.SIGKILL)

    def replaced():
        code, body = _get(port, "/readyz")
        workers = json.loads(body)["workers"]
        return code == 200 and workers[0]["pid"] != victim
    wait_for(replaced, timeout=60, what="worker 0 replaced:\n" + daemon.log_tail())
    after = scrape(port)
    pids = {lab["pid"] for lab in series(after, "berth_cache_hosts")}
    assert str(victim) not in pids and len(pids) == 2
    assert {lab["pid"] for lab in series(after, "berth_worker_ready")} == pids
    assert value(after, "berth_requests_total") >= value(before, "berth_requests_total")
    assert value(after, "berth_cache_refreshes_total", kind="full") \
        == value(before, "berth_cache_refreshes_total", kind="full") + 1


def _database_check(port: int) -> tuple[int, dict]:
    code, body = _get(port, "/readyz")
    return code, json.loads(body)["workers"][0]


def test_readyz_follows_the_database(tmp_path):
    """One worker serves its own port, reaching MariaDB through a proxy. When
    the database server is unreachable, or answers without the database, the
    worker is not ready (still alive); when it is back, ready again."""
    proxy = services.TcpProxy(("127.0.0.1", 3306))
    proxy.start()
    daemon, port = _monitored(tmp_path, workers=1, backend="threading")
    daemon.config.write_text(daemon.config.read_text().replace(
        "connection = " + services.MYSQL_URL,
        "connection = " + services.MYSQL_URL.replace("127.0.0.1:3306",
                                                     f"127.0.0.1:{proxy.port}")))
    assert f":{proxy.port}/" in daemon.config.read_text()
    try:
        daemon.start()
        status = wait_for(lambda: _get(port, "/readyz")[0] == 200,
                          what="/readyz 200:\n" + daemon.log_tail())
        assert status
        code, body = _get(port, "/readyz")
        report = json.loads(body)
        assert report["ready"] is True
        assert report["workers"][0]["checks"] == {"rpc": "ok", "cache": "ok",
                                                  "database": "ok", "broker": "ok"}
        assert report["workers"][0]["hosts"] == HOSTS
        assert _get(port, "/healthz")[0] == 200
        assert _get(port, "/nope")[0] == 404

        proxy.stop()                                     # the server is unreachable
        code, worker = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(
            _database_check(port)), what="/readyz 503 with the database unreachable")
        assert worker["checks"]["database"].startswith("unreachable ("), worker
        assert worker["checks"]["broker"] == "ok" and worker["ready"] is False
        assert _get(port, "/healthz")[0] == 200          # alive, just not ready
        out = _status_cli(daemon)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "NOT READY (0/1 workers ready)" in out.stdout
        assert "database: unreachable" in out.stdout
        proxy.start()
        wait_for(lambda: _get(port, "/readyz")[0] == 200, what="/readyz 200 again")
        api = daemon.api()
        assert api.select_destinations(None, SMALL)[0][0]["host"].startswith("fc")

        services.drop_mariadb_database(daemon.db_name)   # answers, database gone
        code, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(
            _get(port, "/readyz")), what="/readyz 503 after the drop")
        worker = json.loads(body)["workers"][0]
        assert worker["ready"] is False
        assert worker["checks"]["database"].startswith("failed ("), worker
        ready = {lab.get("worker"): v for n, lab, v in scrape(port)
                 if n == "berth_worker_ready"}
        assert ready == {"0": 0.0}

        # The database comes back (migrated): ready again.
        eng = sa.create_engine(services.MYSQL_URL + "/")
        with eng.begin() as conn:
            conn.execute(sa.text(f"CREATE DATABASE `{daemon.db_name}` "
                                 "CHARACTER SET utf8mb4"))
        eng.dispose()
        db = Database(daemon.db_url)
        migration.db_sync(db)
        db.dispose()
        wait_for(lambda: _get(port, "/readyz")[0] == 200, what="/readyz 200 again")
        out = _status_cli(daemon, "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["ready"] is True
        assert daemon.stop() == 0, daemon.log_tail()
        # The port closed with the daemon.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        daemon.close()
        proxy.stop()
