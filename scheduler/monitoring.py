"""The daemon's monitoring port: ``/metrics``, ``/healthz``, ``/readyz``.

One HTTP server per daemon (the supervisor's, or the only worker's) on
``[metrics] bind_host``:``port``:

* ``/metrics``: Prometheus text format, every worker's metrics merged
  (prometheus_client's multiprocess mode: each worker writes its values to
  files in a per-daemon directory, named by ``PROMETHEUS_MULTIPROC_DIR``);
* ``/healthz`` (liveness): 200 while every worker process reports in;
* ``/readyz`` (readiness): 200 when every worker is ready (serving, host
  cache loaded, database and broker reachable), else 503; the body is JSON
  with each worker's checks, pid and version (``berth status`` prints it).

Each worker runs a :class:`WorkerReporter` thread that checks its database
and broker every ``status_interval`` seconds, refreshes the fleet gauges and
writes ``worker-N.json`` into the same directory; the server only reads
those files, so a scrape or a probe never touches a worker's request path.

This module must not import prometheus_client at import time: ``prepare``
sets the directory first (prometheus_client reads it once, on import).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from db.models import utcnow
from scheduler.host_columns import seconds

LOG = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

metrics_opts = [
    cfg.BoolOpt("enabled", default=False,
                help="Serve Prometheus metrics (/metrics) and health probes (/healthz, "
                     "/readyz) over HTTP on bind_host:port."),
    cfg.HostAddressOpt("bind_host", default="127.0.0.1",
                       help="Address the metrics and health HTTP server listens on "
                            "(0.0.0.0 for every interface)."),
    cfg.PortOpt("port", default=9393,
                help="Port of the metrics and health HTTP server."),
    cfg.FloatOpt("status_interval", default=2.0, min=0.1,
                 help="Seconds between a worker's readiness checks (database and "
                      "broker reachable) and updates of the fleet gauges. A worker "
                      "that has not reported for 3 intervals plus 15 seconds counts "
                      "as dead for /healthz."),
    cfg.StrOpt("multiprocess_dir",
               help="Directory for the workers' metric files. Its contents are "
                    "removed at start-up. Default: a new temporary directory per "
                    "daemon, removed at exit."),
]

cfg.CONF.register_opts(metrics_opts, group="metrics")

LIST_OPTS = [("metrics", metrics_opts)]


# -- the per-daemon directory --------------------------------------------------------

def prepare(conf: cfg.ConfigOpts) -> str | None:
    """Make the metrics directory (emptied) and name it in the environment, for
    this process and the workers it starts. Must run before prometheus_client is
    imported. Returns the directory, or None when metrics are off."""
    if not conf.metrics.enabled:
        return None
    if "prometheus_client" in sys.modules and not os.environ.get(MULTIPROC_ENV):
        LOG.warning("prometheus_client was imported before the metrics directory was "
                    "set: this process's metrics will not be served")
    path = conf.metrics.multiprocess_dir
    if path:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            full = os.path.join(path, name)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
    else:
        path = tempfile.mkdtemp(prefix=f"berth-metrics-{os.getpid()}-")
    os.environ[MULTIPROC_ENV] = path
    return path


def cleanup(path: str | None, conf: cfg.ConfigOpts) -> None:
    """Remove a directory ``prepare`` created (a configured one is left)."""
    if path and not conf.metrics.multiprocess_dir:
        shutil.rmtree(path, ignore_errors=True)


def worker_gone(path: str | None, index: int, pid: int) -> None:
    """A worker process exited: drop its status and its live gauges."""
    if not path:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path)
    try:
        os.unlink(_status_file(path, index))
    except FileNotFoundError:
        pass


def _status_file(path: str, index: int) -> str:
    return os.path.join(path, f"worker-{index}.json")


# -- a worker's own checks --------------------------------------------------------------

def broker_addresses(conf: cfg.ConfigOpts) -> list[tuple[str, int]]:
    """(host, port) of each broker in ``[DEFAULT] transport_url`` (none for the
    in-process transports)."""
    import oslo_messaging

    from scheduler import rpc  # noqa: F401  (registers transport_url)

    parsed = oslo_messaging.TransportURL.parse(conf, conf.transport_url)
    if parsed.transport not in ("rabbit", "kombu", "amqp"):
        return []
    return [(h.hostname or "127.0.0.1", h.port or 5672) for h in parsed.hosts] \
        or [("127.0.0.1", 5672)]


def check_broker(addresses: list[tuple[str, int]], timeout: float = 2.0) -> str:
    """"ok" when a broker accepts a TCP connection, else why not."""
    if not addresses:
        return "ok"
    errors = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return "ok"
        except OSError as e:
            errors.append(f"{host}:{port}: {e.strerror or e}")
    return "unreachable (" + "; ".join(errors) + ")"


def check_database(db, head: str | None) -> str:
    """"ok" when the database answers and holds the schema this release needs;
    else "unreachable (...)" (no connection) or "failed (...)" (it answered
    with an error, e.g. the database or its tables are gone)."""
    import sqlalchemy as sa
    from oslo_db import exception as db_exc

    try:
        with db.engine.connect() as conn:
            current = conn.execute(sa.text("SELECT version_num FROM alembic_version")) \
                .scalar()
    except Exception as e:
        inner = getattr(e, "inner_exception", None) or getattr(e, "orig", None) or e
        text = (str(getattr(inner, "orig", None) or inner).splitlines() or [repr(e)])[0]
        what = "unreachable" if isinstance(e, db_exc.DBConnectionError) else "failed"
        return f"{what} ({text[:200]})"
    if head is not None and current != head:
        return f"schema at {current or 'none'}, this release needs {head}"
    return "ok"


class WorkerReporter:
    """A worker's readiness checks, fleet gauges and status file, every
    ``status_interval`` seconds, in a thread of its own (a green thread under
    eventlet: the checks' I/O yields)."""

    def __init__(self, conf: cfg.ConfigOpts, path: str, worker: int, service) -> None:
        self.conf = conf
        self.path = path
        self.worker = worker
        self.service = service
        self.started = time.time()
        self.stopping = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._head: str | None = None
        self._broker = None
        self._last_checks: dict[str, str] = {}

    def start(self) -> None:
        from scheduler import metrics
        from scheduler.manager import RPC_API_VERSION

        metrics.set_build_info(metrics.release(), RPC_API_VERSION)
        metrics.set_worker_ready(self.worker, False)
        self.report({"rpc": "starting", "cache": "not loaded", "database": "not checked",
                     "broker": "not checked"})
        self._thread = threading.Thread(target=self._run, name="status-reporter",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Report not ready (draining) at once, then stop checking."""
        self.stopping = True
        self._stop.set()
        self.report(dict(self._last_checks, rpc="stopping"))

    def remove(self) -> None:
        """The worker is done: write what is pending, drop the status file."""
        from scheduler import metrics

        if self._thread is not None:
            self._thread.join(10)       # no report may follow the removal
        metrics.flush()
        try:
            os.unlink(_status_file(self.path, self.worker))
        except FileNotFoundError:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except Exception:
                LOG.exception("Worker %d: status check failed", self.worker)
            self._stop.wait(self.conf.metrics.status_interval)

    def checks(self) -> dict[str, str]:
        """The worker's readiness checks now: each "ok" or why not."""
        from db import migration

        service = self.service
        if self._head is None:
            self._head = migration.head_revision()
        if self._broker is None:
            self._broker = broker_addresses(self.conf)
        hm = service.host_manager
        loaded = hm.loaded if hm is not None else service.server is not None
        return {
            "rpc": "stopping" if self.stopping else
                   ("ok" if service.server is not None else "starting"),
            "cache": "ok" if loaded else "not loaded",
            "database": check_database(service.db, self._head) if service.db is not None
            else "not connected",
            "broker": self._broker_check(),
        }

    def _broker_check(self) -> str:
        """The broker accepts connections, and (once the worker serves) every route
        it serves carries messages to a consumer (``scheduler.broker.RouteCheck``)."""
        reachable = check_broker(self._broker)
        routes = getattr(self.service, "routes", None)
        if reachable != "ok" or routes is None:
            return reachable
        return routes.status

    def check_once(self) -> None:
        from scheduler import metrics

        metrics.flush()
        checks = self.checks()
        if self.stopping:
            return
        hm = self.service.host_manager
        if hm is not None and checks["database"] == "ok" and self.service.server is not None:
            # Catch up with other workers' and schedulers' claims (one probe
            # query; shared with a request refreshing at the same time), or
            # load the cache if start-up could not read the database.
            from oslo_db import exception as db_exc

            try:
                hm.refresh()
            except db_exc.DBConnectionError as e:
                # gone between the check and the refresh: an outage, which the
                # RPC layer logs once; here it only makes the worker not ready
                inner = getattr(e, "inner_exception", None) or e
                checks["database"] = f"unreachable ({str(inner).splitlines()[0][:200]})"
                self.report(checks)
                return
            checks["cache"] = "ok" if hm.loaded else "not loaded"
            from scheduler.filters import compute  # noqa: F401  (service_down_time)

            cutoff = seconds(utcnow() - datetime.timedelta(
                seconds=self.conf.service_down_time))
            metrics.set_fleet(metrics.fleet_totals(hm.columns, cutoff))
        self.report(checks)

    def report(self, checks: dict[str, str]) -> None:
        from scheduler import metrics
        from scheduler.manager import RPC_API_VERSION

        if self.stopping:           # a check that began before stop() ends as stopping
            checks = dict(checks, rpc="stopping")
        self._last_checks = checks
        ready = all(v == "ok" for v in checks.values())
        metrics.set_worker_ready(self.worker, ready)
        hm = self.service.host_manager
        status = {"worker": self.worker, "pid": os.getpid(), "ready": ready,
                  "checks": checks, "release": metrics.release(),
                  "api_version": RPC_API_VERSION, "backend": self.service.backend,
                  "host": self.conf.host,
                  "hosts": hm.columns.n if hm is not None and hm.loaded else None,
                  "started_at": self.started, "reported_at": time.time()}
        target = _status_file(self.path, self.worker)
        tmp = f"{target}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(status, f)
        os.replace(tmp, target)


# -- the server -----------------------------------------------------------------------

def daemon_status(path: str, workers: int, interval: float,
                  now: float | None = None) -> dict[str, Any]:
    """Every expected worker's last report, judged: alive (reported recently),
    ready (alive and every check ok)."""
    now = time.time() if now is None else now
    stale_after = 3 * interval + 15
    out = []
    for index in range(workers):
        try:
            with open(_status_file(path, index), encoding="utf-8") as f:
                status = json.load(f)
        except (OSError, ValueError):
            out.append({"worker": index, "alive": False, "ready": False,
                        "checks": {"process": "no report (starting, or not running)"}})
            continue
        age = now - float(status.get("reported_at", 0))
        status["age_s"] = round(age, 1)
        status["uptime_s"] = round(now - float(status.get("started_at", now)), 1)
        status["alive"] = age <= stale_after
        if not status["alive"]:
            status["ready"] = False
            status.setdefault("checks", {})["process"] = f"no report for {age:.0f} s"
        out.append(status)
    return {"ready": bool(out) and all(w["ready"] for w in out),
            "alive": bool(out) and all(w["alive"] for w in out),
            "workers": out}


class _Handler(BaseHTTPRequestHandler):
    server_version = "berth-scheduler"
    monitor: MonitoringServer

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                body, ctype = self.monitor.metrics_text()
                self._send(200, body, ctype)
            elif path in ("/healthz", "/readyz"):
                status = self.monitor.status()
                ok = status["alive" if path == "/healthz" else "ready"]
                body = (json.dumps(status, indent=2, sort_keys=True) + "\n").encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n",
                           "text/plain")
        except Exception:
            LOG.exception("Monitoring request %s failed", path)
            self._send(500, b"internal error\n", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        LOG.debug("monitoring: " + format, *args)


class MonitoringServer:
    """The HTTP server of one daemon, in a thread of its own."""

    def __init__(self, conf: cfg.ConfigOpts, path: str, workers: int) -> None:
        self.conf = conf
        self.path = path
        self.workers = workers
        handler = type("Handler", (_Handler,), {"monitor": self})
        address = (conf.metrics.bind_host, conf.metrics.port)
        try:
            self.httpd = ThreadingHTTPServer(address, handler)
        except OSError as e:
            from scheduler.exception import BerthError

            raise BerthError(f"cannot serve metrics on {address[0]}:{address[1]} "
                             f"([metrics] bind_host, port): {e.strerror or e}") from None
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.5},
                                        name="monitoring", daemon=True)
        self._thread.start()
        LOG.info("Metrics and health on http://%s:%d/ (/metrics, /healthz, /readyz)",
                 self.conf.metrics.bind_host, self.port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def status(self) -> dict[str, Any]:
        return daemon_status(self.path, self.workers, self.conf.metrics.status_interval)

    def metrics_text(self) -> tuple[bytes, str]:
        from prometheus_client import (
            CONTENT_TYPE_LATEST,
            CollectorRegistry,
            generate_latest,
            multiprocess,
        )

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.path)
        return generate_latest(registry), CONTENT_TYPE_LATEST


def start_server(conf: cfg.ConfigOpts, path: str | None, workers: int
                 ) -> MonitoringServer | None:
    """Start the monitoring port (None when metrics are off)."""
    if not path:
        return None
    server = MonitoringServer(conf, path, workers)
    server.start()
    return server
