"""Confirms sent in the background: the client library's ``confirm="auto"``.

A placement made pending (``select_destinations(pending=True)``) is held until
its caller confirms it, or released by the daemon's reaper after ``[scheduler]
claim_ttl``: a reply that never reached the caller costs nothing for long. The
confirm itself need not delay the caller. ``BackgroundConfirmer`` takes the
instances of each request as soon as their reply arrives and confirms them from
a thread of its own, several requests in one call, while the caller goes on:

* Riding: once the oldest queued request is ``[scheduler]
  confirm_batch_delay`` seconds old, the caller's next ``select_destinations``
  (RPC API 1.4, same caller) carries the queue (``take``): the daemon confirms
  them before it places, and its reply says how that went (``ridden``). A busy
  client thus sends no confirm call of its own, and confirms several
  placements at a time; a select that fails hands them back (``put_back``),
  and a reply that names an instance ``unknown`` hands them back too, for the
  thread to sort out as below.
* Batching: what no select carried within twice ``confirm_batch_delay`` is
  confirmed by the thread, the oldest request's caller's requests in one call
  (up to ``MAX_BATCH`` instances). ``confirm`` is all or none over
  the instances it names, so when a batch answers ``unknown`` (an instance
  released meanwhile), the requests of that batch that hold all their
  instances are confirmed again, each in a call of its own; a request of
  several instances still stands or falls as a whole.
* Retries: a confirm that gets no answer (timeout, broker down, the scheduler
  busy or without its database) is sent again with a growing pause, until it
  is answered or the request's claim is near its end: ``claim_ttl`` after the
  select was first sent, less ``[scheduler] confirm_margin``.
* Released: an instance its caller releases (``SchedulerAPI.release``) before
  its confirm is not confirmed; the rest of its request is.
* Lost: a request whose confirm answered ``unknown`` for one of its instances,
  or that could not be confirmed before its deadline, is *lost*: the confirmer
  releases its instances (idempotent; what cannot be released now is released
  by the reaper once ``claim_ttl`` is over, since a claim that was never
  confirmed stays pending), logs an ERROR naming them, calls the caller's
  ``on_claim_lost(instance_uuids, reason)`` and raises ``ClaimExpired`` from
  ``wait_confirmed``. The caller must not build, or must delete, those
  instances: they hold no allocation.

The state of each instance is kept here until ``wait_confirmed`` has read it or
``KEEP_SETTLED`` later requests were settled. ``close`` sends what is queued
before it returns (up to ``[scheduler] confirm_flush_timeout`` seconds): a
process that exits without closing its client leaves the claims it had not
confirmed to the reaper.
"""
from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import oslo_messaging
from oslo_config import cfg
from oslo_log import log as logging

from scheduler import exception

LOG = logging.getLogger(__name__)

MAX_BATCH = 1000        # instances per confirm call (the endpoint's limit)
KEEP_SETTLED = 10000    # settled requests remembered for wait_confirmed

confirmer_opts = [
    cfg.FloatOpt("confirm_batch_delay", default=0.25, min=0.0,
                 help="Seconds a placement made with confirm=\"auto\" waits for its "
                      "confirm: once this old, the next select_destinations of the "
                      "same caller carries it and every other one queued (RPC API "
                      "1.4); once twice this old, the client library's background "
                      "confirmer sends them in a confirm call of their own. Longer: "
                      "fewer confirms, each of more placements; claims pending a "
                      "little longer (wait_confirmed and closing the client do not "
                      "wait for it)."),
    cfg.FloatOpt("confirm_margin", default=30.0, min=0.0,
                 help="Seconds before a pending claim's end ([scheduler] claim_ttl "
                      "after its select was sent) at which the background confirmer "
                      "stops sending its confirm again and gives the claim back: the "
                      "request is then lost (logged as an ERROR, on_claim_lost called, "
                      "ClaimExpired from wait_confirmed) instead of being built "
                      "without an allocation."),
    cfg.FloatOpt("confirm_flush_timeout", default=30.0, min=0.0,
                 help="Seconds closing a client waits for its queued confirms to be "
                      "answered; what is still unanswered then is released by the "
                      "scheduler's reaper after claim_ttl."),
]
cfg.CONF.register_opts(confirmer_opts, group="scheduler")
LIST_OPTS = [("scheduler", confirmer_opts)]

#: Answers after which a confirm is sent again: nothing was confirmed, or
#: its answer was lost; the call is idempotent.
_AGAIN = (oslo_messaging.MessagingTimeout, oslo_messaging.MessageDeliveryFailure,
          exception.ServiceUnavailable)

CONFIRMED = "confirmed"
PENDING = "pending"
LOST = "lost"
RELEASED = "released"       # by the caller before its confirm: nothing to confirm


