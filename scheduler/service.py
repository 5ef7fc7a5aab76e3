"""The berth-scheduler daemon: RPC server, workers, signals.

One worker is one process: its own database engine, host-state cache,
FilterScheduler and broker connection, serving ``[scheduler] topic`` with the
eventlet or threading executor. The generation-guarded claims keep several
workers (and several scheduler hosts) consistent.

With ``[scheduler] workers`` > 1 the first process becomes a supervisor that
starts each worker as a fresh interpreter (fork + exec of this same command,
``BERTH_WORKER_INDEX`` set). Exec rather than a bare fork because a worker must
monkey-patch eventlet before it imports anything, and eventlet does not survive
a fork of a patched process with a live hub; it also means nothing (engine
pools, broker sockets) is ever shared by accident. The supervisor forwards
SIGTERM and SIGHUP, restarts a worker that dies, and exits 0 once every worker
has drained.

With ``[metrics] enabled`` the supervisor (or the only worker) serves
/metrics, /healthz and /readyz, and every worker reports its readiness to it
through files in a per-daemon directory (``scheduler.monitoring``).

Signals in a worker: SIGTERM/SIGINT stop taking messages, finish the requests
in flight (at most ``graceful_shutdown_timeout`` seconds), exit 0 (1 if the
drain timed out); SIGHUP re-reads the config files and applies the mutable
options (log levels).
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time

from oslo_config import cfg
from oslo_log import log as logging

from scheduler import broker, log_escape, monitoring, rpc
from scheduler.exception import BerthError

LOG = logging.getLogger(__name__)

WORKER_ENV = "BERTH_WORKER_INDEX"
BACKENDS = ("eventlet", "threading")

service_opts = [
    cfg.StrOpt("concurrency_backend",
               default="eventlet",
               choices=[("eventlet", "green threads; eventlet.monkey_patch() runs "
                                     "before anything else is imported"),
                        ("threading", "native threads; no monkey-patching")],
               help="How the daemon runs concurrent RPC requests. eventlet is the "
                    "default; upstream OpenStack is moving to threading, which is "
                    "fully supported. The size of the pool is [DEFAULT] "
                    "executor_thread_pool_size. Read before oslo is imported, so it "
                    "must be set in a config file, not changed by SIGHUP."),
]

worker_opts = [
    cfg.IntOpt("workers",
               default=1, min=1, max=64,
               help="Number of scheduler worker processes. Each has its own host-state "
                    "cache and database connections; claims stay consistent across "
                    "them. More than one makes the first process a supervisor."),
    cfg.IntOpt("graceful_shutdown_timeout",
               default=60, min=0,
               help="Seconds a worker waits, after SIGTERM, for the requests it is "
                    "handling to finish before it exits anyway (with status 1). "
                    "0 waits forever."),
    cfg.StrOpt("auto_db_sync",
               default="sqlite",
               choices=[("sqlite", "apply migrations at startup only when "
                                   "[database] connection is SQLite, i.e. the "
                                   "embedded quick start"),
                        ("always", "apply migrations at startup"),
                        ("never", "refuse to start unless 'berth-manage db sync' "
                                  "has been run")],
               help="Whether the daemon upgrades the database schema when it starts. "
                    "The default makes the embedded SQLite setup work with no edits; "
                    "a shared MySQL/MariaDB database is migrated by 'berth-manage db "
                    "sync' as a deployment step, and the daemon refuses to start on "
                    "an outdated schema."),
]

LIST_OPTS = [("DEFAULT", service_opts), ("scheduler", worker_opts)]

cfg.CONF.register_opts(service_opts)
cfg.CONF.register_opts(worker_opts, group="scheduler")


# -- database -----------------------------------------------------------------------

def prepare_database(conf: cfg.ConfigOpts = cfg.CONF) -> None:
    """Migrate the schema when allowed (``auto_db_sync``), else check it is current."""
    from db import migration
    from db.api import Database

    db = Database.from_conf(conf)
    try:
        mode = conf.scheduler.auto_db_sync
        if mode == "always" or (mode == "sqlite" and db.dialect == "sqlite"):
            before = migration.db_version(db)
            after = migration.db_sync(db)
            if before != after:
                LOG.info("Database schema upgraded from %s to %s", before, after)
            return
        current, head = migration.db_version(db), migration.head_revision()
        if current != head:
            raise SystemExit(f"berth-scheduler: the database schema is at {current or 'none'}, "
                             f"this release needs {head}: run 'berth-manage db sync'")
    finally:
        db.dispose()


# -- one worker ---------------------------------------------------------------------

class SchedulerService:
    """The RPC server of one worker and everything it serves from.

    ``transport`` may be given (an in-process transport shared with a client,
    as the demo does when no broker answers); otherwise ``[DEFAULT]
    transport_url`` is used and owned.
    """

    def __init__(self, conf: cfg.ConfigOpts = cfg.CONF, *, backend: str | None = None,
                 worker: int = 0, transport=None, scheduler=None, db=None) -> None:
        self.conf = conf
        self.backend = backend or conf.concurrency_backend
        self.worker = worker
        self._transport = transport
        self._own_transport = transport is None
        self._scheduler = scheduler
        self._host_manager = None       # set when this service builds its own scheduler
        self._db = db
        self.server = None
        self._servers: list = []
        self._served: list = []         # (topic, exchange, endpoint) served
        self._servers_lock = threading.Lock()
        self._retiring: list[threading.Thread] = []
        self.manager = None
        self.reaper = None
        self.routes: broker.RouteCheck | None = None
        self.admission = None           # scheduler.admission.Admission, once started

    @property
    def host_manager(self):
        """The HostManager of the scheduler this service built (None if given one)."""
        return self._host_manager

    @property
    def db(self):
        return self._db

    def start(self) -> None:
        from db.api import Database
        from scheduler.endpoints.topics import TopicEndpoint, UnknownMethods
        from scheduler.manager import SchedulerManager

        if self._db is None:
            self._db = Database.from_conf(self.conf)
        if self._scheduler is None:
            from db import node_changes
            from scheduler import reaper
            from scheduler.filter_scheduler import FilterScheduler
            from scheduler.host_manager import HostManager

            node_changes.write(reaper.journal_wanted(self.conf))
            self._host_manager = HostManager(self._db, self.conf)
            self._scheduler = FilterScheduler(self._host_manager, self.conf)
            if self.conf.scheduler.workers > 1:
                self._scheduler.partition = (self.worker, self.conf.scheduler.workers)
            self._preload()
        self.manager = SchedulerManager(self._db, self._scheduler, self.conf,
                                        backend=self.backend, worker=self.worker)
        if self._transport is None:
            self._transport = rpc.get_transport(self.conf)
        driver = getattr(self._transport, "_driver", None)
        if isinstance(driver, broker.BerthRabbitDriver):
            # pings are answered as soon as they are read, ahead of queued work
            driver.at_once["ping"] = lambda: self.manager.ping(None)
        topic, admin = self.conf.scheduler.topic, rpc.admin_topic(self.conf)
        if admin is None:
            self._served = [(topic, None, TopicEndpoint(self.manager, None, topic))]
        else:       # compute-API and admin calls on topics (and exchanges) of their own
            self._served = [
                (topic, None, TopicEndpoint(self.manager, rpc.COMPUTE_METHODS, topic)),
                (admin, broker.admin_exchange(self.conf),
                 TopicEndpoint(self.manager, rpc.ADMIN_METHODS, admin))]
        from scheduler.admission import Admission

        self.admission = Admission(self.conf)
        self._servers = self._new_servers(UnknownMethods)
        self.server = self._servers[0]
        for server in self._servers:
            server.start()
        self.routes = broker.RouteCheck(
            self.conf, self._transport,
            lambda: broker.routes(self.conf, [(t, e) for t, e, _ in self._served],
                                  self.conf.host),
            self._redeclare)
        self.routes.start()
        from scheduler.reaper import ClaimReaper

        self.reaper = ClaimReaper(self._db, self._scheduler, self.conf, self.worker)
        self.reaper.start()
        LOG.info("Scheduler worker %d (pid %d) serving topic %r%s as %r with the %s backend",
                 self.worker, os.getpid(), topic,
                 f" (admin calls on {admin!r})" if admin else "", self.conf.host,
                 self.backend)

    def _new_servers(self, unknown_methods) -> list:
        return [rpc.get_server(self._transport, t, self.conf.host,
                               [endpoint, unknown_methods()], self.backend, exchange=e,
                               admission=self.admission)
                for t, e, endpoint in self._served]

    def _redeclare(self) -> None:
        """Start new RPC servers, which declare their exchanges, queues and
        bindings again, then retire the old ones (their requests in flight finish;
        a queue both consume is never left without a consumer)."""
        from scheduler.endpoints.topics import UnknownMethods

        with self._servers_lock:
            if self.server is None:
                return                  # stopping
            new = self._new_servers(UnknownMethods)
            for server in new:
                server.start()
            old, self._servers = self._servers, new
            self.server = new[0]

        def retire() -> None:
            for server in old:
                server.stop()
            for server in old:
                server.wait()
        thread = threading.Thread(target=retire, name="retire-servers", daemon=True)
        thread.start()
        self._retiring = [t for t in self._retiring if t.is_alive()] + [thread]

    def _preload(self) -> None:
        """Load the host-state cache before taking requests, so that the first
        request does not wait for it (about 1 s at 10,000 hosts, 10 s at
        100,000). Then move the cache out of the cyclic garbage collector's
        way: it lives as long as the process, and a full collection walking it
        would stall every request (about 70 ms at 10,000 hosts, 400 ms at
        100,000). If the database cannot be read yet, the first request loads
        the cache instead."""
        t0 = time.monotonic()
        try:
            self._scheduler.warm_up()
        except Exception as e:
            LOG.warning("Scheduler worker %d could not load host states at start-up (%s); "
                        "the first request will try again", self.worker, e)
            return
        gc.collect()
        gc.freeze()
        LOG.info("Scheduler worker %d loaded %d hosts in %.2f s", self.worker,
                 self._host_manager.columns.n, time.monotonic() - t0)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop taking messages and wait for the ones in flight.

        Returns False when they did not finish within ``timeout`` seconds
        (None or 0: wait as long as they take).
        """
        if self.server is None:
            return True
        LOG.info("Scheduler worker %d stopping: no new requests, draining those in flight",
                 self.worker)
        if self.routes is not None:
            self.routes.stop()
        with self._servers_lock:
            servers = self._servers or [self.server]
            self.server = None          # no re-declaration from now on
        for server in servers:
            cancel_consumers(server)
            server.stop()
        if self.reaper is not None:
            self.reaper.stop()
            self.reaper = None

        def wait_all() -> None:
            for server in servers:
                server.wait()
            for thread in self._retiring:
                thread.join()
        waiter = threading.Thread(target=wait_all, name="drain", daemon=True)
        waiter.start()
        waiter.join(timeout or None)
        drained = not waiter.is_alive()
        if drained:
            LOG.info("Scheduler worker %d drained", self.worker)
            if self._own_transport:
                self._transport.cleanup()
            if self._host_manager is not None:
                self._host_manager.close()
            if self._db is not None:
                self._db.dispose()
        else:
            LOG.error("Scheduler worker %d: requests still running after %ss; exiting "
                      "anyway (each claim is one transaction: none is half-written)",
                      self.worker, timeout)
        self.server = None
        self._servers = []
        return drained


