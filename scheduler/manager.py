"""The scheduler's RPC endpoint (API version 1.0; README "Command-line reference").

Every method validates its payload on arrival and answers with plain JSON
values. Berth's own errors (``InvalidRequest``, ``NoValidHost``, ``NotFound``,
``Conflict``) are expected outcomes: oslo.messaging sends them to the caller as
the same types and logs them at DEBUG, not as server tracebacks.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import oslo_messaging
import sqlalchemy as sa
from oslo_config import cfg
from oslo_log import log as logging
from oslo_serialization import jsonutils

from db import aggregates, claims, hosts, limits, models
from db import pci as db_pci
from scheduler import exception, fleet, policy
from scheduler.request_spec import RequestSpec
from scheduler.rpc import ALLOWED_REMOTE_EXMODS, check_json

LOG = logging.getLogger(__name__)

RPC_API_VERSION = "1.0"

MAX_NAME = 255          # host, node, aggregate names and metadata keys/values
MAX_INSTANCES = 1000    # instance_uuids in one select_destinations
MAX_PCI_DEVICES = 4096  # devices in one report_pci_devices
MAX_METADATA = 128      # keys in one aggregate metadata update
MAX_AGGREGATE_HOSTS = 10000

def _wire_error(error: exception.BerthError) -> exception.BerthError:
    """The same error as a type of a module the client may rebuild
    (``scheduler.rpc.ALLOWED_REMOTE_EXMODS``; e.g. ``fleet.InvalidFleet`` travels
    as InvalidRequest)."""
    for cls in type(error).__mro__:
        if cls.__module__ in ALLOWED_REMOTE_EXMODS:
            if cls is type(error):
                return error
            return cls(error.message, **error.kwargs)
    return exception.BerthError(error.message)


def _reply(error: exception.BerthError) -> oslo_messaging.ExpectedException:
    """``error`` as an expected exception without its traceback: oslo.messaging
    sends the formatted traceback of what it is given, and the caller must not see
    the server's files and lines."""
    error = error.with_traceback(None)
    wrapped = oslo_messaging.ExpectedException()
    wrapped.exc_info = (type(error), error, None)
    return wrapped


#: Methods whose policy target is not the caller's project: they authorize
#: themselves (release and reschedule, against the instance's project).
_AUTHORIZED_INSIDE = frozenset({"release", "reschedule"})


