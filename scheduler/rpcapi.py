"""Client side of the scheduler RPC API (the methods of ``scheduler.manager``).

API versions:

* 1.0 - select_destinations, release, reschedule, report_compute_node,
  report_pci_devices, aggregate_create/update/delete/add_host/remove_host/
  set_metadata/list, list_hosts, show_host, ping; heartbeat (for berth-agent)
  and capacity, added without a version bump while Berth is unreleased (an
  older daemon answers them with NoSuchMethod).

Errors raised by the daemon come back as the same ``scheduler.exception``
types. Payloads are checked to be plain JSON here too, so a value that cannot
travel is refused locally with ``InvalidRequest`` instead of a transport error.
"""
from __future__ import annotations

import uuid as uuidlib
from typing import Any

import oslo_messaging
from oslo_config import cfg
from oslo_log import log as logging

from scheduler import rpc

LOG = logging.getLogger(__name__)

_UNSET = object()


class SchedulerAPI:
    """Calls the scheduler daemon over ``[scheduler] topic``.

    ``timeout`` overrides ``[DEFAULT] rpc_response_timeout`` for every call
    (select_destinations excepted: it waits up to ``[scheduler] long_rpc_timeout``
    and uses ``timeout`` as its heartbeat interval). ``retry`` bounds how often a
    lost broker connection is retried before ``MessageDeliveryFailure``
    (None: forever).
    """

    VERSION = "1.0"

    def __init__(self, conf: cfg.ConfigOpts = cfg.CONF, *,
                 transport: oslo_messaging.Transport | None = None,
                 topic: str | None = None, timeout: float | None = None,
                 retry: int | None = None) -> None:
        self.conf = conf
        self._own_transport = transport is None
        self.transport = transport or rpc.get_transport(conf)
        self.timeout = timeout
        self.client = rpc.get_client(
            self.transport, topic or conf.scheduler.topic,
            version_cap=conf.scheduler.rpc_version_cap,
            timeout=timeout, retry=retry)
        admin = rpc.admin_topic(conf) if topic is None else None
        self.admin_client = self.client if admin is None else rpc.get_client(
            self.transport, admin, version_cap=conf.scheduler.rpc_version_cap,
            timeout=timeout, retry=retry)

    def close(self) -> None:
        if self._own_transport:
            self.transport.cleanup()

    def __enter__(self) -> SchedulerAPI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, ctxt, method: str, **kwargs: Any) -> Any:
        rpc.check_json(kwargs, "arguments")
        client = self.client if method in rpc.COMPUTE_METHODS else self.admin_client
        return client.prepare(version="1.0").call(ctxt or rpc.new_context(), method,
                                                  **kwargs)

    # -- placement --------------------------------------------------------------------
    def select_destinations(self, ctxt, request_spec: dict,
                            instance_uuids: list[str] | None = None,
                            return_alternates: bool = False,
                            dry_run: bool = False) -> list[list[dict]]:
        """One list per instance: the chosen host first, then the alternates.

        A call that times out is sent again ``[scheduler] select_retries`` times
        with the same instance UUIDs (picked here when none are given); the
        scheduler answers a retry of a placed request with its placements.
        """
        rpc.check_json(request_spec, "request_spec")
        monitor = self.timeout or self.conf.rpc_response_timeout
        cctxt = self.client.prepare(version="1.0",
                                    timeout=self.conf.scheduler.long_rpc_timeout,
                                    call_monitor_timeout=monitor)
        retries = 0 if dry_run else self.conf.scheduler.select_retries
        if retries and instance_uuids is None and isinstance(request_spec, dict) \
                and not request_spec.get("instance_uuids"):
            count = request_spec.get("num_instances", 1)
            if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 1000:
                instance_uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        ctxt = ctxt or rpc.new_context()
        for attempt in range(retries + 1):
            try:
                return cctxt.call(ctxt, "select_destinations",
                                  request_spec=request_spec, instance_uuids=instance_uuids,
                                  return_alternates=return_alternates, dry_run=dry_run)
            except oslo_messaging.MessagingTimeout:
                if attempt == retries or not (instance_uuids or
                                              request_spec.get("instance_uuids")):
                    raise
                LOG.warning("select_destinations for %s timed out; sending it again "
                            "(%d of %d)", instance_uuids or request_spec["instance_uuids"],
                            attempt + 1, retries)

    def capacity(self, ctxt, request_spec: dict | list, per_az: bool = False,
                 per_aggregate: bool = False) -> list[dict]:
        """How many more instances of each request fit now (``scheduler.capacity``).

        Exact dry runs of the real filters: it can take seconds on a big fleet,
        so it waits up to ``[scheduler] long_rpc_timeout`` like select_destinations.
        """
        rpc.check_json(request_spec, "request_spec")
        monitor = self.timeout or self.conf.rpc_response_timeout
        cctxt = self.client.prepare(version="1.0",
                                    timeout=self.conf.scheduler.long_rpc_timeout,
                                    call_monitor_timeout=monitor)
        return cctxt.call(ctxt or rpc.new_context(), "capacity", request_spec=request_spec,
                          per_az=per_az, per_aggregate=per_aggregate)

    def release(self, ctxt, instance_uuid: str) -> bool:
        return self._call(ctxt, "release", instance_uuid=instance_uuid)

    def reschedule(self, ctxt, instance_uuid: str, failed_host: str) -> list[dict]:
        return self._call(ctxt, "reschedule", instance_uuid=instance_uuid,
                          failed_host=failed_host)

    # -- host reporting ---------------------------------------------------------------
    def report_compute_node(self, ctxt, node: dict) -> dict:
        return self._call(ctxt, "report_compute_node", node=node)

    def report_pci_devices(self, ctxt, node: str, devices: list[dict]) -> dict:
        return self._call(ctxt, "report_pci_devices", node=node, devices=devices)

    def heartbeat(self, ctxt, host: str) -> bool:
        """``host`` is up (berth-agent, between full reports)."""
        return self._call(ctxt, "heartbeat", host=host)

    # -- aggregates -------------------------------------------------------------------
    def aggregate_create(self, ctxt, name: str, availability_zone: str | None = None,
                         metadata: dict | None = None,
                         hosts: list[str] | None = None) -> dict:
        return self._call(ctxt, "aggregate_create", name=name,
                          availability_zone=availability_zone, metadata=metadata,
                          hosts=hosts)

    def aggregate_update(self, ctxt, name: str, new_name: str | None = None,
                         availability_zone: Any = _UNSET) -> dict:
        """``availability_zone=None`` clears the zone; leaving it out keeps it."""
        kw: dict[str, Any] = {"name": name, "new_name": new_name}
        if availability_zone is not _UNSET:
            kw["availability_zone"] = availability_zone
        return self._call(ctxt, "aggregate_update", **kw)

    def aggregate_delete(self, ctxt, name: str) -> bool:
        return self._call(ctxt, "aggregate_delete", name=name)

    def aggregate_add_host(self, ctxt, name: str, host: str) -> dict:
        return self._call(ctxt, "aggregate_add_host", name=name, host=host)

    def aggregate_remove_host(self, ctxt, name: str, host: str) -> dict:
        return self._call(ctxt, "aggregate_remove_host", name=name, host=host)

    def aggregate_set_metadata(self, ctxt, name: str, metadata: dict) -> dict:
        return self._call(ctxt, "aggregate_set_metadata", name=name, metadata=metadata)

    def aggregate_list(self, ctxt) -> list[dict]:
        return self._call(ctxt, "aggregate_list")

    # -- reading ----------------------------------------------------------------------
    def list_hosts(self, ctxt) -> list[dict]:
        return self._call(ctxt, "list_hosts")

    def show_host(self, ctxt, name: str) -> dict:
        return self._call(ctxt, "show_host", name=name)

    def ping(self, ctxt=None) -> dict:
        return self._call(ctxt, "ping")