def cancel_consumers(server, wait: float = 5.0) -> bool:
    """Tell the broker this server takes no more messages (AMQP basic.cancel on
    each of its consumers), before it drains.

    oslo.messaging's ``stop`` only stops reading: its consumers stay
    registered until the drain is over and the connection closes, so the
    broker goes on handing them their share of the queue (unlimited prefetch),
    and those messages wait, unread, until then — the callers time out
    although other workers serve the topic. Cancelled, the broker gives new
    messages to the other consumers at once; the messages it delivered before
    the cancel are read while it is answered and handled in the drain like
    those in flight. The cancel runs in the server's own polling thread (the
    only one that may use its connection), at its next read: within a second.
    False when it was not done (another driver: its own stop is all there is;
    a connection being re-established)."""
    listener = getattr(getattr(server, "listener", None), "_poll_style_listener", None)
    conn = getattr(listener, "conn", None)
    consumers = getattr(conn, "_consumers", None)
    if not consumers or not callable(getattr(conn, "consume", None)):
        return False
    done = threading.Event()
    read = conn.consume

    def cancel_then_read(*args, **kwargs):
        if not done.is_set():
            for consumer, tag in list(consumers.items()):
                try:
                    consumer.cancel(tag)
                except Exception as e:      # the connection is gone: nothing comes
                    LOG.debug("Cancelling consumer %s: %s", tag, e)
            done.set()
        return read(*args, **kwargs)

    conn.consume = cancel_then_read
    if not done.wait(wait):
        LOG.warning("The broker consumers were not cancelled within %.0f s; draining "
                    "with them (messages the broker hands them wait for the drain)", wait)
        return False
    return True


