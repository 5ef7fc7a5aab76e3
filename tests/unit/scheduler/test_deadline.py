"""scheduler.deadline: one clock read per check, a yield every YIELD_EVERY seconds
of work, loops paced every PACE_EVERY items."""
from __future__ import annotations

import time

import pytest

from scheduler import deadline as deadline_mod
from scheduler import exception
from scheduler.deadline import PACE_EVERY, YIELD_EVERY, Deadline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


@pytest.fixture
def sleeps(monkeypatch):
    calls = []
    monkeypatch.setattr(deadline_mod.time, "sleep", calls.append)
    return calls


def test_check_raises_past_the_deadline_naming_the_instance():
    clock = Clock()
    d = Deadline(2.0, clock)
    d.check(0)
    clock.now += 2.0
    d.check(1)                      # at the deadline: not past it
    clock.now += 0.001
    with pytest.raises(exception.RequestTimeout) as caught:
        d.check(3)
    assert caught.value.kwargs == {"timeout": 2.0, "instance_index": 3}


def test_no_timeout_never_expires(sleeps):
    clock = Clock()
    d = Deadline(0, clock)
    clock.now += 10 ** 9
    d.check(0)
    d.pace()
    assert sleeps == [0]            # it still lets the others run


def test_pace_yields_once_per_interval_of_work(sleeps):
    clock = Clock()
    d = Deadline(60.0, clock)
    for _ in range(10):
        clock.now += YIELD_EVERY / 4
        d.pace()
    assert sleeps == [0, 0]         # 2.5 intervals of work: two yields
    clock.now += 60
    with pytest.raises(exception.RequestTimeout):
        d.pace()


def test_paced_reads_the_clock_once_per_chunk(sleeps):
    clock = Clock()
    d = Deadline(60.0, clock)
    reads = clock.reads
    items = list(range(3 * PACE_EVERY + 1))
    assert list(d.paced(items)) == items
    assert clock.reads - reads == 4
    assert list(d.paced([])) == []


def test_paced_stops_a_loop_past_the_deadline(sleeps):
    clock = Clock()
    d = Deadline(1.0, clock)
    seen = []
    with pytest.raises(exception.RequestTimeout):
        for i in d.paced(range(10 * PACE_EVERY)):
            seen.append(i)
            clock.now += 0.1
    assert len(seen) == 2 * PACE_EVERY      # stopped at the first pace point past it


def test_the_default_clock_is_the_monotonic_one():
    d = Deadline(5.0)
    assert 4.9 < d.at - time.perf_counter() <= 5.0
