"""The scheduler's RPC endpoint (API version 1.1; doc/source/reference/rpc-api.rst).

Every method validates its payload on arrival and answers with plain JSON
values. Berth's own errors (``InvalidRequest``, ``NoValidHost``, ``NotFound``,
``Conflict``) are expected outcomes: oslo.messaging sends them to the caller as
the same types and logs them at DEBUG, not as server tracebacks.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import oslo_messaging
import sqlalchemy as sa
from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_log import log as logging
from oslo_serialization import jsonutils

from db import aggregates, claims, hosts, limits, models
from db import pci as db_pci
from scheduler import exception, fleet, metrics, policy
from scheduler.request_spec import RequestSpec
from scheduler.rpc import ALLOWED_REMOTE_EXMODS, check_json

LOG = logging.getLogger(__name__)

RPC_API_VERSION = "1.1"

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


def _unreachable(error: Exception) -> bool:
    """Whether a database error means "the database does not answer" (an
    expected condition) rather than a fault of the statement."""
    if isinstance(error, db_exc.DBConnectionError):
        return True
    text = str(error)
    return "database is locked" in text or "Lost connection" in text \
        or "server has gone away" in text


class _Outage:
    """One WARNING when the database stops answering, one INFO when it is back;
    in between, each refused call logs at DEBUG only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.last_failed = 0.0
        self.refused = 0

    def failed(self, error: Exception) -> None:
        with self._lock:
            self.refused += 1
            self.last_failed = time.monotonic()
            first = self.since is None
            if first:
                self.since = self.last_failed
        if first:
            LOG.warning("Database unavailable (%s): calls fail with ServiceUnavailable "
                        "until it answers again", type(error).__name__)
        else:
            LOG.debug("Database still unavailable: %s", error)

    def answered(self, started: float) -> None:
        """A call that started at ``started`` (``time.monotonic``) succeeded. One
        that started before the last refused call proves nothing (it may have
        done its database work before the outage began)."""
        if self.since is None or started <= self.last_failed:
            return
        with self._lock:
            since, refused = self.since, self.refused
            self.since, self.refused = None, 0
        if since is not None:
            LOG.info("Database answers again after %.1f s (%d calls refused meanwhile)",
                     time.monotonic() - since, refused)


