"""Admission control: how many requests one worker works on at once, how many
wait for a turn and for how long, and how many one caller may have in either.

Every call but ``ping`` takes a turn before it runs. A worker works on at most
``[scheduler] max_concurrent_requests`` at once; up to ``max_queued_requests``
more wait, each at most ``queue_timeout`` seconds; one caller (the request
context's project and user) holds at most ``max_requests_per_caller`` of the
two together. A call that finds the queue full, its caller at its bound, or
no turn within the timeout is answered at once with ``ServiceUnavailable``
(``retryable``: send it again later), having done nothing.

Because waiting is bounded, the requests of a worker hold at most
``max_concurrent_requests + max_queued_requests`` of its executor's threads
(``[DEFAULT] executor_thread_pool_size``): the others stay free for pings and
for the refusals, so a ping is answered ahead of a flood of work, and the
memory a worker's requests hold is bounded by the same numbers (and by
``max_message_bytes`` per message).

The caller's identity is what its request context says: the bound keeps honest
callers from crowding each other out, while a broker user that forges contexts
meets only the worker-wide bounds (doc/source/admin/security.rst).
"""
from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator

from oslo_config import cfg
from oslo_log import log as logging

from scheduler import exception

LOG = logging.getLogger(__name__)

admission_opts = [
    cfg.IntOpt("max_concurrent_requests", default=8, min=1,
               help="Requests one worker works on at once (every call but ping). "
                    "More wait for a turn (max_queued_requests, queue_timeout)."),
    cfg.IntOpt("max_queued_requests", default=32, min=0,
               help="Requests one worker lets wait for a turn; one more is answered "
                    "ServiceUnavailable at once. max_concurrent_requests + "
                    "max_queued_requests must leave threads of [DEFAULT] "
                    "executor_thread_pool_size free for pings (the worker lowers "
                    "the queue at start if not, with a warning)."),
    cfg.FloatOpt("queue_timeout", default=5.0, min=0.0,
                 help="Seconds a request waits for a turn before it is answered "
                      "ServiceUnavailable (it did nothing; send it again later)."),
    cfg.IntOpt("max_requests_per_caller", default=16, min=0,
               help="Requests one caller (the request context's project and user) "
                    "may have working or waiting in one worker; one more is "
                    "answered ServiceUnavailable at once. 0: no per-caller bound. "
                    "A caller that sends no context (all of Berth's own tools "
                    "without caller_project_id) is one caller."),
]
cfg.CONF.register_opts(admission_opts, group="scheduler")
LIST_OPTS = [("scheduler", admission_opts)]

#: How a refusal's reason starts (the client library sends the call again).
BUSY = "the scheduler is busy"
#: Calls that never wait for a turn.
EXEMPT = frozenset({"ping"})
#: Executor threads kept free of queued requests (pings, refusals).
RESERVED_THREADS = 8


class Admission:
    """The turns of one worker (module docstring)."""

    def __init__(self, conf: cfg.ConfigOpts = cfg.CONF, pool_size: int | None = None) -> None:
        s = conf.scheduler
        self.max_active = s.max_concurrent_requests
        self.max_queued = s.max_queued_requests
        self.timeout = s.queue_timeout
        self.per_caller = s.max_requests_per_caller
        if pool_size is None:
            from oslo_messaging import server as messaging_server

            conf.register_opts(messaging_server._pool_opts)     # as the server will
            pool_size = conf.executor_thread_pool_size
        pool = pool_size
        room = max(0, pool - RESERVED_THREADS - self.max_active)
        if self.max_queued > room:
            LOG.warning("[scheduler] max_queued_requests (%d) lowered to %d: with "
                        "max_concurrent_requests %d it must leave %d of the %d executor "
                        "threads ([DEFAULT] executor_thread_pool_size) free",
                        self.max_queued, room, self.max_active, RESERVED_THREADS, pool)
            self.max_queued = room
        self.active = 0
        self.queued = 0
        self.refused = 0
        self._callers: collections.Counter = collections.Counter()
        self._turn = threading.Condition()

    @contextlib.contextmanager
    def turn(self, method: str, ctxt: dict) -> Iterator[None]:
        """Hold a turn while the call runs; ServiceUnavailable when none is given."""
        if method in EXEMPT:
            yield
            return
        caller = (ctxt.get("project_id"), ctxt.get("user_id"))
        self._wait(caller)
        try:
            yield
        finally:
            with self._turn:
                self.active -= 1
                self._leave(caller)
                self._turn.notify()

    def _wait(self, caller: tuple) -> None:
        with self._turn:
            if self.per_caller and self._callers[caller] >= self.per_caller:
                raise self._refuse(f"this caller has {self.per_caller} requests working "
                                   f"or waiting ([scheduler] max_requests_per_caller)")
            if self.active >= self.max_active and self.queued >= self.max_queued:
                raise self._refuse(f"{self.active} requests working and {self.queued} "
                                   f"waiting ([scheduler] max_concurrent_requests, "
                                   f"max_queued_requests)")
            self._callers[caller] += 1
            if self.active < self.max_active and not self.queued:
                self.active += 1
                return
            self.queued += 1
            deadline = time.monotonic() + self.timeout
            try:
                while self.active >= self.max_active:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._leave(caller)
                        self._turn.notify()     # a turn freed meanwhile is the next's
                        raise self._refuse(f"no turn within {self.timeout:g} s "
                                           f"([scheduler] queue_timeout)")
                    self._turn.wait(left)
                self.active += 1
            finally:
                self.queued -= 1

    def _leave(self, caller: tuple) -> None:
        self._callers[caller] -= 1
        if self._callers[caller] <= 0:
            del self._callers[caller]

    def _refuse(self, why: str) -> exception.ServiceUnavailable:
        self.refused += 1
        LOG.debug("Request refused: %s", why)
        return exception.ServiceUnavailable(reason=f"{BUSY}: {why}; send it again later")
