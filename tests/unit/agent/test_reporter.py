"""The reporter loop on a fake clock: heartbeats, back-off, full report on return."""
from __future__ import annotations

import oslo_messaging
import pytest

from scheduler import exception
from scheduler.agent import host
from scheduler.agent.reporter import Reporter, backoff_delay
from tests.unit.agent import fake_host


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Stop:
    """``threading.Event`` stand-in: waiting moves the fake clock; set at ``until``."""

    def __init__(self, clock, until):
        self.clock, self.until = clock, until

    def is_set(self):
        return self.clock.now >= self.until

    def wait(self, seconds):
        self.clock.now += seconds


class FakeAPI:
    """Records (time, method); ``down`` holds [start, end) windows where every call
    fails like an absent daemon; ``refuse`` makes reports fail like Berth refusing."""

    def __init__(self, clock, down=(), refuse=False, unknown_until=-1.0):
        self.clock, self.down, self.refuse = clock, list(down), refuse
        self.unknown_until = unknown_until
        self.calls = []

    def _call(self, name):
        now = self.clock()
        if any(a <= now < b for a, b in self.down):
            self.calls.append((now, name, "timeout"))
            raise oslo_messaging.MessagingTimeout("no reply")
        self.calls.append((now, name, "ok"))

    def report_compute_node(self, ctxt, node):
        self._call("report_compute_node")
        if self.refuse:
            raise exception.Conflict("host h: numa_topology: the cells changed while in use")
        return {"host": node["host"], "generation": 1, "disabled": False, "warnings": []}

    def report_pci_devices(self, ctxt, node, devices):
        self._call("report_pci_devices")
        return {"add": [], "update": [], "remove": [], "warnings": []}

    def heartbeat(self, ctxt, host_name):
        self._call("heartbeat")
        if self.clock() < self.unknown_until:
            raise exception.NotFound(kind="Host", name=host_name)
        return True


@pytest.fixture
def intervals(conf_override):
    conf_override("report_interval", 60, "agent")
    conf_override("heartbeat_interval", 10, "agent")
    conf_override("backoff_initial", 1.0, "agent")
    conf_override("backoff_max", 8.0, "agent")


def _report():
    return host.build_report(fake_host.facts("small_no_numa"), fake_host.settings("h"))


def _run(api, clock, until):
    reporter = Reporter(api, _report, clock=clock, jitter=lambda: 1.0)
    reporter.run(Stop(clock, until))
    return reporter


def test_backoff_doubles_up_to_the_maximum():
    assert [backoff_delay(n, 1.0, 8.0) for n in range(1, 7)] == [1, 2, 4, 8, 8, 8]


def test_reports_then_heartbeats(intervals):
    clock = Clock()
    api = FakeAPI(clock)
    reporter = _run(api, clock, until=125)
    assert [(t, m) for t, m, _ in api.calls] == [
        (0, "report_compute_node"), (0, "report_pci_devices"),
        (10, "heartbeat"), (20, "heartbeat"), (30, "heartbeat"), (40, "heartbeat"),
        (50, "heartbeat"),
        (60, "report_compute_node"), (60, "report_pci_devices"),
        (70, "heartbeat"), (80, "heartbeat"), (90, "heartbeat"), (100, "heartbeat"),
        (110, "heartbeat"),
        (120, "report_compute_node"), (120, "report_pci_devices")]
    assert (reporter.reports, reporter.heartbeats, reporter.failures) == (3, 10, 0)


def test_daemon_away_backs_off_then_sends_a_full_report(intervals):
    clock = Clock()
    api = FakeAPI(clock, down=[(25, 58)])
    reporter = _run(api, clock, until=75)
    assert api.calls == [
        (0, "report_compute_node", "ok"), (0, "report_pci_devices", "ok"),
        (10, "heartbeat", "ok"), (20, "heartbeat", "ok"),
        (30, "heartbeat", "timeout"),                 # away: 1, 2, 4, 8, 8, 8 s
        (31, "report_compute_node", "timeout"), (33, "report_compute_node", "timeout"),
        (37, "report_compute_node", "timeout"), (45, "report_compute_node", "timeout"),
        (53, "report_compute_node", "timeout"),
        (61, "report_compute_node", "ok"), (61, "report_pci_devices", "ok"),   # back: all
        (71, "heartbeat", "ok")]
    assert reporter.failures == 0 and reporter.last_error is None


def test_a_refused_report_keeps_heartbeating(intervals):
    clock = Clock()
    api = FakeAPI(clock, refuse=True)
    reporter = _run(api, clock, until=65)
    # The node's change is refused; its devices are still sent.
    assert [(t, m) for t, m, _ in api.calls] == [
        (0, "report_compute_node"), (0, "report_pci_devices"), (10, "heartbeat"),
        (20, "heartbeat"), (30, "heartbeat"), (40, "heartbeat"), (50, "heartbeat"),
        (60, "report_compute_node"), (60, "report_pci_devices")]
    assert reporter.reports == 0 and "cells changed" in reporter.last_error


def test_a_host_berth_lost_is_reported_again(intervals):
    clock = Clock()
    api = FakeAPI(clock, unknown_until=15)
    _run(api, clock, until=35)
    assert [(t, m) for t, m, _ in api.calls] == [
        (0, "report_compute_node"), (0, "report_pci_devices"),
        (10, "heartbeat"),                                 # NotFound: report now
        (10, "report_compute_node"), (10, "report_pci_devices"),
        (20, "heartbeat"), (30, "heartbeat")]


def test_bad_configuration_is_not_a_transport_failure(intervals):
    clock = Clock()
    api = FakeAPI(clock)

    def broken():
        raise exception.InvalidRequest(field="compute.cpu_shared_set", reason="bad")

    reporter = Reporter(api, broken, clock=clock, jitter=lambda: 1.0)
    reporter.run(Stop(clock, 70))
    assert api.calls == []                    # nothing to send, no heartbeats for nobody
    assert reporter.failures == 0 and "bad" in reporter.last_error


def test_a_broker_that_refuses_connections_is_backed_off_from(intervals):
    clock = Clock()
    api = FakeAPI(clock)

    def probe():
        if clock() < 5:
            raise ConnectionRefusedError("cannot reach the message broker")

    reporter = Reporter(api, _report, clock=clock, jitter=lambda: 1.0, probe=probe)
    reporter.run(Stop(clock, 12))
    # Probed at 0, 1, 3 (refused: nothing sent), 7 (accepted): then the full report.
    assert api.calls == [(7, "report_compute_node", "ok"), (7, "report_pci_devices", "ok")]
    assert reporter.reports == 1 and reporter.failures == 0
