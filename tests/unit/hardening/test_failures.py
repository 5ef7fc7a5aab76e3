"""Issue 15, part 4: every bad input ends in a typed error naming the field, and
replies never carry the server's traceback or file paths."""
from __future__ import annotations

import logging
import uuid

import pytest
from oslo_config import cfg

from scheduler import exception, rpc
from scheduler.cmd import scheduler as cmd_scheduler
from scheduler.endpoints.topics import UnknownMethods
from scheduler.manager import RPC_API_VERSION
from scheduler.request_spec import RequestSpec
from scheduler.rpcapi import SchedulerAPI
from scheduler.service import SchedulerService
from tests.unit.scheduler.test_manager import SPEC, FakeScheduler

FLAVOR = {"vcpus": 1, "memory_mb": 64, "root_gb": 1}


@pytest.mark.parametrize("value", ["²", "٣", "1e3", "9" * 40, " 2", -1, 0, 10 ** 30])
def test_max_server_per_host_odd_values_are_typed_errors(value):
    with pytest.raises(exception.InvalidRequest) as caught:
        RequestSpec.from_primitive({"flavor": FLAVOR, "instance_group": {
            "uuid": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": value}}})
    assert caught.value.field == "instance_group.rules.max_server_per_host"


def test_max_server_per_host_digits_still_work():
    spec = RequestSpec.from_primitive({"flavor": FLAVOR, "instance_group": {
        "uuid": "g", "policy": "anti-affinity", "rules": {"max_server_per_host": "3"}}})
    assert spec.instance_group.max_server_per_host == 3


class BrokenScheduler(FakeScheduler):
    """Fails as a bug would: an exception that is not one of Berth's."""

    def release(self, instance_uuid):
        raise RuntimeError("secret internal state at /srv/berth/scheduler/x.py line 3")


class BusyScheduler(FakeScheduler):
    """Its database's lock conflicts outlasted the retries."""

    def release(self, instance_uuid):
        from oslo_db import exception as db_exc

        raise db_exc.DBDeadlock("(1205, 'Lock wait timeout exceeded; try restarting "
                                "transaction')")


def _daemon(db, scheduler):
    """An in-process daemon serving ``scheduler``: yields a client of it."""
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    cfg.CONF.set_override("topic", "hard_" + uuid.uuid4().hex[:8], group="scheduler")
    service = SchedulerService(cfg.CONF, backend="threading", transport=transport,
                               scheduler=scheduler, db=db)
    service.start()
    yield SchedulerAPI(cfg.CONF, transport=transport, timeout=10)
    service.stop(5)
    transport.cleanup()
    cfg.CONF.clear_override("topic", group="scheduler")


@pytest.fixture
def busy_daemon(sqlite_db):
    yield from _daemon(sqlite_db, BusyScheduler())


def test_lock_conflicts_past_the_retries_are_service_unavailable(busy_daemon, caplog):
    """Seen on Galera under load: a DBDeadlock left after retry_budget was
    answered InternalError with a traceback in the log; nothing was done, the
    call may be sent again: ServiceUnavailable (retryable), a WARNING."""
    with pytest.raises(exception.ServiceUnavailable) as caught:
        busy_daemon.release(rpc.new_context(), "11111111-1111-1111-1111-111111111111")
    assert "busy" in str(caught.value)
    _no_server_details(caught.value)
    assert not [r for r in caplog.records if r.exc_info]
    assert [r for r in caplog.records if "outlasted" in r.getMessage()
            and r.levelname == "WARNING"]


@pytest.fixture
def daemon(sqlite_db):
    yield from _daemon(sqlite_db, BrokenScheduler())


def _no_server_details(error: BaseException) -> None:
    text = str(error)
    assert "Traceback" not in text
    assert '.py"' not in text and ", line " not in text
    assert "/scheduler/" not in text and "site-packages" not in text


def test_typed_error_replies_carry_no_traceback(daemon):
    """Over oslo.messaging (in-process transport, the real serialisation)."""
    with pytest.raises(exception.InvalidRequest) as caught:
        daemon.select_destinations(None, {"flavor": {"vcpus": 1}})
    assert caught.value.field == "flavor.memory_mb"
    _no_server_details(caught.value)


def test_unexpected_errors_become_internal_error_without_details(daemon, caplog):
    ctxt = rpc.new_context()
    with pytest.raises(exception.InternalError) as caught:
        daemon.release(ctxt, "11111111-1111-1111-1111-111111111111")
    _no_server_details(caught.value)
    assert "secret internal state" not in str(caught.value)
    assert caught.value.method == "release"
    assert caught.value.request_id == ctxt.request_id
    # ... while the server's log has the whole story, under the same request id
    logged = [r for r in caplog.records if "Unexpected error in release" in r.getMessage()]
    assert logged and ctxt.request_id in logged[0].getMessage()
    assert logged[0].exc_info is not None
    # and the worker goes on answering
    assert daemon.ping()["version"] == RPC_API_VERSION


def test_select_still_works_after_a_fault(daemon):
    assert daemon.select_destinations(None, SPEC)[0][0]["host"] == "compute-001"


# -- start-up failures: one line ----------------------------------------------------------

def test_startup_failure_lines():
    import amqp.exceptions
    import sqlalchemy.exc
    from oslo_db import exception as db_exc

    db_err = db_exc.DBConnectionError(sqlalchemy.exc.OperationalError(
        "SELECT 1", {}, Exception("(2003, \"Can't connect\")")))
    line = cmd_scheduler.startup_failure(db_err)
    assert line.startswith("cannot use the database ([database] connection): ")
    assert "\n" not in line
    line = cmd_scheduler.startup_failure(amqp.exceptions.AccessRefused("Login was refused"))
    assert line.startswith("cannot use the message broker ([DEFAULT] transport_url): ")
    assert cmd_scheduler.startup_failure(ValueError("a bug")) is None


def test_server_start_has_no_reserved_attribute_warning(caplog):
    """The catch-all endpoint does not pretend to have oslo.messaging's
    reserved ``oslo_*`` attributes (a WARNING at every worker start)."""
    caplog.set_level(logging.WARNING)
    assert not hasattr(UnknownMethods(), "oslo_rpc_server_ping")
    assert callable(UnknownMethods().anything_else)
    transport = rpc.get_transport(cfg.CONF, url=rpc.IN_PROCESS_TRANSPORT_URL)
    try:
        rpc.get_server(transport, "warn_" + uuid.uuid4().hex[:8], "s",
                       [UnknownMethods()], backend="threading")
    finally:
        transport.cleanup()
    assert not [r for r in caplog.records if "reserved Endpoint" in r.getMessage()]


def test_unknown_method_is_a_typed_error_without_traceback(daemon):
    with pytest.raises(exception.InvalidRequest) as caught:
        daemon._call(None, "drop_all_tables")
    assert caught.value.field == "method" and "drop_all_tables" in caught.value.reason
    _no_server_details(caught.value)


@pytest.mark.parametrize("kwargs", [{}, {"instance_uuid": "x", "bogus": 1}])
def test_wrong_arguments_are_a_typed_error(daemon, kwargs):
    with pytest.raises(exception.InvalidRequest) as caught:
        daemon._call(None, "release", **kwargs)
    assert caught.value.field == "arguments"
    _no_server_details(caught.value)


@pytest.mark.parametrize("attribute", ["db", "conf", "scheduler", "policy", "target"])
def test_manager_attributes_are_not_methods(daemon, attribute):
    """Only RPC methods are callable: the manager's other attributes answer as
    unknown methods, not with a TypeError traceback."""
    with pytest.raises(exception.InvalidRequest) as caught:
        daemon._call(None, attribute)
    assert caught.value.field == "method"
    _no_server_details(caught.value)
