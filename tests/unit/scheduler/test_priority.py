"""berth:priority / berth:preemptible: parsed and checked, project defaults, the
policy rule above [preemption] privileged_priority, and allow_preemption over
RPC (API 1.3, refused by a client capped below it)."""
from __future__ import annotations

import uuid

import pytest
from oslo_config import cfg
from oslo_context import context

from scheduler import exception, priority, rpc
from scheduler.manager import SchedulerManager
from scheduler.request_spec import RequestSpec
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService
from tests.unit.scheduler.test_manager import FakeScheduler


def _spec(extra, project="p1"):
    return RequestSpec.from_primitive({"project_id": project, "flavor": {
        "vcpus": 1, "memory_mb": 512, "root_gb": 1, "extra_specs": extra}})


@pytest.mark.parametrize("extra, want", [
    ({}, priority.Priority(None, False)),
    ({"berth:priority": "10"}, priority.Priority(10, False)),
    ({"berth:priority": " -3 "}, priority.Priority(-3, False)),
    ({"berth:preemptible": "True"}, priority.Priority(None, True)),
    ({"berth:preemptible": "false", "berth:priority": "0"}, priority.Priority(0, False)),
])
def test_extra_specs(extra, want):
    assert _spec(extra).priority == want


@pytest.mark.parametrize("extra, field", [
    ({"berth:priority": "high"}, "flavor.extra_specs.berth:priority"),
    ({"berth:priority": "1.5"}, "flavor.extra_specs.berth:priority"),
    ({"berth:priority": str(2 ** 31)}, "flavor.extra_specs.berth:priority"),
    ({"berth:preemptible": "yes"}, "flavor.extra_specs.berth:preemptible"),
])
def test_bad_extra_specs_name_the_field(extra, field):
    with pytest.raises(exception.InvalidRequest) as e:
        _spec(extra)
    assert e.value.field == field


def test_project_defaults():
    cfg.CONF([], project="berth")
    cfg.CONF.set_override("project_priorities", {"batch": "-10", "prod": "100"},
                          group="preemption")
    cfg.CONF.set_override("default_priority", 5, group="preemption")
    try:
        assert priority.effective(_spec({}, "batch"), cfg.CONF) == -10
        assert priority.effective(_spec({}, "other"), cfg.CONF) == 5
        assert priority.effective(_spec({"berth:priority": "1"}, "prod"), cfg.CONF) == 1
        # an operator's default needs no privilege; asking above the threshold does
        assert not priority.needs_privilege(_spec({}, "prod"), cfg.CONF)
        assert priority.needs_privilege(_spec({"berth:priority": "1"}), cfg.CONF)
        assert not priority.needs_privilege(_spec({"berth:priority": "0"}), cfg.CONF)
    finally:
        cfg.CONF.clear_override("project_priorities", group="preemption")
        cfg.CONF.clear_override("default_priority", group="preemption")


class PreemptingScheduler(FakeScheduler):
    def select_destinations(self, spec, instance_uuids=None, return_alternates=False,
                            dry_run=False, pending=False, allow_preemption=False):
        self.allowed = allow_preemption
        return super().select_destinations(spec, instance_uuids, return_alternates,
                                           dry_run, pending)


SPEC = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                   "extra_specs": {"berth:priority": "50"}}}


def test_high_priority_needs_the_rule(sqlite_db):
    cfg.CONF([], project="berth")
    sched = PreemptingScheduler()
    manager = SchedulerManager(sqlite_db, sched, cfg.CONF)
    member = context.RequestContext(project_id="p1", roles=["member"])
    with pytest.raises(Exception) as caught:
        manager.select_destinations(member, SPEC)
    error = getattr(caught.value, "exc_info", (None, caught.value))[1]
    assert isinstance(error, exception.Forbidden) and "berth:high_priority" in str(error)
    service = context.RequestContext(project_id="p1", roles=["service"])
    manager.select_destinations(service, SPEC, allow_preemption=True)
    assert sched.allowed is True
    low = {"flavor": {**SPEC["flavor"], "extra_specs": {"berth:priority": "0"}}}
    manager.select_destinations(member, low)
    assert sched.allowed is False


@pytest.fixture
def daemon(sqlite_db):
    sched = PreemptingScheduler()
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    cfg.CONF.set_override("topic", "prio_" + uuid.uuid4().hex[:8], group="scheduler")
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=sched, db=sqlite_db)
    service.start()
    yield SchedulerAPI(cfg.CONF, transport=transport, timeout=10), sched, transport
    service.stop(5)
    transport.cleanup()
    cfg.CONF.clear_override("topic", group="scheduler")


def test_allow_preemption_over_rpc_and_the_version_cap(daemon):
    api, sched, transport = daemon
    api.select_destinations(None, SPEC, allow_preemption=True, confirm="none")
    assert sched.allowed is True
    api.select_destinations(None, SPEC, confirm="none")
    assert sched.allowed is False
    cfg.CONF.set_override("rpc_version_cap", "1.2", group="scheduler")
    try:
        capped = SchedulerAPI(cfg.CONF, transport=transport, timeout=10)
        with pytest.raises(exception.InvalidRequest) as e:
            capped.select_destinations(None, SPEC, allow_preemption=True)
        assert e.value.field == "allow_preemption" and "1.3" in e.value.reason
        capped.select_destinations(None, SPEC, confirm="none")
    finally:
        cfg.CONF.clear_override("rpc_version_cap", group="scheduler")


def _fields(extra=None, **fields):
    return RequestSpec.from_primitive({"flavor": {
        "vcpus": 1, "memory_mb": 512, "root_gb": 1, "extra_specs": extra or {}}, **fields})


@pytest.mark.parametrize("extra, fields, want", [
    ({}, {"priority": 7}, priority.Priority(7, False)),
    ({}, {"preemptible": True}, priority.Priority(None, True)),
    ({"berth:priority": "7"}, {"priority": 7, "preemptible": False},
     priority.Priority(7, False)),
    ({"berth:preemptible": "true"}, {"priority": -2}, priority.Priority(-2, True)),
])
def test_request_fields_mirror_the_extra_specs(extra, fields, want):
    spec = _fields(extra, **fields)
    assert spec.priority == want
    again = RequestSpec.from_primitive(spec.to_primitive())
    assert again.priority == want


@pytest.mark.parametrize("extra, fields, field, text", [
    ({}, {"priority": "7"}, "priority", "expected an integer"),
    ({}, {"priority": True}, "priority", "expected an integer"),
    ({}, {"priority": 2 ** 31}, "priority", "expected an integer"),
    ({}, {"preemptible": "yes"}, "preemptible", "expected true or false"),
    ({"berth:priority": "5"}, {"priority": 6}, "priority", "conflicts with"),
    ({"berth:preemptible": "false"}, {"preemptible": True}, "preemptible", "conflicts with"),
])
def test_request_fields_bad_input_names_the_field(extra, fields, field, text):
    with pytest.raises(exception.InvalidRequest) as e:
        _fields(extra, **fields)
    assert e.value.field == field
    assert text in str(e.value)
