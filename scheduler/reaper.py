"""The claim reaper: releases pending claims nobody confirmed in time, and ends
the moves nobody ended (``scheduler.moves``: reverted after ``move_ttl``;
an evacuation's source released once its host is heard from again), and forgets
the transitions older than ``transition_ttl`` (``db.transitions``) and the node
changes older than ``node_change_ttl`` (``db.node_changes``).

A claim made for a caller that confirms (``select_destinations(pending=True)``,
what the client library does by default) stays *pending* until ``confirm``.
One whose reply was lost (broker outage, client killed, worker killed after the
commit) is never confirmed; nor are the claims a failed request of several
instances could not give back (the database went away during its undo). The
reaper releases every pending claim older than ``[scheduler] claim_ttl``, with a
WARNING line per instance and ``berth_claims_reaped_total``.

One reaper acts per deployment, whatever the number of workers and daemons:
each worker tries to take the ``claim-reaper`` lease in the database every
``reaper_interval`` seconds; the holder renews it and reaps, the others wait
until it expires (three intervals after its holder stopped renewing it).
"""
from __future__ import annotations

import datetime
import os
import socket
import threading
import time
import uuid as uuidlib

from oslo_config import cfg
from oslo_log import log as logging

from db import claims, leases, node_changes, transitions
from db.models import utcnow
from scheduler import metrics

LOG = logging.getLogger(__name__)

LEASE = "claim-reaper"
BATCH = 500         # pending claims released per round at most (the next round goes on)
CHANGE_BATCH, CHANGE_BATCHES = 1000, 200    # node changes deleted per statement, per round

reaper_opts = [
    cfg.IntOpt("claim_ttl", default=300, min=0,
               help="Seconds a pending claim (one the caller has not confirmed yet) is "
                    "held before the reaper releases it. Keep it well above "
                    "request_timeout and the callers' confirm delay. 0: never release "
                    "pending claims (no reaper)."),
    cfg.IntOpt("transition_ttl", default=3600, min=0,
               help="Seconds a release, a reschedule or the end of a move is "
                    "remembered after it was done (the transitions table), so that "
                    "the same call sent again — its answer lost, retried by the "
                    "database layer or re-sent by the client, to any worker of any "
                    "daemon — answers what was done (release: true) instead of "
                    "\"held nothing\". Keep it above the longest time a client may "
                    "re-send a call. The reaper deletes older ones; 0: never deleted."),
    cfg.StrOpt("node_change_journal", default="auto", choices=[
        ("auto", "written when [scheduler] workers > 1"),
        ("on", "always written (several daemons share the database)"),
        ("off", "never written")],
               help="Whether this daemon's claims and releases are written to the node "
                    "change journal, from which the other workers' and daemons' caches "
                    "take them instead of re-reading the node (one more row per claim "
                    "and per release, about 0.3 ms of CPU per placement, read by nobody "
                    "when one worker is alone on its database). Set it on when several "
                    "daemons share one database (scheduler hosts, Galera). A cache "
                    "that finds no row re-reads the node: any setting is correct."),
    cfg.IntOpt("node_change_ttl", default=120, min=1,
               help="Seconds each claim and release is kept in the node change "
                    "journal, from which the other schedulers' caches take it instead "
                    "of re-reading the node (one row per claim and per release). A "
                    "cache that did not refresh for longer re-reads the nodes changed "
                    "meanwhile. The claim reaper deletes older rows every "
                    "reaper_interval."),
    cfg.FloatOpt("reaper_interval", default=30.0, min=0.1,
                 help="Seconds between two rounds of the claim reaper (and between "
                      "two tries of a worker to become the deployment's reaper; the "
                      "lease lasts three intervals)."),
]
cfg.CONF.register_opts(reaper_opts, group="scheduler")
LIST_OPTS = [("scheduler", reaper_opts)]


def holder_name(worker: int = 0) -> str:
    """Who holds the lease: host, pid, worker and a random part (a restarted
    process with a reused pid is someone else)."""
    return f"{socket.gethostname()}:{os.getpid()}:w{worker}:{uuidlib.uuid4().hex[:8]}"



