"""The monitoring port without a daemon: the metrics directory, worker status
reports, how /healthz and /readyz judge them, and the HTTP answers."""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from oslo_config import cfg

from scheduler import exception, monitoring, rpc  # noqa: F401  (rpc: transport_url)


@pytest.fixture
def conf():
    c = cfg.CONF
    c([], project="berth")
    yield c
    for name in ("enabled", "multiprocess_dir", "port", "bind_host", "status_interval"):
        c.clear_override(name, group="metrics")


@pytest.fixture
def clean_env():
    """``prepare`` names its directory in the environment: restore it after
    (prometheus_client, and every process a later test starts, would read it)."""
    saved = os.environ.pop(monitoring.MULTIPROC_ENV, None)
    yield
    os.environ.pop(monitoring.MULTIPROC_ENV, None)
    if saved is not None:
        os.environ[monitoring.MULTIPROC_ENV] = saved


def test_prepare_is_off_unless_enabled(conf, clean_env):
    assert monitoring.prepare(conf) is None
    assert monitoring.MULTIPROC_ENV not in os.environ


def test_prepare_makes_a_fresh_directory_and_cleanup_removes_it(conf, clean_env):
    conf.set_override("enabled", True, group="metrics")
    path = monitoring.prepare(conf)
    assert os.path.isdir(path) and os.listdir(path) == []
    assert os.environ[monitoring.MULTIPROC_ENV] == path
    monitoring.cleanup(path, conf)
    assert not os.path.exists(path)


def test_prepare_empties_a_configured_directory_and_keeps_it(conf, clean_env, tmp_path):
    d = tmp_path / "m"
    (d / "sub").mkdir(parents=True)
    (d / "counter_123.db").write_bytes(b"old")
    (d / "sub" / "x").write_text("old")
    conf.set_override("enabled", True, group="metrics")
    conf.set_override("multiprocess_dir", str(d), group="metrics")
    assert monitoring.prepare(conf) == str(d)
    assert os.listdir(d) == []
    monitoring.cleanup(str(d), conf)
    assert d.is_dir()


def _report(path, worker, *, ready=True, age=0.0, pid=100, checks=None):
    now = time.time()
    status = {"worker": worker, "pid": pid + worker, "ready": ready,
              "checks": checks or {"rpc": "ok", "cache": "ok", "database": "ok",
                                   "broker": "ok"},
              "release": "0.1.0", "api_version": "1.0", "backend": "eventlet",
              "hosts": 8, "started_at": now - 60, "reported_at": now - age}
    (path / f"worker-{worker}.json").write_text(json.dumps(status))


def test_daemon_status_judges_every_expected_worker(tmp_path):
    _report(tmp_path, 0)
    _report(tmp_path, 1)
    s = monitoring.daemon_status(str(tmp_path), 2, interval=1.0)
    assert s["ready"] and s["alive"]
    assert [w["uptime_s"] for w in s["workers"]] == [pytest.approx(60, abs=1)] * 2

    _report(tmp_path, 1, ready=False, checks={"database": "unreachable (gone)"})
    s = monitoring.daemon_status(str(tmp_path), 2, interval=1.0)
    assert not s["ready"] and s["alive"]

    _report(tmp_path, 1, age=60)                    # 3 * 1 + 15 s: too old
    s = monitoring.daemon_status(str(tmp_path), 2, interval=1.0)
    assert not s["ready"] and not s["alive"]
    assert s["workers"][1]["checks"]["process"] == "no report for 60 s"

    s = monitoring.daemon_status(str(tmp_path), 3, interval=1.0)   # worker 2 never reported
    assert not s["alive"] and s["workers"][2]["checks"]["process"].startswith("no report")


def test_worker_gone_removes_its_report(tmp_path):
    _report(tmp_path, 0)
    monitoring.worker_gone(str(tmp_path), 0, pid=100)
    assert not (tmp_path / "worker-0.json").exists()
    monitoring.worker_gone(str(tmp_path), 0, pid=100)    # twice is fine


def _get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_http_answers(conf, tmp_path):
    conf.set_override("port", 0, group="metrics")
    server = monitoring.MonitoringServer(conf, str(tmp_path), workers=1)
    server.start()
    try:
        port = server.port
        code, _, body = _get(port, "/readyz")
        assert code == 503 and json.loads(body)["ready"] is False
        assert _get(port, "/healthz")[0] == 503
        _report(tmp_path, 0)
        code, ctype, body = _get(port, "/readyz")
        assert code == 200 and ctype == "application/json"
        assert json.loads(body)["workers"][0]["release"] == "0.1.0"
        assert _get(port, "/healthz?verbose")[0] == 200
        code, ctype, _ = _get(port, "/metrics")
        assert code == 200 and ctype.startswith("text/plain")
        assert _get(port, "/other")[0] == 404
    finally:
        server.stop()


