"""No reply carries a traceback or a file path, whatever a broker user sends:
odd method names, versions, argument lists, contexts and envelopes get a typed
error naming the field, and a malformed envelope gets one too when its reply
queue can be read. Inputs that pass validation work or get a typed error."""
from __future__ import annotations

import json
import os

import pytest

from scheduler import exception
from tests.unit.hardening import inproc
from tests.unit.hardening.raw_rpc import RawService, envelope, message, reply_queue

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HOST = {"host": "env-1", "vcpus": 8, "memory_mb": 8192, "local_gb": 100}
SPEC = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    from db import migration
    from db.api import Database

    db = Database(f"sqlite:///{tmp_path_factory.mktemp('env')}/berth.sqlite")
    migration.db_sync(db)
    conf = inproc.configure()
    service = RawService(db, conf)
    try:
        yield service
    finally:
        service.close()
        inproc.unconfigure(conf)
        db.dispose()


def typed_failure(reply: dict | None, cls: type = exception.InvalidRequest) -> dict:
    """The reply's failure: of type ``cls``, without traceback or path."""
    assert reply is not None, "no reply"
    failure = reply["failure"]
    assert failure, reply
    text = json.dumps(failure)
    assert "Traceback" not in text and ".py" not in text and ROOT not in text, text
    assert failure["class"] == cls.__name__, failure
    assert failure["module"] in ("scheduler.exception", "db.errors"), failure
    return failure["kwargs"]


def call(raw, msg, **kw) -> dict | None:
    q = reply_queue()
    return raw.call(envelope(dict(msg, _reply_q=q), **kw), q)


@pytest.mark.parametrize("method", [
    "_may_act_on", "__init__", "__class__", "oslo_rpc_server_ping", "target", "db",
    "no_such", "", 12, None, ["ping"], "x" * 10000,
])
def test_odd_method_names(raw, method):
    kwargs = typed_failure(call(raw, message(method)))
    assert kwargs["field"] == "method"


def test_a_message_without_a_method(raw):
    msg = message()
    del msg["method"]
    assert typed_failure(call(raw, msg))["field"] == "method"


@pytest.mark.parametrize("version", ["9.9", "abc", 12, None, "1.0.0", "", "2.0"])
def test_bad_versions(raw, version):
    assert typed_failure(call(raw, message(version=version)))["field"] == "version"


@pytest.mark.parametrize("args", [[1, 2], "x", None, 5, {"": 1}])
def test_args_that_are_not_a_mapping_of_names(raw, args):
    msg = message("ping")
    msg["args"] = args
    assert typed_failure(call(raw, msg))["field"] == "args"


def test_ping_with_an_argument(raw):
    assert typed_failure(call(raw, message("ping", {"x": 1})))["field"] == "arguments"


@pytest.mark.parametrize("key, value", [
    ("roles", 12), ("roles", "admin"), ("roles", [1]), ("project_id", 12),
    ("project_id", ["p"]), ("project_id", "p\ud800"), ("user_id", {"a": 1}),
    ("request_id", 1.5), ("is_admin", "yes"),
])
def test_contexts_of_the_wrong_types(raw, key, value):
    msg = message("select_destinations", {"request_spec": SPEC, "dry_run": True},
                  context={"roles": ["service"], key: value})
    assert typed_failure(call(raw, msg))["field"] == f"context.{key}"


@pytest.mark.parametrize("timeout", ["x", -1, [1]])
def test_bad_client_timeouts(raw, timeout):
    msg = message("ping", _timeout=timeout)
    q = reply_queue()
    assert typed_failure(raw.call(envelope(dict(msg, _reply_q=q)), q))["field"] == "_timeout"


@pytest.mark.parametrize("oslo_version", ["9.0", "abc", None, 3])
def test_envelope_versions(raw, oslo_version):
    assert typed_failure(call(raw, message("ping"), oslo_version=oslo_version))["field"] \
        == "oslo.version"


def _with_reply_q(text_of: callable) -> tuple[str, str]:
    q = reply_queue()
    return text_of(q), q