class _Signals:
    """Flags set by signal handlers and polled by the main loop.

    Handlers only set flags: under eventlet they run inside the hub, where
    nothing may block or switch.
    """

    def __init__(self) -> None:
        self.stop = False
        self.reload = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)

    def _on_stop(self, signum, frame) -> None:
        self.stop = True

    def _on_reload(self, signum, frame) -> None:
        self.reload = True


def reload_config(conf: cfg.ConfigOpts = cfg.CONF) -> None:
    """Re-read the config files and apply the mutable options (oslo.log's levels)."""
    try:
        conf.mutate_config_files()
        log_escape.install()            # on the handlers the reload may have made
        LOG.info("Configuration reloaded")
    except Exception:
        LOG.exception("Reloading the configuration failed; keeping the old values")


def run_worker(conf: cfg.ConfigOpts = cfg.CONF, worker: int = 0,
               supervisor_pid: int | None = None) -> int:
    """Serve until SIGTERM; returns the exit status."""
    signals = _Signals()
    signals.install()
    service = SchedulerService(conf, worker=worker)
    path = os.environ.get(monitoring.MULTIPROC_ENV) if conf.metrics.enabled else None
    reporter = server = None
    if path:
        reporter = monitoring.WorkerReporter(conf, path, worker, service)
        reporter.start()
        if supervisor_pid is None:      # the only worker serves the monitoring port
            server = monitoring.start_server(conf, path, workers=1)
    if _wait_for_broker(conf, signals):
        service.start()
    while not signals.stop:
        time.sleep(0.1)
        if signals.reload:
            signals.reload = False
            reload_config(conf)
        if supervisor_pid is not None and os.getppid() != supervisor_pid:
            LOG.error("Supervisor %d is gone; worker %d shutting down", supervisor_pid, worker)
            break
    if reporter is not None:
        reporter.stop()                 # not ready while draining
    drained = service.stop(conf.scheduler.graceful_shutdown_timeout)
    if reporter is not None:
        reporter.remove()
    if server is not None:
        server.stop()
    return 0 if drained else 1