_OUTAGE = _Outage()


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
    DEBUG and sends them to the caller, who gets the same exception type. A
    database that does not answer is one of them (``ServiceUnavailable``). Any
    other exception is a fault: logged here with its traceback, answered with an
    InternalError that names the request id and nothing else. Every call is
    counted by result and timed (``scheduler.metrics``)."""
    name = method.__name__
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, ctxt, *args, **kwargs):
        started = time.perf_counter()
        began = time.monotonic()
        try:
            signature.bind(self, ctxt, *args, **kwargs)
        except TypeError as e:      # a missing or unknown argument is the caller's error
            error = exception.InvalidRequest(field="arguments", reason=str(e))
            metrics.count_request(name, error, time.perf_counter() - started)
            raise _reply(error) from None
        error: BaseException | None = None
        try:
            if name not in _AUTHORIZED_INSIDE:
                self.policy.authorize(ctxt, name)
            result = method(self, ctxt, *args, **kwargs)
        except exception.BerthError as e:
            error = _wire_error(e)
        except (db_exc.DBError, sa.exc.SQLAlchemyError) as e:
            if _unreachable(e):
                _OUTAGE.failed(e)
                error = exception.ServiceUnavailable(reason="the database does not answer")
            else:
                error = _internal(name, ctxt)
        except Exception:
            error = _internal(name, ctxt)
        except BaseException as e:  # the call killed (eventlet Timeout, GreenletExit)
            metrics.count_request(name, e, time.perf_counter() - started)
            raise
        else:
            metrics.count_request(name, None, time.perf_counter() - started)
        if error is not None:
            metrics.count_request(name, error, time.perf_counter() - started)
            raise _reply(error) from None
        _OUTAGE.answered(began)
        return result

    wrapper.rpc_method = True
    return wrapper


def _internal(name: str, ctxt) -> exception.BerthError:
    """Log the exception being handled; the InternalError the caller gets."""
    request_id = getattr(ctxt, "request_id", None)
    LOG.exception("Unexpected error in %s (request %s)", name, request_id)
    return exception.InternalError(method=name, request_id=request_id)


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
        # oslo_*: oslo.messaging's reserved endpoint attributes (it warns at
        # start about an endpoint that seems to have one)
        if name.startswith(("_", "oslo_")):
            raise AttributeError(name)

        def unknown(ctxt, **kwargs):
            raise _reply(exception.InvalidRequest(
                field="method", reason=f"unknown method {_show(name)}")) from None
        return unknown


class TopicEndpoint:
    """The manager's methods of one topic (``scheduler.rpc.COMPUTE_METHODS`` or
    ``ADMIN_METHODS``); the others are refused with InvalidRequest naming the
    method, so broker permissions on the topics decide who may call what. A
    call of ``target`` is refused like any unknown method."""

    target = _Target(version=RPC_API_VERSION)

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
                            return_alternates=False, dry_run=False,
                            pending=False) -> list[list[dict]]:
        check_json(request_spec, "request_spec")
        uuids = self._instance_uuids(instance_uuids)
        return_alternates = _bool(return_alternates, "return_alternates")
        dry_run = _bool(dry_run, "dry_run")
        pending = _bool(pending, "pending")
        parse = getattr(self.scheduler, "parse_request", RequestSpec.from_primitive)
        spec = parse(request_spec)
        if uuids is not None and spec.instance_uuids is None \
                and len(uuids) != spec.num_instances:
            raise exception.InvalidRequest(
                field="instance_uuids",
                reason=f"{len(uuids)} given for num_instances={spec.num_instances}")
        kw = {"pending": True} if pending else {}
        result = self.scheduler.select_destinations(
            spec, instance_uuids=uuids, return_alternates=return_alternates,
            dry_run=dry_run, **kw)
        return [[s.to_primitive() for s in alternatives] for alternatives in result]

    @_expected
    def capacity(self, ctxt, request_spec, per_az=False, per_aggregate=False) -> list[dict]:
        """How many more instances of each request fit now; claims nothing.

        ``request_spec``: one request spec (or bare flavor) or a list of them.
        """
        from scheduler import capacity

        check_json(request_spec, "request_spec")
        per_az = _bool(per_az, "per_az")
        per_aggregate = _bool(per_aggregate, "per_aggregate")
        parse = getattr(self.scheduler, "parse_request", RequestSpec.from_primitive)
        requests = capacity.parse_requests(request_spec, parse)
        return capacity.capacity(self.scheduler, requests, per_az=per_az,
                                 per_aggregate=per_aggregate)

    @_expected
    def release(self, ctxt, instance_uuid) -> bool:
        instance_uuid = _uuid(instance_uuid, "instance_uuid")
        if not self._may_act_on(ctxt, "release", instance_uuid):
            return False        # as for an instance that holds nothing
        return bool(self.scheduler.release(instance_uuid))

    @_expected
    def confirm(self, ctxt, instance_uuids) -> dict:
        """The caller holds these placements: their pending claims are kept
        (idempotent), all or none. ``unknown``: instances that hold none (never
        placed, released, or reaped after claim_ttl) — do not build them; then
        none is confirmed, and the others stay pending."""
        uuids = self._instance_uuids(instance_uuids)
        if not uuids:
            raise exception.InvalidRequest(field="instance_uuids",
                                           reason="expected at least one UUID")
        hidden: set[str] = set()
        if self.policy.enabled:     # once per project the instances belong to
            held = claims.allocations_for(self.db, uuids)
            mine = getattr(ctxt, "project_id", None)
            for project in {held[u]["project_id"] if u in held else mine for u in uuids}:
                if self.policy.allows(ctxt, "confirm", {"project_id": project}):
                    continue
                if project == mine:
                    raise exception.Forbidden(rule="berth:confirm")
                # another project's: answered as instances that hold nothing
                hidden.update(u for u in uuids if u in held
                              and held[u]["project_id"] == project)
        if hidden:      # all or none: nothing is confirmed
            return {"confirmed": [], "unknown": [u for u in uuids if u in hidden]}
        confirmed, unknown = self.scheduler.confirm(uuids)
        return {"confirmed": confirmed, "unknown": unknown}

    @_expected
    def reschedule(self, ctxt, instance_uuid, failed_host, pending=False) -> list[dict]:
        instance_uuid = _uuid(instance_uuid, "instance_uuid")
        failed_host = _name(failed_host, "failed_host")
        pending = _bool(pending, "pending")
        if not self._may_act_on(ctxt, "reschedule", instance_uuid):
            # as for an instance that holds nothing (FilterScheduler.reschedule)
            raise exception.NotFound(kind="Allocation", name=instance_uuid)
        kw = {"pending": True} if pending else {}
        return [s.to_primitive()
                for s in self.scheduler.reschedule(instance_uuid, failed_host, **kw)]

    def _may_act_on(self, ctxt, method: str, instance_uuid: str) -> bool:
        """The policy check of a call on one instance, against its project.

        False for an instance of another project the rules refuse the caller:
        the call answers as for an instance that holds nothing, so the answer
        tells neither whether nor where another project's instance runs.
        Forbidden when the rules refuse the caller on its own project (an
        instance that holds nothing counts as the caller's)."""
        if not self.policy.enabled:
            return True
        alloc = claims.get_allocation(self.db, instance_uuid)
        mine = getattr(ctxt, "project_id", None)
        project = alloc["project_id"] if alloc else mine
        if self.policy.allows(ctxt, method, {"project_id": project}):
            return True
        if project != mine:
            return False
        raise exception.Forbidden(rule=f"berth:{method}")

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
        """Upsert one host (fleet format): capacity, ratios, topology; heartbeats it.

        A report without ``disabled`` keeps the host's disabled state, one
        without ``stats`` or ``metrics`` keeps those (an agent does not undo
        what an operator set or imported). Capacity below current usage is
        accepted as the truth about the hardware but disables the host with a
        ``capacity below usage: ...`` reason until a report fits again; the
        reply's ``warnings`` say what is short.
        """
        check_json(node, "node")
        record = fleet.parse_host(_dict(node, "node"), where="node")
        with self.db.writer() as session:
            current = hosts.node_for_update(session, record.node)
            shortfalls = hosts.capacity_shortfalls(current, record) if current else []
            record = self._disabled_state(record, current, "disabled" in node, shortfalls)
            if current is not None:
                kept = {f: json.loads(getattr(current, f) or "{}")
                        for f in ("stats", "metrics") if f not in node}
                record = dataclasses.replace(record, **kept)
            hosts.upsert_host(session, record)
        LOG.info("Host %s reported: %d vCPUs, %d MB RAM, %d GB disk",
                 record.host, record.vcpus, record.memory_mb, record.local_gb)
        if shortfalls:
            LOG.warning("Host %s reported capacity below its usage (%s); host disabled "
                        "until it fits: %s", record.host, "; ".join(shortfalls),
                        record.disabled_reason)
        return dict(_primitive(hosts.get_host(self.db, record.node)),
                    warnings=[hosts.CAPACITY_REASON_PREFIX + s for s in shortfalls])

    @staticmethod
    def _disabled_state(record: fleet.HostRecord, current, explicit: bool,
                        shortfalls: list[str]) -> fleet.HostRecord:
        prefix = hosts.CAPACITY_REASON_PREFIX
        if explicit:
            disabled, reason = record.disabled, record.disabled_reason
        elif current is not None:
            disabled, reason = current.disabled, current.disabled_reason
        else:
            disabled, reason = False, None
        if reason and reason.startswith(prefix):
            disabled, reason = False, None      # recomputed from this report
        if shortfalls and not disabled:
            disabled = True
            reason = (prefix + "; ".join(shortfalls))[:MAX_NAME]
        return dataclasses.replace(record, disabled=disabled, disabled_reason=reason)

    @_expected
    def heartbeat(self, ctxt, host) -> bool:
        """Record that ``host`` is up (between its full reports); NotFound if unknown."""
        hosts.heartbeat(self.db, _name(host, "host"))
        return True

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
        for warning in plan.warnings:
            LOG.warning("Host %s: %s", node, warning)
        if not dataclasses.is_dataclass(plan):
            return _primitive(plan)
        reply = dataclasses.asdict(plan)
        for device in (*reply["add"], *reply["update"]):
            device["tags"] = dict(device["tags"])   # the report format's mapping
        return _primitive(reply)

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
    def aggregate_add_host(self, ctxt, name, host=None, hosts=None) -> dict:
        """Add ``host`` (1.0), or every one of ``hosts`` (1.1) in one
        transaction: nothing is written when one is unknown (NotFound), a
        member already or would be in a second zone (Conflict), each naming
        the host."""
        name = _name(name, "name")
        members = self._members(host, hosts)
        if hosts is None:
            return _primitive(aggregates.add_host(self.db, name, members[0]))
        return _primitive(aggregates.add_hosts(self.db, name, members))

    @_expected
    def aggregate_remove_host(self, ctxt, name, host=None, hosts=None) -> dict:
        """Remove ``host`` (1.0), or every one of ``hosts`` (1.1) in one
        transaction: nothing is removed when one is not a member (NotFound
        naming it)."""
        name = _name(name, "name")
        members = self._members(host, hosts)
        if hosts is None:
            return _primitive(aggregates.remove_host(self.db, name, members[0]))
        return _primitive(aggregates.remove_hosts(self.db, name, members))

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

    @classmethod
    def _members(cls, host: Any, hosts: Any) -> list[str]:
        """The hosts of a membership call: ``host`` or ``hosts``, exactly one."""
        if hosts is None:
            if host is None:
                raise exception.InvalidRequest(field="host",
                                               reason="expected host (or a list in hosts)")
            return [_name(host, "host")]
        if host is not None:
            raise exception.InvalidRequest(field="hosts",
                                           reason="give host or hosts, not both")
        return aggregates.host_names(cls._host_list(hosts))

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
                "release": metrics.release(),
                "uptime_s": round(time.monotonic() - self._started, 3)}