@pytest.mark.parametrize("make", [
    # invalid JSON inside a valid envelope
    lambda q: json.dumps({"oslo.version": "2.0",
                          "oslo.message": '{"method": "ping", "_reply_q": "%s", '
                                          '"_msg_id": "abc", "args": {' % q}),
    # a list nested 100,000 deep
    lambda q: json.dumps({"oslo.version": "2.0", "oslo.message":
                          '{"_reply_q": "%s", "_msg_id": "abc", "method": "ping", '
                          '"args": {"x": %s%s}}' % (q, "[" * 100000, "]" * 100000)}),
    # a 5,000-digit integer
    lambda q: json.dumps({"oslo.version": "2.0", "oslo.message":
                          '{"_reply_q": "%s", "_msg_id": "abc", "method": "ping", '
                          '"args": {"x": %s}}' % (q, "9" * 5000)}),
    # the message is not an object (a string that names a reply queue)
    lambda q: json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(
        '"_reply_q": "%s", "_msg_id": "abc"' % q)}),
    # the body itself is not JSON
    lambda q: '{"oslo.version": "2.0", "oslo.message": "{\\"_reply_q\\": \\"%s\\", ' \
              '\\"_msg_id\\": \\"abc\\"' % q,
])
def test_malformed_envelopes_get_a_typed_reply(raw, make):
    body, q = _with_reply_q(make)
    kwargs = typed_failure(raw.call(body, q))
    assert kwargs["field"] in ("message", "oslo.message")


def test_the_service_answers_after_all_that(raw):
    reply = call(raw, message("ping"))
    assert reply["failure"] is None and reply["result"]["version"]


# -- inputs that pass validation work or get a typed error -------------------------------

def test_a_huge_integer_in_a_json_filter_query(raw):
    query = json.dumps([">=", "$free_ram_mb", int("9" * 4000)])
    msg = message("select_destinations",
                  {"request_spec": dict(SPEC, scheduler_hints={"query": query}),
                   "dry_run": True})
    kwargs = typed_failure(call(raw, msg))
    assert kwargs["field"].startswith("scheduler_hints.query")


@pytest.mark.parametrize("method, args, field", [
    ("select_destinations", {"request_spec": dict(SPEC, project_id="p\ud800")},
     "request_spec.project_id"),
    ("select_destinations", {"request_spec": dict(SPEC, user_id="\udfff")},
     "request_spec.user_id"),
    ("select_destinations", {"request_spec": dict(SPEC, flavor=dict(
        SPEC["flavor"], extra_specs={"k\ud800": "v"}))}, "request_spec.flavor.extra_specs"),
    ("aggregate_create", {"name": "agg\ud800"}, "name"),
    ("report_compute_node", {"node": dict(HOST, host="h\ud800")}, "node.host"),
])
def test_lone_surrogates_are_refused_naming_the_field(raw, method, args, field):
    assert typed_failure(call(raw, message(method, args)))["field"] == field


def test_report_pci_devices_with_a_numa_node_beyond_any_host(raw):
    assert call(raw, message("report_compute_node", {"node": HOST}))["failure"] is None
    device = {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
              "dev_type": "type-PCI", "numa_node": 2 ** 40}
    kwargs = typed_failure(call(raw, message("report_pci_devices",
                                             {"node": "env-1", "devices": [device]})))
    assert kwargs["field"] == "devices[0].numa_node"


def test_the_retry_paths_refusals_carry_no_traceback(raw):
    import uuid

    assert call(raw, message("report_compute_node", {"node": HOST}))["failure"] is None
    held = str(uuid.uuid4())
    placed = call(raw, message("select_destinations",
                               {"request_spec": SPEC, "instance_uuids": [held]}))
    assert placed["failure"] is None
    other = dict(SPEC, flavor=dict(SPEC["flavor"], memory_mb=1024))
    kwargs = typed_failure(call(raw, message("select_destinations", {
        "request_spec": other, "instance_uuids": [held]})))
    assert kwargs == {"field": "instance_uuids", "reason": f"already allocated: {held}"}
    huge = dict(SPEC, flavor=dict(SPEC["flavor"], vcpus=4096), num_instances=2)
    typed_failure(call(raw, message("select_destinations", {
        "request_spec": huge, "instance_uuids": [str(uuid.uuid4()), held]})),
        exception.InvalidRequest)
    typed_failure(call(raw, message("select_destinations", {
        "request_spec": huge, "instance_uuids": [str(uuid.uuid4())] * 1 + [
            str(uuid.uuid4())]})), exception.NoValidHost)