def journal_wanted(conf: cfg.ConfigOpts) -> bool:
    """``[scheduler] node_change_journal`` for this daemon."""
    mode = conf.scheduler.node_change_journal
    return mode == "on" or (mode == "auto" and conf.scheduler.workers > 1)

class ClaimReaper:
    """One worker's candidate reaper; ``run_once`` is one round, ``start`` runs
    rounds in a thread (a green thread under eventlet)."""

    def __init__(self, db, scheduler, conf: cfg.ConfigOpts = cfg.CONF,
                 worker: int = 0) -> None:
        self.db = db
        self.scheduler = scheduler
        self.conf = conf
        self.holder = holder_name(worker)
        self.leader = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ttl(self) -> int:
        return self.conf.scheduler.claim_ttl

    def run_once(self, now: datetime.datetime | None = None) -> int:
        """Take or renew the lease, then release the expired pending claims and
        forget the transitions older than ``transition_ttl``; returns how many
        claims were released (0 when another process is the reaper)."""
        now = now or utcnow()
        if self.ttl <= 0:       # no reaper: each worker only forgets old transitions
            self._forget(now)
            return 0
        interval = self.conf.scheduler.reaper_interval
        was_leader = self.leader
        self.leader = leases.acquire(self.db, LEASE, self.holder, 3 * interval, now=now)
        if self.leader != was_leader:
            LOG.info("Claim reaper %s: %s", self.holder,
                     "this worker reaps now" if self.leader else "another worker reaps now")
        if not self.leader:
            metrics.set_pending_claims(0)
            metrics.set_preempted_unreleased(0)
            return 0
        self._forget(now)
        cutoff = now - datetime.timedelta(seconds=self.ttl)
        released = 0
        for instance_uuid in claims.pending_before(self.db, cutoff, BATCH):
            if self.scheduler.release(instance_uuid, pending_before=cutoff):
                released += 1
                metrics.count_claim_reaped()
        metrics.set_pending_claims(claims.pending_count(self.db))
        from db import preemption

        metrics.set_preempted_unreleased(preemption.preempted_count(self.db))
        return released + self._moves().reap(now)

    def _forget(self, now: datetime.datetime) -> None:
        """Delete the transitions older than ``transition_ttl`` (0: keep them)
        and the node changes older than ``node_change_ttl``."""
        ttl = self.conf.scheduler.transition_ttl
        if ttl > 0:
            transitions.purge(self.db, now - datetime.timedelta(seconds=ttl), BATCH)
        before = now - datetime.timedelta(seconds=self.conf.scheduler.node_change_ttl)
        for _ in range(CHANGE_BATCHES):     # one per claim and release: many per round
            if node_changes.purge(self.db, before, CHANGE_BATCH) < CHANGE_BATCH:
                break

    def _moves(self):
        from scheduler.moves import Mover

        mover = getattr(self, "_mover", None)
        if mover is None:
            mover = self._mover = Mover(self.scheduler)
        return mover

    def start(self) -> None:
        if self.ttl <= 0:
            LOG.info("Claim reaper off ([scheduler] claim_ttl = 0): pending claims are "
                     "kept until confirmed or released")
        self._thread = threading.Thread(target=self._run, name="claim-reaper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failing_since: float | None = None
        while not self._stop.wait(self.conf.scheduler.reaper_interval):
            try:
                self.run_once()
            except Exception as e:      # the database away: try again next round
                self.leader = False
                if failing_since is None:   # one WARNING per outage, not per round
                    failing_since = time.monotonic()
                    LOG.warning("Claim reaper round failed (%s: %s); trying again every "
                                "%g s", type(e).__name__,
                                str(e).splitlines()[0][:200] if str(e) else "",
                                self.conf.scheduler.reaper_interval)
                else:
                    LOG.debug("Claim reaper round failed again: %s", type(e).__name__)
                continue
            if failing_since is not None:
                LOG.info("Claim reaper rounds work again after %.1f s",
                         time.monotonic() - failing_since)
                failing_since = None

    def stop(self) -> None:
        """Stop the rounds; a leader gives the lease up so another takes over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.leader:
            try:
                leases.give_up(self.db, LEASE, self.holder)
            except Exception:
                pass        # it expires on its own
            self.leader = False