def test_a_taken_port_is_a_clear_error(conf, tmp_path):
    conf.set_override("port", 0, group="metrics")
    first = monitoring.MonitoringServer(conf, str(tmp_path), workers=1)
    try:
        conf.set_override("port", first.port, group="metrics")
        with pytest.raises(exception.BerthError, match=r"\[metrics\] bind_host, port"):
            monitoring.MonitoringServer(conf, str(tmp_path), workers=1)
    finally:
        first.httpd.server_close()


def test_broker_check(conf):
    assert monitoring.check_broker([]) == "ok"
    conf.set_override("transport_url", "kombu+memory:////")
    try:
        assert monitoring.broker_addresses(conf) == []
    finally:
        conf.clear_override("transport_url")
    conf.set_override("transport_url", "rabbit://u:p@10.9.8.7:5673,u:p@b2/")
    try:
        assert monitoring.broker_addresses(conf) == [("10.9.8.7", 5673), ("b2", 5672)]
    finally:
        conf.clear_override("transport_url")
    # Port 1 on loopback: nothing listens there.
    assert monitoring.check_broker([("127.0.0.1", 1)]).startswith("unreachable (127.0.0.1:1")


def test_database_check(sqlite_db):
    from db import migration

    head = migration.head_revision()
    assert monitoring.check_database(sqlite_db, head) == "ok"
    assert monitoring.check_database(sqlite_db, "not-the-head").startswith("schema at ")
    with sqlite_db.engine.begin() as conn:
        import sqlalchemy as sa

        conn.execute(sa.text("DROP TABLE alembic_version"))
    assert monitoring.check_database(sqlite_db, head).startswith("failed (")


def test_worker_reporter_loads_the_cache_and_reports(conf, sqlite_db, tmp_path):
    """A worker whose start-up could not read the database: the reporter loads
    the cache once the database answers, then reports ready with its hosts and
    publishes the fleet gauges; stopping reports not ready at once."""
    import types

    from prometheus_client import REGISTRY

    from db import hosts as db_hosts
    from scheduler import fleet as fleet_mod
    from scheduler.host_manager import HostManager

    db_hosts.import_fleet(sqlite_db, fleet_mod.load_fleet({"hosts": [
        {"host": "r1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10,
         "cpu_allocation_ratio": 1.0},
        {"host": "r2", "vcpus": 4, "memory_mb": 4096, "local_gb": 10, "disabled": True}]}))
    conf.set_override("transport_url", "kombu+memory:////")
    service = types.SimpleNamespace(host_manager=HostManager(sqlite_db, conf), db=sqlite_db,
                                    server=None, backend="threading")
    reporter = monitoring.WorkerReporter(conf, str(tmp_path), 3, service)
    try:
        reporter.report(reporter.checks())
        status = json.loads((tmp_path / "worker-3.json").read_text())
        assert status["ready"] is False
        assert status["checks"] == {"rpc": "starting", "cache": "not loaded",
                                    "database": "ok", "broker": "ok"}
        service.server = object()                 # now serving
        reporter.check_once()
        status = json.loads((tmp_path / "worker-3.json").read_text())
        assert status["ready"] is True and status["hosts"] == 2
        assert status["worker"] == 3 and status["pid"] == os.getpid()
        assert REGISTRY.get_sample_value("berth_worker_ready", {"worker": "3"}) == 1
        assert REGISTRY.get_sample_value("berth_hosts", {"availability_zone": "nova",
                                                         "state": "disabled"}) == 1
        assert REGISTRY.get_sample_value("berth_capacity", {"availability_zone": "nova",
                                                            "resource": "vcpus"}) == 4
        reporter.stopping = True
        reporter.stop()
        status = json.loads((tmp_path / "worker-3.json").read_text())
        assert status["ready"] is False and status["checks"]["rpc"] == "stopping"
        assert REGISTRY.get_sample_value("berth_worker_ready", {"worker": "3"}) == 0
        reporter.remove()
        assert not (tmp_path / "worker-3.json").exists()
    finally:
        conf.clear_override("transport_url")
        service.host_manager.close()


def test_a_database_lost_between_check_and_refresh_is_not_ready_not_a_traceback(
        conf, sqlite_db, tmp_path, caplog, monkeypatch):
    """The database answered the readiness check, then went away before the
    cache refresh: the worker reports not ready, nothing is logged with a
    traceback (the outage is logged once by the RPC layer)."""
    import types

    from oslo_db import exception as db_exc

    from scheduler.host_manager import HostManager

    conf.set_override("transport_url", "kombu+memory:////")
    hm = HostManager(sqlite_db, conf)
    service = types.SimpleNamespace(host_manager=hm, db=sqlite_db, server=object(),
                                    backend="threading")

    def gone():
        raise db_exc.DBConnectionError("Can't connect to MySQL server (111)")

    monkeypatch.setattr(hm, "refresh", gone)
    reporter = monitoring.WorkerReporter(conf, str(tmp_path), 0, service)
    try:
        with caplog.at_level("DEBUG"):
            reporter.check_once()
        status = json.loads((tmp_path / "worker-0.json").read_text())
        assert status["ready"] is False
        assert status["checks"]["database"].startswith("unreachable (")
        assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
    finally:
        conf.clear_override("transport_url")
