"""Issue 15, part 1 (the part done): compute-API calls and operator/agent calls on
topics of their own, each refusing the other's, so broker permissions on the topics
decide who may call what."""
from __future__ import annotations

import uuid

import pytest
from oslo_config import cfg

from scheduler import exception, rpc
from scheduler.manager import RPC_API_VERSION
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService
from tests.unit.scheduler.test_manager import HOST, SPEC, FakeScheduler


@pytest.fixture
def split(sqlite_db):
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    topic = "hard_" + uuid.uuid4().hex[:8]
    cfg.CONF.set_override("topic", topic, group="scheduler")
    cfg.CONF.set_override("admin_topic", topic + "_admin", group="scheduler")
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=FakeScheduler(), db=sqlite_db)
    service.start()
    yield transport, topic, topic + "_admin"
    service.stop(5)
    transport.cleanup()
    cfg.CONF.clear_override("topic", group="scheduler")
    cfg.CONF.clear_override("admin_topic", group="scheduler")


def test_the_client_sends_each_call_to_its_topic(split):
    transport, _, _ = split
    api = SchedulerAPI(cfg.CONF, transport=transport, timeout=10)
    assert api.report_compute_node(None, HOST)["host"] == HOST["host"]
    assert api.aggregate_create(None, "a1")["name"] == "a1"
    assert [h["host"] for h in api.list_hosts(None)] == [HOST["host"]]
    assert api.select_destinations(None, SPEC)[0][0]["host"] == "compute-001"
    assert api.ping()["version"] == RPC_API_VERSION


@pytest.mark.parametrize("method, kwargs", [
    ("report_compute_node", {"node": HOST}), ("aggregate_create", {"name": "a"}),
    ("aggregate_set_metadata", {"name": "a", "metadata": {}}), ("list_hosts", {}),
])
def test_compute_topic_refuses_admin_calls(split, method, kwargs):
    transport, topic, _ = split
    compute_only = SchedulerAPI(cfg.CONF, transport=transport, topic=topic, timeout=10)
    with pytest.raises(exception.InvalidRequest) as caught:
        compute_only._call(None, method, **kwargs)
    assert caught.value.field == "method"
    assert f"not served on topic {topic}" in caught.value.reason
    admin = SchedulerAPI(cfg.CONF, transport=transport, topic=topic + "_admin", timeout=10)
    assert admin.list_hosts(None) == []      # nothing was written


@pytest.mark.parametrize("method, kwargs", [
    ("select_destinations", {"request_spec": SPEC}),
    ("release", {"instance_uuid": "11111111-1111-1111-1111-111111111111"}),
])
def test_admin_topic_refuses_compute_calls(split, method, kwargs):
    transport, _, admin_topic = split
    admin_only = SchedulerAPI(cfg.CONF, transport=transport, topic=admin_topic, timeout=10)
    with pytest.raises(exception.InvalidRequest) as caught:
        admin_only._call(None, method, **kwargs)
    assert caught.value.field == "method"
    assert admin_only.ping()["version"] == RPC_API_VERSION


def test_one_topic_when_admin_topic_is_unset(sqlite_db):
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    topic = "hard_" + uuid.uuid4().hex[:8]
    cfg.CONF.set_override("topic", topic, group="scheduler")
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=FakeScheduler(), db=sqlite_db)
    service.start()
    try:
        api = SchedulerAPI(cfg.CONF, transport=transport, topic=topic, timeout=10)
        assert api.report_compute_node(None, HOST)["host"] == HOST["host"]
        assert api.select_destinations(None, SPEC)
    finally:
        service.stop(5)
        transport.cleanup()
        cfg.CONF.clear_override("topic", group="scheduler")
