"""SchedulerManager: payloads validated on arrival, replies plain JSON, DB ops wired."""
from __future__ import annotations

import time
import uuid

import oslo_messaging
import pytest
import sqlalchemy as sa

from db import models
from scheduler import exception, rpc
from scheduler.manager import RPC_API_VERSION, SchedulerManager
from scheduler.request_spec import RequestSpec

SPEC = {"flavor": {"vcpus": 2, "memory_mb": 2048, "root_gb": 10}}
HOST = {"host": "compute-001", "vcpus": 8, "memory_mb": 16384, "local_gb": 100}
U1 = "11111111-1111-1111-1111-111111111111"
U2 = "22222222-2222-2222-2222-222222222222"
#: Berth's own tools' context: the [scheduler] caller_roles (service).
CTX = rpc.new_context()


class FakeSelection:
    def __init__(self, instance_uuid, host):
        self.instance_uuid, self.host = instance_uuid, host

    def to_primitive(self):
        return {"instance_uuid": self.instance_uuid, "host": self.host}


class FakeScheduler:
    """Records calls; answers like FilterScheduler."""

    def __init__(self):
        self.calls = []

    def parse_request(self, data):
        return RequestSpec.from_primitive(data)

    def select_destinations(self, spec, instance_uuids=None, return_alternates=False,
                            dry_run=False, pending=False):
        self.calls.append(("select", spec, instance_uuids, return_alternates, dry_run))
        self.pending = pending
        if spec.vcpus > 64:
            raise exception.NoValidHost(reason="0/1 hosts available", summary={"hosts": 1})
        uuids = instance_uuids or [str(uuid.uuid4()) for _ in range(spec.num_instances)]
        return [[FakeSelection(u, "compute-001"), FakeSelection(u, "compute-002")]
                for u in uuids]

    def release(self, instance_uuid):
        self.calls.append(("release", instance_uuid))
        return instance_uuid == U1

    def reschedule(self, instance_uuid, failed_host, pending=False):
        self.calls.append(("reschedule", instance_uuid, failed_host))
        self.pending = pending
        return [FakeSelection(instance_uuid, "compute-002")]

    def confirm(self, instance_uuids, project=None):
        """Every instance but U2 holds its placement."""
        self.calls.append(("confirm", list(instance_uuids)))
        return ([u for u in instance_uuids if u != U2],
                [u for u in instance_uuids if u == U2])