def _expected(method: Callable) -> Callable:
    """Berth's errors are answers, not server faults: oslo.messaging logs them at
    DEBUG and sends them to the caller, who gets the same exception type. Any
    other exception is a fault: logged here with its traceback, answered with an
    InternalError that names the request id and nothing else."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, ctxt, *args, **kwargs):
        try:
            signature.bind(self, ctxt, *args, **kwargs)
        except TypeError as e:      # a missing or unknown argument is the caller's error
            raise _reply(exception.InvalidRequest(field="arguments", reason=str(e))) \
                from None
        try:
            if method.__name__ not in _AUTHORIZED_INSIDE:
                self.policy.authorize(ctxt, method.__name__)
            return method(self, ctxt, *args, **kwargs)
        except exception.BerthError as e:
            error = _wire_error(e)
        except Exception:
            request_id = getattr(ctxt, "request_id", None)
            LOG.exception("Unexpected error in %s (request %s)", method.__name__, request_id)
            error = exception.InternalError(method=method.__name__, request_id=request_id)
        raise _reply(error) from None

    wrapper.rpc_method = True
    return wrapper


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise exception.InvalidRequest(field=field, reason=f"expected a non-empty string, "
                                                           f"got {_show(value)}")
    if len(value) > MAX_NAME:
        raise exception.InvalidRequest(field=field,
                                       reason=f"longer than {MAX_NAME} characters")
    if limits.has_control(value):
        raise exception.InvalidRequest(field=field, reason="contains control characters")
    if not value.strip():
        raise exception.InvalidRequest(field=field, reason="blank")
    return value


def _opt_name(value: Any, field: str) -> str | None:
    return None if value is None else _name(value, field)


def _uuid(value: Any, field: str) -> str:
    if not isinstance(value, str) or len(value) > 64:
        raise exception.InvalidRequest(field=field, reason=f"expected a UUID, got {_show(value)}")
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise exception.InvalidRequest(field=field,
                                       reason=f"expected a UUID, got {_show(value)}") from None


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise exception.InvalidRequest(field=field,
                                       reason=f"expected true or false, got {_show(value)}")
    return value


def _dict(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise exception.InvalidRequest(field=field, reason=f"expected an object, "
                                                           f"got {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _metadata(value: Any, field: str) -> dict[str, str | None]:
    """Aggregate metadata: name -> string value, or None to delete the key."""
    check_json(value, field)
    _dict(value, field)
    if len(value) > MAX_METADATA:
        raise exception.InvalidRequest(field=field, reason=f"more than {MAX_METADATA} keys")
    out: dict[str, str | None] = {}
    for k, v in value.items():
        _name(k, f"{field}.{k}")
        if v is not None and not isinstance(v, str):
            # Numbers and booleans are accepted as the strings they stand for.
            if isinstance(v, bool | int | float):
                v = str(v).lower() if isinstance(v, bool) else str(v)
            else:
                raise exception.InvalidRequest(field=f"{field}.{k}",
                                               reason="expected a string or null")
        if v is not None and len(v) > MAX_NAME:
            raise exception.InvalidRequest(field=f"{field}.{k}",
                                           reason=f"longer than {MAX_NAME} characters")
        out[k] = v
    return out


_CAPACITY = (("vcpus", "reserved_host_cpus", "cpu_allocation_ratio", "vcpus_used", 1),
             ("memory_mb", "reserved_host_memory_mb", "ram_allocation_ratio",
              "memory_mb_used", 1),
             ("local_gb", "reserved_host_disk_mb", "disk_allocation_ratio",
              "disk_mb_used", 1024))


def _check_not_below_usage(session, record) -> None:
    """Refuse a report that leaves the node less capacity than its allocations use
    (the field named is the capacity); the operator drains the host first."""
    cn = models.ComputeNode
    node = session.execute(sa.select(cn).where(
        cn.hypervisor_hostname == record.node, cn.deleted == 0)).scalars().first()
    if node is None:
        return
    for total, reserved, ratio, used_col, unit in _CAPACITY:
        used = getattr(node, used_col)
        if not used:
            continue
        cap = ((getattr(record, total) * unit - getattr(record, reserved))
               * getattr(record, ratio))
        if used > cap:
            raise exception.InvalidRequest(
                field=f"node.{total}",
                reason=f"leaves {cap:g} for {used} already allocated on {record.node} "
                       f"({used_col}); release or move instances first")


def _primitive(value: Any) -> Any:
    """Plain JSON values for the reply (datetimes become ISO strings)."""
    return jsonutils.to_primitive(value, convert_instances=True, convert_datetime=True)


class _Target(oslo_messaging.Target):
    """The endpoint's target, which oslo.messaging would also dispatch a call of a
    method named ``target`` to: refused like any unknown method."""

    def __call__(self, *args, **kwargs):
        raise _reply(exception.InvalidRequest(field="method",
                                              reason="unknown method 'target'")) from None


class UnknownMethods:
    """The last endpoint of the RPC server: answers a method no other endpoint has
    with InvalidRequest naming it (oslo.messaging's own NoSuchMethod reply would
    carry its traceback)."""

    target = _Target(version=RPC_API_VERSION)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def unknown(ctxt, **kwargs):
            raise _reply(exception.InvalidRequest(
                field="method", reason=f"unknown method {_show(name)}")) from None
        return unknown


class TopicEndpoint:
    """The manager's methods of one topic (``scheduler.rpc.COMPUTE_METHODS`` or
    ``ADMIN_METHODS``); the others are refused with InvalidRequest naming the
    method, so broker permissions on the topics decide who may call what. (No
    ``target`` of its own: oslo.messaging's default, version 1.0, and a call of
    ``target`` reaches UnknownMethods.)"""

    def __init__(self, manager: SchedulerManager, methods: frozenset[str] | None,
                 topic: str) -> None:
        """``methods`` None: every RPC method of the manager (the ``_expected``
        ones, and ``ping``), never its other attributes (``db``, ``conf`` ...)."""
        self._manager = manager
        self._methods = methods
        self._topic = topic

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._manager, name, None)
        is_rpc = name == "ping" or getattr(attr, "rpc_method", False)
        if not is_rpc:
            raise AttributeError(name)
        if self._methods is None or name in self._methods:
            return attr
        topic = self._topic

        def refused(ctxt, **kwargs):
            raise _reply(exception.InvalidRequest(
                field="method", reason=f"{name} is not served on topic {topic}")) from None
        return refused


class SchedulerManager:
    """RPC endpoint: validates, then hands off to the scheduler and the DB modules.

    ``scheduler`` is a ``FilterScheduler`` (or anything with its
    ``select_destinations`` / ``release`` / ``reschedule``); ``db`` is the
    worker's own ``Database``.
    """

    target = oslo_messaging.Target(version=RPC_API_VERSION)

    def __init__(self, db, scheduler, conf: cfg.ConfigOpts = cfg.CONF,
                 backend: str = "threading", worker: int = 0) -> None:
        self.db = db
        self.scheduler = scheduler
        self.conf = conf
        self.backend = backend
        self.worker = worker
        self.policy = policy.Policy(conf)
        self._started = time.monotonic()

    # -- placement --------------------------------------------------------------------
    @_expected
    def select_destinations(self, ctxt, request_spec, instance_uuids=None,
                            return_alternates=False, dry_run=False) -> list[list[dict]]:
        check_json(request_spec, "request_spec")
        uuids = self._instance_uuids(instance_uuids)
        return_alternates = _bool(return_alternates, "return_alternates")
        dry_run = _bool(dry_run, "dry_run")
        parse = getattr(self.scheduler, "parse_request", RequestSpec.from_primitive)
        spec = parse(request_spec)
        if uuids is not None and spec.instance_uuids is None \
                and len(uuids) != spec.num_instances:
            raise exception.InvalidRequest(
                field="instance_uuids",
                reason=f"{len(uuids)} given for num_instances={spec.num_instances}")
        result = self.scheduler.select_destinations(
            spec, instance_uuids=uuids, return_alternates=return_alternates,
            dry_run=dry_run)
        return [[s.to_primitive() for s in alternatives] for alternatives in result]

    @_expected
    def release(self, ctxt, instance_uuid) -> bool:
        instance_uuid = _uuid(instance_uuid, "instance_uuid")
        self._authorize_instance(ctxt, "release", instance_uuid)
        return bool(self.scheduler.release(instance_uuid))

    @_expected
    def reschedule(self, ctxt, instance_uuid, failed_host) -> list[dict]:
        instance_uuid = _uuid(instance_uuid, "instance_uuid")
        failed_host = _name(failed_host, "failed_host")
        self._authorize_instance(ctxt, "reschedule", instance_uuid)
        return [s.to_primitive() for s in self.scheduler.reschedule(instance_uuid, failed_host)]

    def _authorize_instance(self, ctxt, method: str, instance_uuid: str) -> None:
        """The policy check of a call on one instance, against its project. An
        instance that holds nothing is checked against the caller's own project,
        so a refusal never tells whether (or where) another project's runs."""
        if not self.policy.enabled:
            return
        alloc = claims.get_allocation(self.db, instance_uuid)
        project = alloc["project_id"] if alloc else getattr(ctxt, "project_id", None)
        self.policy.authorize(ctxt, method, {"project_id": project})

    @staticmethod
    def _instance_uuids(value: Any) -> list[str] | None:
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise exception.InvalidRequest(field="instance_uuids",
                                           reason=f"expected a list, got {_show(value)}")
        if len(value) > MAX_INSTANCES:
            raise exception.InvalidRequest(field="instance_uuids",
                                           reason=f"more than {MAX_INSTANCES} entries")
        uuids = [_uuid(u, f"instance_uuids[{i}]") for i, u in enumerate(value)]
        if len(set(uuids)) != len(uuids):
            raise exception.InvalidRequest(field="instance_uuids", reason="duplicate UUIDs")
        return uuids

    # -- host reporting ---------------------------------------------------------------
    @_expected
    def report_compute_node(self, ctxt, node) -> dict:
        """Upsert one host (fleet format): capacity, ratios, topology; heartbeats it."""
        check_json(node, "node")
        record = fleet.parse_host(_dict(node, "node"), where="node")
        with self.db.writer() as session:
            _check_not_below_usage(session, record)
            hosts.upsert_host(session, record)
        LOG.info("Host %s reported: %d vCPUs, %d MB RAM, %d GB disk",
                 record.host, record.vcpus, record.memory_mb, record.local_gb)
        return _primitive(hosts.get_host(self.db, record.host))

    @_expected
    def report_pci_devices(self, ctxt, node, devices) -> dict:
        """Replace one node's device list; claimed devices are never dropped."""
        node = _name(node, "node")
        check_json(devices, "devices")
        if not isinstance(devices, list):
            raise exception.InvalidRequest(field="devices",
                                           reason=f"expected a list, got {_show(devices)}")
        if len(devices) > MAX_PCI_DEVICES:
            raise exception.InvalidRequest(field="devices",
                                           reason=f"more than {MAX_PCI_DEVICES} devices")
        parsed = fleet.parse_pci_devices(devices, "devices")
        with self.db.writer_connection() as conn:
            plan = db_pci.report_devices(conn, self._node_id(conn, node), parsed)
        if dataclasses.is_dataclass(plan):
            return _primitive(dataclasses.asdict(plan))
        return _primitive(plan)

    @staticmethod
    def _node_id(conn, name: str) -> int:
        """The live node called ``name``, or the only node of host ``name``."""
        nodes = models.ComputeNode
        for column in (nodes.hypervisor_hostname, nodes.host):
            ids = list(conn.execute(sa.select(nodes.id).where(
                column == name, nodes.deleted == 0)).scalars())
            if len(ids) == 1:
                return ids[0]
            if ids:
                raise exception.InvalidRequest(
                    field="node", reason=f"host {name} has {len(ids)} nodes: name the node")
        raise exception.NotFound(kind="Compute node", name=name)

    # -- aggregates -------------------------------------------------------------------
    @_expected
    def aggregate_create(self, ctxt, name, availability_zone=None, metadata=None,
                         hosts=None) -> dict:
        name = _name(name, "name")
        availability_zone = _opt_name(availability_zone, "availability_zone")
        metadata = None if metadata is None else _metadata(metadata, "metadata")
        host_list = None if hosts is None else self._host_list(hosts)
        return _primitive(aggregates.create_aggregate(
            self.db, name, availability_zone=availability_zone, metadata=metadata,
            hosts=host_list))

    @_expected
    def aggregate_update(self, ctxt, name, new_name=None, **kw) -> dict:
        """Rename and/or change the zone; ``availability_zone=None`` clears it,
        leaving the argument out keeps it."""
        name = _name(name, "name")
        unknown = set(kw) - {"availability_zone"}
        if unknown:
            raise exception.InvalidRequest(field=sorted(unknown)[0], reason="unknown argument")
        args: dict[str, Any] = {"new_name": _opt_name(new_name, "new_name")}
        if "availability_zone" in kw:
            args["availability_zone"] = _opt_name(kw["availability_zone"], "availability_zone")
        return _primitive(aggregates.update_aggregate(self.db, name, **args))

    @_expected
    def aggregate_delete(self, ctxt, name) -> bool:
        aggregates.delete_aggregate(self.db, _name(name, "name"))
        return True

    @_expected
    def aggregate_add_host(self, ctxt, name, host) -> dict:
        return _primitive(aggregates.add_host(self.db, _name(name, "name"),
                                              _name(host, "host")))

    @_expected
    def aggregate_remove_host(self, ctxt, name, host) -> dict:
        return _primitive(aggregates.remove_host(self.db, _name(name, "name"),
                                                 _name(host, "host")))

    @_expected
    def aggregate_set_metadata(self, ctxt, name, metadata) -> dict:
        return _primitive(aggregates.set_metadata(self.db, _name(name, "name"),
                                                  _metadata(metadata, "metadata")))

    @_expected
    def aggregate_list(self, ctxt) -> list[dict]:
        return _primitive(aggregates.list_aggregates(self.db))

    @staticmethod
    def _host_list(value: Any) -> list[str]:
        if not isinstance(value, list):
            raise exception.InvalidRequest(field="hosts",
                                           reason=f"expected a list, got {_show(value)}")
        if len(value) > MAX_AGGREGATE_HOSTS:
            raise exception.InvalidRequest(field="hosts",
                                           reason=f"more than {MAX_AGGREGATE_HOSTS} hosts")
        return [_name(h, f"hosts[{i}]") for i, h in enumerate(value)]

    # -- reading ----------------------------------------------------------------------
    @_expected
    def list_hosts(self, ctxt) -> list[dict]:
        return _primitive(hosts.list_hosts(self.db))

    @_expected
    def show_host(self, ctxt, name) -> dict:
        return _primitive(hosts.get_host(self.db, _name(name, "name")))

    def ping(self, ctxt) -> dict:
        """Liveness and identity of the worker that answered."""
        return {"host": self.conf.host, "pid": os.getpid(), "worker": self.worker,
                "backend": self.backend, "version": RPC_API_VERSION,
                "uptime_s": round(time.monotonic() - self._started, 3)}