def _wait_for_broker(conf: cfg.ConfigOpts, signals: _Signals) -> bool:
    """Wait until a broker of ``[DEFAULT] transport_url`` accepts connections, so
    that the driver's own retries (which nothing interrupts) start only once it
    does; True then, False when SIGTERM or SIGINT came first."""
    addresses = rpc.broker_addresses(conf)
    delay, logged = 1.0, False
    while not signals.stop:
        state = monitoring.check_broker(addresses)
        if state == "ok":
            if logged:
                LOG.info("The message broker answers")
            return True
        if not logged:
            LOG.warning("The message broker is %s; waiting for it (SIGTERM stops the "
                        "daemon)", state)
            logged = True
        deadline = time.monotonic() + delay
        while not signals.stop and time.monotonic() < deadline:
            time.sleep(0.1)
        delay = min(delay * 2, 30.0)
    return False


# -- several workers ----------------------------------------------------------------

class Supervisor:
    """Starts ``workers`` worker processes and keeps them running until SIGTERM."""

    RESTART_DELAY = 1.0
    MAX_QUICK_DEATHS = 3   # a worker dying this often within QUICK seconds of start
    QUICK = 5.0

    def __init__(self, conf: cfg.ConfigOpts, argv: list[str],
                 metrics_dir: str | None = None) -> None:
        self.conf = conf
        self.argv = argv
        self.children: dict[int, tuple[subprocess.Popen, float]] = {}
        self.quick_deaths = 0
        self.metrics_dir = metrics_dir

    def _spawn(self, index: int) -> None:
        env = dict(os.environ, **{WORKER_ENV: str(index),
                                  "BERTH_SUPERVISOR_PID": str(os.getpid())})
        cmd = [sys.executable, "-m", "scheduler.cmd.scheduler", *self.argv]
        proc = subprocess.Popen(cmd, env=env)
        self.children[index] = (proc, time.monotonic())
        LOG.info("Started scheduler worker %d (pid %d)", index, proc.pid)

    def _signal_all(self, signum: int) -> None:
        for proc, _ in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    def run(self) -> int:
        signals = _Signals()
        signals.install()
        server = monitoring.start_server(self.conf, self.metrics_dir,
                                         self.conf.scheduler.workers)
        try:
            return self._run(signals)
        finally:
            if server is not None:
                server.stop()

    def _run(self, signals: _Signals) -> int:
        for i in range(self.conf.scheduler.workers):
            self._spawn(i)
        status = 0
        while self.children:
            time.sleep(0.1)
            if signals.reload:
                signals.reload = False
                reload_config(self.conf)
                self._signal_all(signal.SIGHUP)
            if signals.stop:
                return self._shutdown()
            for index, (proc, started) in list(self.children.items()):
                code = proc.poll()
                if code is None:
                    continue
                del self.children[index]
                monitoring.worker_gone(self.metrics_dir, index, proc.pid)
                quick = time.monotonic() - started < self.QUICK
                self.quick_deaths = self.quick_deaths + 1 if quick else 0
                if self.quick_deaths >= self.MAX_QUICK_DEATHS:
                    LOG.error("Scheduler workers keep dying at startup (last status %s); "
                              "giving up", code)
                    self._signal_all(signal.SIGTERM)
                    self._shutdown()
                    return 1
                LOG.error("Scheduler worker %d (pid %d) exited with status %s; restarting",
                          index, proc.pid, code)
                time.sleep(self.RESTART_DELAY)
                self._spawn(index)
        return status

    def _shutdown(self) -> int:
        """Forward SIGTERM, wait for every worker to drain; 0 if all exited 0."""
        LOG.info("Stopping %d scheduler workers", len(self.children))
        self._signal_all(signal.SIGTERM)
        grace = self.conf.scheduler.graceful_shutdown_timeout
        deadline = time.monotonic() + grace + 10 if grace else None
        status = 0
        for proc, _ in self.children.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                code = proc.wait(left)
            except subprocess.TimeoutExpired:
                LOG.error("Scheduler worker pid %d did not stop; killing it", proc.pid)
                proc.kill()
                code = proc.wait()
            status = status or (1 if code else 0)
        self.children.clear()
        return status


