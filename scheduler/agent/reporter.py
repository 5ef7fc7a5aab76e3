"""The agent's loop: full reports, heartbeats in between, back-off while away.

Every ``[agent] report_interval`` seconds the host is discovered again and
sent whole (``report_compute_node`` then ``report_pci_devices``); every
``heartbeat_interval`` seconds in between a ``heartbeat`` keeps the host "up"
for ``service_down_time``. When the broker or the daemon does not answer, the
agent waits ``backoff_initial`` seconds, doubling up to ``backoff_max`` (with
jitter so a fleet does not return in step), and the first thing it sends when
they are back is a full report: nothing that changed meanwhile is lost.

A report Berth refuses (``InvalidRequest``, ``Conflict``) is not a transport
problem: it is logged as an error and tried again at the next interval, while
heartbeats go on; when only the node is refused (``Conflict``) the PCI devices
are still sent.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from oslo_config import cfg
from oslo_log import log as logging

from scheduler import exception
from scheduler.agent.host import HostReport

LOG = logging.getLogger(__name__)

reporter_opts = [
    cfg.IntOpt("report_interval", default=60, min=1,
               help="Seconds between full reports of the host (capacity, NUMA "
                    "topology, PCI devices)."),
    cfg.IntOpt("heartbeat_interval", default=10, min=1,
               help="Seconds between heartbeats. Keep it well below the scheduler's "
                    "service_down_time."),
    cfg.FloatOpt("rpc_timeout", default=10.0, min=0.1,
                 help="Seconds to wait for the scheduler to answer one report or "
                      "heartbeat before backing off."),
    cfg.FloatOpt("backoff_initial", default=1.0, min=0.01,
                 help="Seconds to wait after the first failed call; doubled after each "
                      "further failure."),
    cfg.FloatOpt("backoff_max", default=60.0, min=0.01,
                 help="Longest wait between attempts while the broker or the scheduler "
                      "is away."),
]

cfg.CONF.register_opts(reporter_opts, group="agent")

LIST_OPTS = [("agent", reporter_opts)]


def backoff_delay(failures: int, initial: float, maximum: float) -> float:
    """Seconds to wait after ``failures`` consecutive failures (before jitter)."""
    return min(maximum, initial * 2 ** max(0, failures - 1))


class Reporter:
    """Sends one host's reports and heartbeats through ``api`` (a ``SchedulerAPI``).

    ``discover`` returns a fresh :class:`HostReport` (it may raise
    ``InvalidRequest`` for a bad configuration or an unreadable kernel file).
    ``probe`` runs before each full report and raises when the broker does not
    accept connections: oslo.messaging would otherwise wait forever for a reply
    queue it cannot declare, instead of letting the loop back off.
    """

    def __init__(self, api, discover: Callable[[], HostReport],
                 conf: cfg.ConfigOpts = cfg.CONF, clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] | None = None,
                 probe: Callable[[], None] | None = None) -> None:
        self.api = api
        self.discover = discover
        self.probe = probe
        self.conf = conf
        self.clock = clock
        self.jitter = jitter or (lambda: random.uniform(0.5, 1.0))
        self.failures = 0
        self.reports = 0          # full reports accepted
        self.heartbeats = 0       # heartbeats accepted
        self.last_error: str | None = None
        self._accepted = False    # the last report was accepted
        self._host: str | None = None

    # -- one step each ----------------------------------------------------------------
    def report(self) -> dict:
        """Discover and send one full report; returns the daemon's replies."""
        report = self.discover()
        if self.probe is not None:
            self.probe()
        for warning in report.warnings:
            LOG.warning("%s", warning)
        self._host = report.host
        try:
            node = self.api.report_compute_node(None, report.node)
        except exception.Conflict:
            # The node's change is refused (e.g. CPUs gone under pinned guests);
            # its devices are still the truth and are sent on their own.
            self.api.report_pci_devices(None, report.node_name, report.pci_devices)
            raise
        devices = self.api.report_pci_devices(None, report.node_name, report.pci_devices)
        for warning in list(node.get("warnings") or []) + list(devices.get("warnings") or []):
            LOG.warning("Berth: host %s: %s", report.host, warning)
        if node.get("disabled"):
            LOG.warning("Host %s is disabled in Berth: %s", report.host,
                        node.get("disabled_reason") or "no reason given")
        LOG.info("Reported host %s: %d vCPUs, %d MB, %d GB, %d NUMA cell(s), "
                 "%d PCI device(s), %d trait(s), %d child provider(s) (generation %s)",
                 report.host, report.node["vcpus"], report.node["memory_mb"],
                 report.node["local_gb"],
                 len((report.node.get("numa_topology") or {}).get("cells", [])),
                 len(report.pci_devices), len(report.node.get("traits") or ()),
                 len(report.node.get("providers") or ()), node.get("generation"))
        return {"node": node, "pci": devices}

    def heartbeat(self) -> None:
        self.api.heartbeat(None, self._host)

    # -- the loop ---------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Report and heartbeat until ``stop`` is set."""
        conf = self.conf.agent
        next_report = self.clock()
        next_beat = float("inf")
        while not stop.is_set():
            now = self.clock()
            try:
                if now >= next_report:
                    try:
                        self.report()
                    except exception.BerthError as e:
                        # Refused (bad config, a change Berth will not accept):
                        # not a transport problem; heartbeats go on.
                        self._accepted = False
                        self.last_error = e.message
                        LOG.error("Report refused: %s", e.message)
                    else:
                        self._accepted = True
                        self.reports += 1
                        self.last_error = None
                    if self.failures:
                        LOG.info("Scheduler reachable again after %d failed attempt(s)",
                                 self.failures)
                    self.failures = 0
                    next_report = now + conf.report_interval
                    next_beat = now + conf.heartbeat_interval if self._host else float("inf")
                elif now >= next_beat:
                    try:
                        self.heartbeat()
                        self.heartbeats += 1
                    except exception.NotFound:
                        # Berth lost the host (deleted, new database): report it again.
                        LOG.warning("Berth does not know host %s; reporting it again",
                                    self._host)
                        if self._accepted:
                            next_report = now
                    next_beat = now + conf.heartbeat_interval
            except Exception as e:  # the broker or the daemon is away
                self.failures += 1
                delay = backoff_delay(self.failures, conf.backoff_initial,
                                      conf.backoff_max) * self.jitter()
                self.last_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                LOG.warning("Scheduler unreachable (%s); attempt %d, next full report in "
                            "%.1fs", self.last_error, self.failures, delay)
                next_report = self.clock() + delay
                next_beat = float("inf")
            wait = min(next_report, next_beat) - self.clock()
            if wait > 0:
                stop.wait(wait)
