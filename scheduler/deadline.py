"""A request's deadline, and the points where a long request lets the others run.

Under eventlet every request of a worker runs in one OS thread: a request busy
in Python holds every other request of that worker (a ping included) until it
reaches a point where it yields. ``[scheduler] request_timeout`` is checked
between the instances of a request and between the candidates of an instance;
inside one instance the request cycle paces its loops over hosts or classes of
hosts (per-host and per-class filter checks, per-host weighers, the NoValidHost
explanation) and its steps: every ``PACE_EVERY`` items, and after each filter
or weigher, :meth:`Deadline.pace` reads the clock once, raises RequestTimeout
past the deadline, and once ``YIELD_EVERY`` seconds of work have passed since
the last yield sleeps 0 s (a green-thread switch under eventlet, a GIL release
under threading), so that a concurrent request is served meanwhile. Vector
steps (numpy over every row, a millisecond or two at 100,000 hosts) are paced
between steps only: no Python is added per host where a vector form answers.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from scheduler import exception

#: Items (hosts, classes of hosts) of a loop between two pace points.
PACE_EVERY = 8
#: Seconds of work between two yields to the other requests of the worker.
YIELD_EVERY = 0.005

T = TypeVar("T")


class Deadline:
    """When one request must stop (``timeout`` seconds after it started; 0: never),
    and when it last let the others run."""

    __slots__ = ("timeout", "at", "index", "_clock", "_next_yield")

    def __init__(self, timeout: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        now = clock()
        self.timeout = timeout
        self.at = now + timeout if timeout > 0 else float("inf")
        #: The instance of the request being placed (named by RequestTimeout).
        self.index = 0
        self._clock = clock
        self._next_yield = now + YIELD_EVERY

    def check(self, index: int | None = None) -> None:
        """One clock read: RequestTimeout once the deadline has passed."""
        if index is not None:
            self.index = index
        if self._clock() > self.at:
            raise exception.RequestTimeout(timeout=self.timeout, instance_index=self.index)

    def pace(self) -> None:
        """:meth:`check`, and a yield when ``YIELD_EVERY`` seconds have passed
        since the last one."""
        now = self._clock()
        if now > self.at:
            raise exception.RequestTimeout(timeout=self.timeout, instance_index=self.index)
        if now >= self._next_yield:
            time.sleep(0)       # eventlet: switch to the other green threads
            self._next_yield = self._clock() + YIELD_EVERY

    def paced(self, items: Sequence[T]) -> Iterator[T]:
        """``items``, pacing after every ``PACE_EVERY`` of them."""
        for start in range(0, len(items), PACE_EVERY):
            yield from items[start:start + PACE_EVERY]
            self.pace()