# -- entry point --------------------------------------------------------------------

def setup(argv: list[str]) -> None:
    """Parse the command line and config files into ``cfg.CONF``; start logging."""
    logging.register_options(cfg.CONF)
    # Startup chatter of alembic and py-amqp's closing-channel notices are not
    # actionable for an operator; their warnings and errors still show.
    logging.set_defaults(default_log_levels=logging.get_default_log_levels()
                         + ["alembic=WARN", "amqp=ERROR"])
    cfg.CONF(argv, project="berth", prog="berth-scheduler")
    logging.setup(cfg.CONF, "berth")
    log_escape.install()


def main(argv: list[str], early_backend: str) -> int:
    """Run the daemon; ``early_backend`` is what the entry point patched for."""
    setup(argv)
    conf = cfg.CONF
    if conf.concurrency_backend != early_backend:
        LOG.error("concurrency_backend is %r in the parsed configuration but %r was "
                  "read before start-up; set it in a --config-file, not elsewhere",
                  conf.concurrency_backend, early_backend)
        return 2
    index = os.environ.get(WORKER_ENV)
    if index is not None:
        parent = os.environ.get("BERTH_SUPERVISOR_PID")
        try:
            return run_worker(conf, int(index), int(parent) if parent else None)
        except BerthError as e:
            LOG.error("berth-scheduler worker %s cannot start: %s", index, e)
            return 2
    if early_backend == "eventlet":
        LOG.info("Using the eventlet backend (upstream oslo.messaging deprecates it; "
                 "concurrency_backend = threading is the supported alternative)")
    metrics_dir = monitoring.prepare(conf)
    try:
        prepare_database(conf)
        # A TLS handshake the broker refuses is a configuration error: said in
        # one line now, not retried for ever by the driver.
        rpc.check_broker_tls(conf)
        if conf.scheduler.workers == 1:
            return run_worker(conf)
        return Supervisor(conf, argv, metrics_dir).run()
    except BerthError as e:  # a configuration the scheduler cannot run with
        LOG.error("berth-scheduler cannot start: %s", e)
        return 2
    finally:
        monitoring.cleanup(metrics_dir, conf)
