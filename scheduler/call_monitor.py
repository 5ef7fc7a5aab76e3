"""Call-monitor heartbeats for a worker's calls in progress, from one thread.

A client that passes ``call_monitor_timeout`` (the library does for
``select_destinations`` and ``capacity``, which can take long on a big fleet)
waits for the reply as long as it hears a heartbeat from the server at least
that often. oslo.messaging's dispatcher sends them from a thread it starts for
every such call, and joins when the call ends: about 0.15 ms of a worker's CPU
per call under eventlet, for a thread that almost never sends anything (a
placement takes milliseconds, the first heartbeat is due after half the
client's timeout, 30 s by default).

``CallMonitor`` keeps the calls in progress in a table instead; one thread per
worker wakes every ``TICK`` seconds while a call is in progress and sends the
heartbeats that are due, at the same pace as oslo.messaging (every half of the
client's timeout, the first after one half). A call's heartbeats stop before
its reply is sent: leaving ``watching`` waits for a heartbeat being sent for
it. A heartbeat that fails (broker away, the caller's queue gone) stops that
call's heartbeats, as oslo.messaging's watchdog does; the call's own reply then
fails or the caller times out, as before.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

#: Seconds between the thread's looks at the table. A heartbeat is at most
#: this late; the client's timeout is at least 2 s (a heartbeat interval of
#: 1 s, oslo.messaging's smallest), so it still hears one in time.
TICK = 0.25


class _Call:
    __slots__ = ("incoming", "interval", "due", "lock", "active")

    def __init__(self, incoming, interval: float) -> None:
        self.incoming = incoming
        self.interval = interval
        self.due = time.monotonic() + interval
        self.lock = threading.Lock()
        self.active = True


def heartbeat_interval(client_timeout) -> float | None:
    """Seconds between heartbeats for a client that gave ``client_timeout``
    (half of it, as oslo.messaging), or None when it asked for none or gave a
    timeout too short to serve (oslo.messaging ignores those too)."""
    if not client_timeout:
        return None
    try:
        interval = int(client_timeout) / 2
    except (TypeError, ValueError):
        interval = 0
    if interval < 1:
        LOG.warning("Client provided an invalid call monitor timeout %r; no heartbeats",
                    client_timeout)
        return None
    return interval


class CallMonitor:
    """The heartbeats of one worker's calls in progress."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._calls: set[_Call] = set()
        self._thread: threading.Thread | None = None
        self.sent = 0               # heartbeats sent (tests)

    @contextlib.contextmanager
    def watching(self, incoming) -> Iterator[None]:
        """Heartbeats for ``incoming`` (an oslo.messaging incoming message)
        while the block runs, if its client asked for them; takes the
        message's ``client_timeout`` so the dispatcher starts no thread of its
        own."""
        interval = heartbeat_interval(getattr(incoming, "client_timeout", None))
        if interval is None:
            yield
            return
        incoming.client_timeout = None
        call = _Call(incoming, interval)
        with self._lock:
            self._calls.add(call)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="berth-call-monitor")
                self._thread.start()
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._calls.discard(call)
            with call.lock:         # a heartbeat on its way is sent before the reply
                call.active = False

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._calls:
                    self._lock.wait()
                now = time.monotonic()
                due = [c for c in self._calls if c.due <= now]
            for call in due:
                self._beat(call, now)
            time.sleep(TICK)

    def _beat(self, call: _Call, now: float) -> None:
        with call.lock:
            if not call.active:
                return
            call.due = now + call.interval
            try:
                call.incoming.heartbeat()
                self.sent += 1
            except Exception as e:          # noqa: BLE001 - the call goes on without
                LOG.debug("Call-monitor heartbeat failed: %s", e)
                call.active = False
                with self._lock:
                    self._calls.discard(call)
