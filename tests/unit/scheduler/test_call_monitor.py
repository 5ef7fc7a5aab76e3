"""One thread sends a worker's call-monitor heartbeats (scheduler.call_monitor)."""
from __future__ import annotations

import threading
import time

from scheduler import call_monitor
from scheduler.call_monitor import CallMonitor


class Incoming:
    def __init__(self, client_timeout, fail=False) -> None:
        self.client_timeout = client_timeout
        self.fail = fail
        self.beats: list[float] = []

    def heartbeat(self) -> None:
        self.beats.append(time.monotonic())
        if self.fail:
            raise RuntimeError("queue gone")


def test_a_long_call_hears_a_heartbeat_every_half_timeout_until_it_ends():
    monitor = CallMonitor()
    incoming = Incoming(2)                  # heartbeats every 1 s
    t0 = time.monotonic()
    with monitor.watching(incoming):
        assert incoming.client_timeout is None     # oslo.messaging starts no thread
        time.sleep(2.6)
    ended = time.monotonic()
    assert len(incoming.beats) == 2
    first, second = (b - t0 for b in incoming.beats)
    assert 1.0 <= first <= 1.0 + 2 * call_monitor.TICK
    assert 0.9 <= second - first <= 1.0 + 2 * call_monitor.TICK
    time.sleep(1.5)
    assert all(b <= ended for b in incoming.beats)      # none after the call
    assert monitor.sent == 2


def test_calls_without_a_timeout_or_with_a_bad_one_get_none():
    monitor = CallMonitor()
    calls = [Incoming(None), Incoming(1), Incoming("x")]
    for incoming in calls:
        with monitor.watching(incoming):
            time.sleep(0.01)
    assert calls[0].client_timeout is None and calls[1].client_timeout == 1
    assert monitor._thread is None and monitor.sent == 0


def test_a_failed_heartbeat_stops_that_calls_heartbeats_only():
    monitor = CallMonitor()
    bad, good = Incoming(2, fail=True), Incoming(2)
    done = threading.Event()

    def other():
        with monitor.watching(good):
            done.wait(3)

    t = threading.Thread(target=other)
    t.start()
    with monitor.watching(bad):
        time.sleep(2.6)
    done.set()
    t.join()
    assert len(bad.beats) == 1 and len(good.beats) == 2


def test_leaving_waits_for_a_heartbeat_on_its_way():
    monitor = CallMonitor()
    sending = threading.Event()
    finished: list[str] = []

    class Slow(Incoming):
        def heartbeat(self):
            sending.set()
            time.sleep(0.5)
            finished.append("beat")

    incoming = Slow(2)
    with monitor.watching(incoming):
        assert sending.wait(3)
    finished.append("left")             # the reply would go now
    assert finished == ["beat", "left"]