@dataclass(slots=True)
class _Request:
    """The instances of one placement request, confirmed all or none.

    Made for every placement on the caller's thread: its deadline is worked
    out when a batch needs it; its caller is who the select's context was
    when the reply came (a context object used again may have changed)."""

    uuids: tuple[str, ...]
    sent_at: float                      # time.monotonic() when its select was first sent
    ctxt: object = None                 # the select's request context
    queued_at: float = 0.0              # time.monotonic() when its reply arrived
    state: str = PENDING
    reason: str = ""
    released: set[str] = field(default_factory=set)     # by the caller meanwhile
    caller: tuple | None = None         # who ``ctxt`` was (``_caller``) when queued

    def to_confirm(self) -> list[str]:
        return [u for u in self.uuids if u not in self.released]

    def who(self) -> tuple:
        """Who placed it (``_caller`` of its context)."""
        if self.caller is None:
            self.caller = _caller(self.ctxt)
        return self.caller

    def placed_by(self, ctxt, caller: Callable[[], tuple]) -> bool:
        """Whether ``ctxt``'s caller made this request (confirms are batched per
        caller: a batch is sent with one context); ``caller()``: who ``ctxt`` is
        now (the same object may stand for someone else by now)."""
        return self.who() == caller()


def _caller(ctxt) -> tuple:
    """Who a request context is, as the policy sees it."""
    from scheduler.policy import frozen

    values = ctxt.to_policy_values() if hasattr(ctxt, "to_policy_values") else {}
    return frozen(dict(values))


def _who(ctxt) -> Callable[[], tuple]:
    """``_caller(ctxt)``, worked out on the first call only."""
    known: list[tuple] = []

    def caller() -> tuple:
        if not known:
            known.append(_caller(ctxt))
        return known[0]
    return caller


