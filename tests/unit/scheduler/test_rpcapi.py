"""Client and daemon over an in-process transport: typed errors, version cap, drain."""
from __future__ import annotations

import threading
import time

import oslo_messaging
import pytest
from oslo_config import cfg

from scheduler import exception
from scheduler.manager import RPC_API_VERSION
from scheduler.rpcapi import SchedulerAPI
from tests.unit.scheduler.inprocess_daemon import serving
from tests.unit.scheduler.test_manager import SPEC, FakeScheduler


class SlowScheduler(FakeScheduler):
    """Holds each select_destinations until ``gate`` is set."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def select_destinations(self, spec, **kw):
        self.entered.set()
        self.gate.wait(10)
        return super().select_destinations(spec, **kw)


@pytest.fixture
def daemon(sqlite_db, request):
    scheduler = getattr(request, "param", FakeScheduler)()
    with serving(sqlite_db, scheduler) as (service, api):
        yield service, api, scheduler


def test_calls_reach_the_endpoint(daemon):
    _, api, scheduler = daemon
    assert api.ping()["version"] == RPC_API_VERSION
    result = api.select_destinations(None, SPEC, return_alternates=True)
    assert [s["host"] for s in result[0]] == ["compute-001", "compute-002"]
    host = api.report_compute_node(None, {"host": "h1", "vcpus": 4, "memory_mb": 4096,
                                          "local_gb": 10})
    assert host["host"] == "h1"
    assert [h["host"] for h in api.list_hosts(None)] == ["h1"]
    assert api.show_host(None, "h1")["vcpus"] == 4
    api.aggregate_create(None, "a1", hosts=["h1"])
    api.aggregate_update(None, "a1", availability_zone="az9")
    assert api.show_host(None, "h1")["availability_zone"] == "az9"
    api.aggregate_update(None, "a1", new_name="a2")
    assert api.aggregate_list(None)[0]["name"] == "a2"


def test_errors_arrive_as_the_same_types(daemon):
    _, api, _ = daemon
    with pytest.raises(exception.InvalidRequest) as e:
        api.select_destinations(None, {"flavor": {"vcpus": "x", "memory_mb": 1,
                                                  "root_gb": 1}})
    assert e.value.field == "flavor.vcpus"
    assert e.value.message == "Invalid request: flavor.vcpus: expected an integer > 0, got 'x'"
    with pytest.raises(exception.NoValidHost) as e:
        api.select_destinations(None, {"flavor": {"vcpus": 100, "memory_mb": 1,
                                                  "root_gb": 1}})
    assert e.value.summary == {"hosts": 1}
    with pytest.raises(exception.NotFound):
        api.show_host(None, "nope")


def test_client_refuses_values_that_cannot_travel(daemon):
    _, api, scheduler = daemon
    with pytest.raises(exception.InvalidRequest) as e:
        api.select_destinations(None, {"flavor": {"vcpus": 1, "memory_mb": 1,
                                                  "root_gb": 1}, "project_id": object()})
    assert e.value.field == "request_spec.project_id"
    assert scheduler.calls == []


def test_version_cap(daemon):
    _, api, _ = daemon
    cfg.CONF.set_override("rpc_version_cap", "0.9", group="scheduler")
    try:
        capped = SchedulerAPI(cfg.CONF, transport=api.transport)
        with pytest.raises(oslo_messaging.RPCVersionCapError):
            capped.ping()
    finally:
        cfg.CONF.clear_override("rpc_version_cap", group="scheduler")


def test_aggregate_membership_in_one_call(daemon):
    """A list of hosts goes in one call (1.1), all or none; 1.0 callers still
    send one ``host``; under a 1.0 cap a list of several is refused here."""
    _, api, _ = daemon
    for name in ("h1", "h2", "h3"):
        api.report_compute_node(None, {"host": name, "vcpus": 4, "memory_mb": 4096,
                                       "local_gb": 10})
    api.aggregate_create(None, "a1")
    with pytest.raises(exception.NotFound) as caught:
        api.aggregate_add_host(None, "a1", hosts=["h1", "h9", "h2"])
    assert caught.value.name == "h9"
    assert api.aggregate_list(None)[0]["hosts"] == []
    assert api.aggregate_add_host(None, "a1", hosts=["h2", "h1"])["hosts"] == ["h1", "h2"]
    assert api.aggregate_add_host(None, "a1", "h3")["hosts"] == ["h1", "h2", "h3"]
    with pytest.raises(exception.InvalidRequest) as caught:
        api.aggregate_remove_host(None, "a1", hosts=["h1", "h1"])
    assert caught.value.field == "hosts[1]"
    with pytest.raises(exception.InvalidRequest) as caught:
        api.aggregate_remove_host(None, "a1", "h1", hosts=["h2"])
    assert caught.value.field == "hosts"
    cfg.CONF.set_override("rpc_version_cap", "1.0", group="scheduler")
    try:
        capped = SchedulerAPI(cfg.CONF, transport=api.transport, timeout=10)
        with pytest.raises(exception.InvalidRequest) as caught:
            capped.aggregate_remove_host(None, "a1", hosts=["h1", "h2"])
        assert caught.value.field == "hosts" and "1.1" in caught.value.reason
        assert capped.aggregate_remove_host(None, "a1", hosts=["h3"])["hosts"] == ["h1", "h2"]
    finally:
        cfg.CONF.clear_override("rpc_version_cap", group="scheduler")
    assert api.aggregate_remove_host(None, "a1", hosts=["h1", "h2"])["hosts"] == []


@pytest.mark.parametrize("daemon", [SlowScheduler], indirect=True)
def test_stop_drains_requests_in_flight(daemon):
    service, api, scheduler = daemon
    box = {}
    caller = threading.Thread(
        # confirm="none": the confirm that follows the reply would find the
        # only server stopped
        target=lambda: box.setdefault("result", api.select_destinations(None, SPEC,
                                                                         confirm="none")))
    caller.start()
    assert scheduler.entered.wait(10)
    stopper = threading.Thread(target=lambda: box.setdefault("drained", service.stop(10)))
    stopper.start()
    time.sleep(0.3)
    assert stopper.is_alive()          # waiting for the request in flight
    scheduler.gate.set()
    stopper.join(10)
    caller.join(10)
    assert box["drained"] is True
    assert box["result"][0][0]["host"] == "compute-001"


@pytest.mark.parametrize("daemon", [SlowScheduler], indirect=True)
def test_stop_gives_up_after_the_timeout(daemon):
    service, api, scheduler = daemon
    threading.Thread(target=lambda: api.select_destinations(None, SPEC, confirm="none"),
                     daemon=True).start()
    assert scheduler.entered.wait(10)
    started = time.monotonic()
    assert service.stop(0.5) is False
    assert time.monotonic() - started < 3
    scheduler.gate.set()
    time.sleep(1)  # let the abandoned drain finish before the transport goes away


class _Recorder:
    """A transport that answers at once and keeps what each call sent."""

    def __init__(self, conf):
        self.transport = oslo_messaging.get_rpc_transport(conf, url="fake:/")
        self.transport._driver.send = self._send
        self.sent: list[dict] = []

    def _send(self, target, ctxt, message, wait_for_reply=None, timeout=None,
              call_monitor_timeout=None, retry=None, transport_options=None):
        args = message["args"]
        self.sent.append({"topic": target.topic, "version": target.version,
                          "method": message["method"], "args": args, "timeout": timeout,
                          "monitor": call_monitor_timeout})
        if message["method"] == "select_destinations":
            return [[{"instance_uuid": u}] for u in args["instance_uuids"]]
        return []


@pytest.fixture
def recorder(scheduler_options):
    scheduler_options(select_retries=1)
    return _Recorder(cfg.CONF)


def test_each_call_is_prepared_from_the_options_of_its_moment(recorder, scheduler_options):
    """The call contexts a client keeps serve every call with the same
    arguments; a changed option or another version gets a context of its own."""
    api = SchedulerAPI(cfg.CONF, transport=recorder.transport)
    prepared = []
    real_prepare = api.client.prepare
    api.client.prepare = lambda **kw: prepared.append(kw) or real_prepare(**kw)
    for _ in range(3):
        api.select_destinations(None, SPEC, confirm="none")
    assert len(prepared) == 1
    cfg.CONF.set_override("long_rpc_timeout", 77, group="scheduler")
    cfg.CONF.set_override("rpc_response_timeout", 5)
    try:
        api.select_destinations(None, SPEC, confirm="none")
        api.select_destinations(None, SPEC, confirm="manual")
        api.ping()
    finally:
        cfg.CONF.clear_override("long_rpc_timeout", group="scheduler")
        cfg.CONF.clear_override("rpc_response_timeout")
    api.select_destinations(None, SPEC, confirm="none")
    api.ping()
    sent = [(s["method"], s["version"], s["timeout"], s["monitor"]) for s in recorder.sent]
    assert sent == [("select_destinations", "1.0", 1800, 60)] * 3 + [
        ("select_destinations", "1.0", 77, 5), ("select_destinations", "1.1", 77, 5),
        ("ping", "1.0", 5, None), ("select_destinations", "1.0", 1800, 60),
        ("ping", "1.0", 60, None)]
    assert recorder.sent[4]["args"]["pending"] is True
    assert "pending" not in recorder.sent[3]["args"]


def test_admin_and_compute_calls_keep_their_own_topics(recorder, scheduler_options):
    scheduler_options(admin_topic="berth_admin_test")
    api = SchedulerAPI(cfg.CONF, transport=recorder.transport)
    for _ in range(2):
        api.ping()
        api.list_hosts(None)
        api.aggregate_add_host(None, "a1", hosts=["h1"])
    assert [(s["topic"], s["method"], s["version"]) for s in recorder.sent] == [
        ("scheduler", "ping", "1.0"), ("berth_admin_test", "list_hosts", "1.0"),
        ("berth_admin_test", "aggregate_add_host", "1.1")] * 2


def test_what_a_client_may_send_follows_its_version_cap(recorder, scheduler_options):
    """Clients of one process with other caps, or a cap changed on a client,
    are each answered by their own cap."""
    scheduler_options(rpc_version_cap="1.0")
    capped = SchedulerAPI(cfg.CONF, transport=recorder.transport)
    cfg.CONF.clear_override("rpc_version_cap", group="scheduler")
    newest = SchedulerAPI(cfg.CONF, transport=recorder.transport)
    for api in (capped, newest, capped, newest):
        api.select_destinations(None, SPEC, confirm="manual")
    assert [(s["version"], "pending" in s["args"]) for s in recorder.sent] == [
        ("1.0", False), ("1.1", True)] * 2
    with pytest.raises(exception.InvalidRequest, match="1.3"):
        capped.select_destinations(None, SPEC, allow_preemption=True)
    newest.client.version_cap = "1.2"
    with pytest.raises(exception.InvalidRequest, match="1.3"):
        newest.select_destinations(None, SPEC, allow_preemption=True)
    newest.client.version_cap = "1.0"
    newest.select_destinations(None, SPEC, confirm="manual")
    assert recorder.sent[-1]["version"] == "1.0"
    with pytest.raises(oslo_messaging.RPCVersionCapError):
        newest.confirm(None, ["x"])