class Direct:
    """Calls the endpoint as the dispatcher would, re-raising Berth's errors
    (``expected_exceptions`` wraps them for oslo.messaging)."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.scheduler = endpoint.scheduler

    def __getattr__(self, name):
        method = getattr(self.endpoint, name)

        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except oslo_messaging.ExpectedException as e:
                raise e.exc_info[1] from None
        return call


@pytest.fixture
def manager(sqlite_db):
    return Direct(SchedulerManager(sqlite_db, FakeScheduler(), backend="threading"))


def test_berth_errors_are_expected_exceptions(sqlite_db):
    """So the daemon logs them at DEBUG and the client gets the original type."""
    endpoint = SchedulerManager(sqlite_db, FakeScheduler())
    with pytest.raises(oslo_messaging.ExpectedException) as e:
        endpoint.release(CTX, "nope")
    assert isinstance(e.value.exc_info[1], exception.InvalidRequest)


def test_select_destinations_returns_primitives(manager):
    out = manager.select_destinations(CTX, SPEC, instance_uuids=[U1], return_alternates=True)
    assert out == [[{"instance_uuid": U1, "host": "compute-001"},
                    {"instance_uuid": U1, "host": "compute-002"}]]
    _, spec, uuids, alternates, dry_run = manager.scheduler.calls[0]
    assert (spec.vcpus, uuids, alternates, dry_run) == (2, [U1], True, False)


@pytest.mark.parametrize("kwargs, field", [
    ({"request_spec": []}, "request_spec"),
    ({"request_spec": {"flavor": {"vcpus": 1}}}, "flavor.memory_mb"),
    ({"request_spec": {**SPEC, "bogus": 1}}, "bogus"),
    ({"request_spec": {**SPEC, "num_instances": "2"}}, "num_instances"),
    ({"request_spec": {**SPEC, "force_hosts": ["h"] * 5000}}, "force_hosts"),
    ({"request_spec": {**SPEC, "project_id": float("nan")}}, "request_spec.project_id"),
    ({"request_spec": SPEC, "instance_uuids": "x"}, "instance_uuids"),
    ({"request_spec": SPEC, "instance_uuids": ["not-a-uuid"]}, "instance_uuids[0]"),
    ({"request_spec": SPEC, "instance_uuids": [U1] * 2000}, "instance_uuids"),
    ({"request_spec": SPEC, "instance_uuids": [U1, U1]}, "instance_uuids"),
    ({"request_spec": SPEC, "instance_uuids": [U1, str(uuid.uuid4())]}, "instance_uuids"),
    ({"request_spec": SPEC, "dry_run": "yes"}, "dry_run"),
    ({"request_spec": SPEC, "return_alternates": 1}, "return_alternates"),
])
def test_select_destinations_refuses_bad_payloads(manager, kwargs, field):
    with pytest.raises(exception.InvalidRequest) as e:
        manager.select_destinations(CTX, **kwargs)
    assert e.value.field.startswith(field), (e.value.field, e.value.reason)
    assert manager.scheduler.calls == []


def test_no_valid_host_passes_through(manager):
    with pytest.raises(exception.NoValidHost):
        manager.select_destinations(CTX, {"flavor": {"vcpus": 100, "memory_mb": 1,
                                                    "root_gb": 1}})


def test_release_and_reschedule(manager):
    assert manager.release(CTX, U1) is True
    assert manager.release(CTX, str(uuid.uuid4())) is False
    assert manager.reschedule(CTX, U1, "compute-001") == [
        {"instance_uuid": U1, "host": "compute-002"}]
    with pytest.raises(exception.InvalidRequest, match="instance_uuid"):
        manager.release(CTX, 12)
    with pytest.raises(exception.InvalidRequest, match="failed_host"):
        manager.reschedule(CTX, U1, "")
    with pytest.raises(exception.InvalidRequest, match="failed_host"):
        manager.reschedule(CTX, U1, "x" * 300)


def test_report_compute_node_upserts_and_bumps_generation(manager, sqlite_db):
    first = manager.report_compute_node(CTX, HOST)
    assert (first["host"], first["vcpus"]) == ("compute-001", 8)
    second = manager.report_compute_node(CTX, {**HOST, "vcpus": 16})
    assert second["vcpus"] == 16
    assert second["generation"] > first["generation"]
    assert [h["host"] for h in manager.list_hosts(CTX)] == ["compute-001"]
    assert manager.show_host(CTX, "compute-001")["vcpus"] == 16


@pytest.mark.parametrize("node, field", [
    ("compute-001", "node"),
    ({**HOST, "vcpus": -1}, "node.vcpus"),
    ({**HOST, "bogus": 1}, "node.bogus"),
    ({**HOST, "stats": {"k": float("inf")}}, "node.stats.k"),
])
def test_report_compute_node_refuses_bad_payloads(manager, sqlite_db, node, field):
    with pytest.raises(exception.InvalidRequest) as e:
        manager.report_compute_node(CTX, node)
    assert e.value.field.startswith(field), e.value.field
    # InvalidFleet is sent as its scheduler.exception base, which clients can rebuild.
    assert type(e.value) is exception.InvalidRequest
    with sqlite_db.reader() as session:
        assert session.scalar(sa.select(sa.func.count(models.ComputeNode.id))) == 0


def test_report_pci_devices(manager, sqlite_db):
    manager.report_compute_node(CTX, HOST)
    dev = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
           "dev_type": "type-PF", "numa_node": 0}
    manager.report_pci_devices(CTX, "compute-001", [dev])
    assert manager.show_host(CTX, "compute-001")["pci_devices"]["total"] == 1
    with pytest.raises(exception.InvalidRequest) as e:
        manager.report_pci_devices(CTX, "compute-001", [dict(dev, vendor_id="zz")])
    assert e.value.field.startswith("devices[0]")
    with pytest.raises(exception.InvalidRequest, match="more than"):
        manager.report_pci_devices(CTX, "compute-001", [dev] * 5000)
    with pytest.raises(exception.NotFound):
        manager.report_pci_devices(CTX, "nope", [dev])


def test_aggregates(manager):
    manager.report_compute_node(CTX, HOST)
    agg = manager.aggregate_create(CTX, "fast", availability_zone="az1",
                                   metadata={"ssd": True, "n": 2})
    assert agg["name"] == "fast"
    manager.aggregate_add_host(CTX, "fast", "compute-001")
    manager.aggregate_set_metadata(CTX, "fast", {"gpu": "1"})
    manager.aggregate_update(CTX, "fast", new_name="faster")
    names = [a["name"] for a in manager.aggregate_list(CTX)]
    assert names == ["faster"]
    assert manager.show_host(CTX, "compute-001")["availability_zone"] == "az1"
    manager.aggregate_update(CTX, "faster", availability_zone=None)
    manager.aggregate_remove_host(CTX, "faster", "compute-001")
    assert manager.aggregate_delete(CTX, "faster") is True
    with pytest.raises(exception.NotFound):
        manager.aggregate_delete(CTX, "faster")
    with pytest.raises(exception.InvalidRequest, match="metadata"):
        manager.aggregate_create(CTX, "x", metadata={"k": ["list"]})
    with pytest.raises(exception.InvalidRequest, match="bogus"):
        manager.aggregate_update(CTX, "x", bogus=1)
    with pytest.raises(exception.InvalidRequest, match="name"):
        manager.aggregate_create(CTX, "bad\nname")


def test_aggregate_membership_arguments(manager):
    for name in ("compute-001", "compute-002"):
        manager.report_compute_node(CTX, dict(HOST, host=name))
    manager.aggregate_create(CTX, "fast")
    for kwargs, field in (({}, "host"), ({"host": "compute-001", "hosts": []}, "hosts"),
                          ({"hosts": "compute-001"}, "hosts"), ({"hosts": []}, "hosts"),
                          ({"hosts": ["compute-001", 7]}, "hosts[1]"),
                          ({"hosts": ["compute-001"] * 10001}, "hosts")):
        with pytest.raises(exception.InvalidRequest) as caught:
            manager.aggregate_add_host(CTX, "fast", **kwargs)
        assert caught.value.field == field, kwargs
    agg = manager.aggregate_add_host(CTX, "fast", hosts=["compute-002", "compute-001"])
    assert agg["hosts"] == ["compute-001", "compute-002"]
    with pytest.raises(exception.NotFound) as caught:
        manager.aggregate_remove_host(CTX, "fast", hosts=["compute-001", "compute-003"])
    assert caught.value.name == "compute-003"
    assert manager.aggregate_remove_host(CTX, "fast", "compute-001")["hosts"] == ["compute-002"]


def test_ping(manager):
    info = manager.ping(CTX)
    assert info["version"] == RPC_API_VERSION and info["backend"] == "threading"


def test_a_database_that_does_not_answer_is_a_typed_retryable_error(tmp_path, caplog):
    """A locked SQLite database (another process holds its write lock) makes
    writes fail: callers get ServiceUnavailable, the log gets one WARNING for
    the outage (not one traceback per call) and one INFO when it is over."""
    import logging
    import sqlite3

    from db import migration
    from db.api import Database

    path = tmp_path / "locked.sqlite"
    db = Database(f"sqlite:///{path}?timeout=0.05")
    migration.db_sync(db)
    endpoint = Direct(SchedulerManager(db, FakeScheduler()))
    report = {"host": "c1", "vcpus": 4, "memory_mb": 4096, "local_gb": 10}
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    caplog.set_level(logging.DEBUG, logger="scheduler.endpoints.rpc_method")
    try:
        for _ in range(3):
            with pytest.raises(exception.ServiceUnavailable) as err:
                endpoint.report_compute_node(CTX, report)
            assert err.value.retryable and "database" in err.value.reason
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    endpoint.report_compute_node(CTX, report)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Database unavailable" in warnings[0].getMessage()
    assert any("answers again" in r.getMessage() and "3 calls refused" in r.getMessage()
               for r in caplog.records if r.levelno == logging.INFO)
    assert not [r for r in caplog.records if r.exc_info]
    db.dispose()


def test_a_call_in_flight_when_the_outage_began_does_not_end_it(caplog):
    """A call that started before the database went away and still succeeded
    (its database work was done) does not end the outage: one WARNING per
    outage, not one more each time such a call lands (seen in the fault suite)."""
    import logging

    from scheduler.endpoints import rpc_method

    caplog.set_level(logging.INFO, logger="scheduler.endpoints.rpc_method")
    outage = rpc_method.Outage()
    in_flight = time.monotonic()
    outage.failed(RuntimeError("gone"))
    outage.answered(in_flight)
    outage.failed(RuntimeError("gone"))
    assert outage.since is not None
    outage.answered(time.monotonic())
    assert outage.since is None
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in lines] == [logging.WARNING, logging.INFO]
    assert "2 calls refused" in lines[1][1]


def test_other_database_errors_stay_faults(sqlite_db, caplog):
    """A broken statement is a bug, not an outage: logged with its traceback and
    answered as an InternalError, not as ServiceUnavailable."""
    from scheduler.endpoints import rpc_method

    class Broken(FakeScheduler):
        def release(self, instance_uuid):
            raise sa.exc.ProgrammingError("SELECT nope", {}, Exception("no such column"))
    endpoint = Direct(SchedulerManager(sqlite_db, Broken()))
    with pytest.raises(exception.InternalError):
        endpoint.release(CTX, U1)
    assert rpc_method.OUTAGE.since is None
    assert any(r.exc_info for r in caplog.records if "Unexpected error" in r.getMessage())