class BackgroundConfirmer:
    """Confirms placements for ``api`` (a ``SchedulerAPI``) from a thread."""

    def __init__(self, api, conf: cfg.ConfigOpts = cfg.CONF,
                 on_claim_lost: Callable[[list[str], str], None] | None = None) -> None:
        self.api = api
        self.conf = conf
        self.on_claim_lost = on_claim_lost
        self._lock = threading.Condition()
        self._queue: collections.deque[_Request] = collections.deque()
        self._by_uuid: dict[str, _Request] = {}
        self._settled: collections.deque[_Request] = collections.deque()
        self._sending: list[_Request] = []      # the batch being sent
        self._riding: list[_Request] = []       # carried by selects in flight
        self._thread: threading.Thread | None = None
        self._closing = False
        self.calls = 0                  # confirm calls sent (tests, benchmarks)
        # claim_ttl is the daemon's option (scheduler.reaper); a client that
        # shares the daemon's configuration must read the same value
        from scheduler import reaper  # noqa: F401 - registers claim_ttl

    def _option(self, name: str, default: float) -> float:
        try:
            return getattr(self.conf.scheduler, name)
        except (cfg.NoSuchOptError, AttributeError):
            return default

    # -- the caller's side ----------------------------------------------------------
    def add(self, instance_uuids: Sequence[str], sent_at: float, ctxt=None) -> None:
        """Confirm these instances (one request) in the background, as the
        caller of ``ctxt`` (the select's context: the policy decides what it
        may confirm); ``sent_at``: ``time.monotonic()`` when their select was
        first sent."""
        if not instance_uuids:
            return
        request = _Request(tuple(instance_uuids), sent_at, ctxt, time.monotonic(),
                           caller=_caller(ctxt))
        with self._lock:
            self._closing = False       # used again after close(): serve again
            for uuid in request.uuids:
                self._by_uuid[uuid] = request
            # the thread waits for the oldest request's time, which a newer one
            # does not change: wake it only to tell it the queue has one
            wake = not self._queue
            self._queue.append(request)
            self._start()
            if wake:
                self._lock.notify_all()

    def forget(self, instance_uuid: str) -> None:
        """The caller releases this instance: do not confirm it (the rest of
        its request is confirmed as before). Every request still pending that
        names it is told: a select sent again is a second request for the same
        instance, and the first one's confirm must not take the release for a
        lost claim."""
        emptied = []
        with self._lock:
            for request in [*self._queue, *self._sending, *self._riding]:
                if request.state != PENDING or instance_uuid not in request.uuids:
                    continue
                request.released.add(instance_uuid)
                if not request.to_confirm() and request in self._queue:
                    self._queue.remove(request)
                    emptied.append(request)
        for request in emptied:
            self._settle(request, RELEASED)

    def state(self, instance_uuid: str) -> str | None:
        """``confirmed``, ``pending``, ``lost``, ``released`` (by the caller
        before its confirm), or None (not confirmed here)."""
        with self._lock:
            request = self._by_uuid.get(instance_uuid)
            return request.state if request else None

    def wait_confirmed(self, instance_uuids: Sequence[str],
                       timeout: float | None = None) -> None:
        """Return once these instances are confirmed (or released by the
        caller); ``ClaimExpired`` when their request was lost,
        ``MessagingTimeout`` when still unanswered after ``timeout`` seconds.
        Instances this confirmer never saw are taken as confirmed
        (``confirm="none"`` or ``"sync"``)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._waiters += 1          # someone waits: the thread does not linger
            self._lock.notify_all()
        try:
            for uuid in instance_uuids:
                with self._lock:
                    request = self._by_uuid.get(uuid)
                    while request is not None and request.state == PENDING:
                        left = None if end is None else end - time.monotonic()
                        if left is not None and left <= 0:
                            raise oslo_messaging.MessagingTimeout(
                                f"the confirm of {uuid} is not answered yet")
                        self._lock.wait(left)       # _settle wakes the waiters
                if request is not None and request.state == LOST:
                    raise exception.ClaimExpired(instance_uuids=list(request.uuids))
        finally:
            with self._lock:
                self._waiters -= 1

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is queued or being sent; whether it got there."""
        end = time.monotonic() + timeout
        with self._lock:
            self._hurry = True
            self._lock.notify_all()
            while self._queue or self._busy or self._riding:
                left = end - time.monotonic()
                if left <= 0:
                    self._hurry = False
                    return False
                self._lock.wait(left)
            self._hurry = False
        return True

    def close(self) -> None:
        """Send what is queued (``confirm_flush_timeout``), then stop."""
        if not self.flush(self._option("confirm_flush_timeout", 30.0)):
            with self._lock:
                left = sorted(u for r in self._queue for u in r.uuids)
            LOG.warning("Closing with %d placements not confirmed (%s): the scheduler "
                        "releases them after claim_ttl", len(left), ", ".join(left[:10]))
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    # -- riding on the caller's next select (RPC API 1.4) ------------------------------
    def take(self, ctxt) -> list[_Request]:
        """The queued requests of ``ctxt``'s caller (up to ``MAX_BATCH``
        instances, oldest first) for the select about to be sent to carry,
        once the oldest has waited ``confirm_batch_delay`` (a busy client
        confirms several placements at a time, and most selects carry
        nothing); hand them to ``ridden`` with its answer, or to ``put_back``."""
        ripe = time.monotonic() - self._option("confirm_batch_delay", 0.25)
        with self._lock:
            # oldest first (replies are queued as they arrive, what is put back
            # goes first): most selects of a busy client stop here
            if not self._queue or self._queue[0].queued_at > ripe:
                return []
        caller = _who(ctxt)
        with self._lock:
            oldest = next((r for r in self._queue if r.placed_by(ctxt, caller)), None)
            if oldest is None or oldest.queued_at > ripe:
                return []
            batch = self._take_caller(ctxt, caller)
            self._riding.extend(batch)
        return batch

    def _take_caller(self, ctxt, caller: Callable[[], tuple]) -> list[_Request]:
        """Off the queue (under the lock): the requests of ``ctxt``'s caller
        (``caller()``: who that is), oldest first, up to ``MAX_BATCH`` instances."""
        batch: list[_Request] = []
        count = 0
        for request in list(self._queue):
            if not request.placed_by(ctxt, caller):
                continue
            if batch and count + len(request.uuids) > MAX_BATCH:
                break
            self._queue.remove(request)
            batch.append(request)
            count += len(request.uuids)
        return batch

    @staticmethod
    def uuids_of(batch: Sequence[_Request]) -> list[str]:
        """What a confirm of ``batch`` names: each instance once (one instance
        in two requests: a select sent again; the endpoint refuses a list that
        names an instance twice)."""
        return list(dict.fromkeys(u for r in batch for u in r.to_confirm()))

    def ridden(self, batch: list[_Request], answer: dict | None) -> None:
        """The select that carried ``batch`` was answered; ``answer``: its
        confirm's (``{"confirmed": [...], "unknown": [...]}``), or None when
        the daemon did not confirm them (then they go back to the queue)."""
        if not batch:
            return
        unknown = (answer or {}).get("unknown") or ()
        if answer is None or unknown:
            # not done, or not all held: the thread decides, one request at
            # a time where needed (_confirm), as for a batch of its own
            self.put_back(batch)
            return
        with self._lock:
            for request in batch:
                self._riding.remove(request)
            self._lock.notify_all()
        for request in batch:
            self._settle(request, CONFIRMED)

    def put_back(self, batch: list[_Request]) -> None:
        """The select that carried ``batch`` failed, or its answer does not settle
        it: the thread confirms them (confirm is idempotent), first in line."""
        if not batch:
            return
        with self._lock:
            for request in batch:
                self._riding.remove(request)
            self._queue.extendleft(reversed(batch))
            self._start()
            self._lock.notify_all()

    # -- the confirmer's thread -----------------------------------------------------
    _busy = False       # a batch is being sent
    _hurry = False      # flush: send without waiting for more replies
    _waiters = 0        # callers in wait_confirmed: send without waiting either

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="berth-confirmer",
                                            daemon=True)
            self._thread.start()

    def _next_batch(self) -> list[_Request] | None:
        """The requests to confirm in the next call (None: closing, nothing left):
        once the oldest has waited twice ``confirm_batch_delay`` (after one,
        the caller's next select may carry it) or someone is waiting."""
        delay = self._option("confirm_batch_delay", 0.25)
        with self._lock:
            while True:
                if not self._queue:
                    if self._closing:
                        return None
                    self._lock.wait(1.0)
                    continue
                if self._closing or self._hurry or self._waiters:
                    break
                left = min(r.queued_at for r in self._queue) + 2 * delay - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            # the oldest request's caller's requests, oldest first, as many as fit
            first = min(self._queue, key=lambda r: r.queued_at)
            batch = self._take_caller(first.ctxt, first.who)
            self._busy = True
            self._sending = list(batch)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._confirm(batch)
            except Exception:           # noqa: BLE001 - the thread must go on
                LOG.exception("The background confirmer failed on %s",
                              [r.uuids for r in batch])
                for request in batch:
                    if request.state == PENDING:
                        self._lose(request, "the confirmer failed")
            finally:
                with self._lock:
                    self._busy = False
                    self._sending = []
                    self._lock.notify_all()

    def _confirm(self, batch: list[_Request]) -> None:
        """Confirm a batch: one call, then one per request if some were lost."""
        for request in [r for r in batch if not r.to_confirm()]:
            batch.remove(request)
            self._settle(request, RELEASED)
        if not batch:
            return
        answer = self._send(self.uuids_of(batch), batch)
        if answer is None:
            return
        unknown = set(answer.get("unknown") or ())
        if not unknown:
            for request in batch:
                self._settle(request, CONFIRMED)
            return
        for request in batch:
            mine = unknown.intersection(request.uuids)
            if mine - request.released:
                self._lose(request, "released before its confirm arrived "
                                    "(claim_ttl over, or by another client)")
            elif len(batch) == 1 and not mine:
                self._settle(request, CONFIRMED)     # cannot happen: all or none
            else:
                self._confirm([request])     # the others, or what the caller kept

    def _send(self, uuids: list[str], batch: list[_Request]) -> dict | None:
        """The confirm's answer, sent again while unanswered; None when the batch's
        first deadline passed first (its requests are then lost): ``claim_ttl``
        after its select was sent, less ``confirm_margin``."""
        ttl = self._option("claim_ttl", 300)
        margin = min(self._option("confirm_margin", 30.0), ttl / 2)
        deadline = min(r.sent_at for r in batch) + ttl - margin if ttl > 0 else float("inf")
        pause = 0.1
        while True:
            try:
                self.calls += 1
                return self.api.confirm(batch[0].ctxt, uuids)
            except _AGAIN as e:
                if time.monotonic() + pause >= deadline:
                    for request in batch:
                        self._lose(request, f"its confirm got no answer before the end of "
                                            f"its claim ({type(e).__name__})")
                    return None
                LOG.warning("The confirm of %d placements got no answer (%s); sending "
                            "it again in %.1f s", len(uuids), type(e).__name__, pause)
            except exception.BerthError as e:
                for request in batch:
                    self._lose(request, f"its confirm was refused: {e}")
                return None
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(2 * pause, 5.0)

    def _settle(self, request: _Request, state: str, reason: str = "") -> None:
        with self._lock:
            request.state, request.reason = state, reason
            self._settled.append(request)
            while len(self._settled) > KEEP_SETTLED:
                old = self._settled.popleft()
                for uuid in old.uuids:
                    if self._by_uuid.get(uuid) is old:
                        del self._by_uuid[uuid]
            if self._waiters:
                self._lock.notify_all()

    def _lose(self, request: _Request, reason: str) -> None:
        """The request holds nothing, or will soon: give it back, say so."""
        uuids = request.to_confirm()
        self.api._give_back(request.ctxt, uuids)
        LOG.error("Placement of %s is lost: %s. Its claims are released; do not "
                  "build these instances, or delete them", ", ".join(uuids), reason)
        self._settle(request, LOST, reason)
        if self.on_claim_lost is not None:
            try:
                self.on_claim_lost(uuids, reason)
            except Exception:           # noqa: BLE001 - the caller's callback
                LOG.exception("on_claim_lost failed for %s", uuids)
