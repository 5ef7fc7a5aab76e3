"""Client side of the scheduler RPC API (the methods of ``scheduler.manager``).

API versions:

* 1.0 - select_destinations, release, reschedule, report_compute_node,
  report_pci_devices, aggregate_create/update/delete/add_host/remove_host/
  set_metadata/list, list_hosts, show_host, ping.
* 1.1 - heartbeat (berth-agent), capacity, confirm; ``pending`` on
  select_destinations and reschedule (claims held until confirmed); ``hosts``
  on aggregate_add_host and aggregate_remove_host (several hosts, one
  transaction). With
  ``[scheduler] rpc_version_cap = 1.0`` the client sends none of them and its
  placements are confirmed at once, as a 1.0 daemon makes them.
* 1.2 - move_instance (resize, migrate, live-migrate, evacuate, rebuild,
  unshelve), confirm_move, revert_move; selections carry ``resources`` and
  ``allocations`` (per provider), and a move's ``migration_uuid``.
* 1.3 - ``allow_preemption`` on select_destinations: an instance that fits
  nowhere may preempt instances of lower priority (``berth:priority``,
  ``berth:preemptible``); its selection names them in ``preempted``, and the
  caller deletes and releases them. A client capped below 1.3 refuses
  ``allow_preemption`` locally.
* 1.4 - ``confirm_instances`` on select_destinations: earlier placements of
  the same caller to confirm first (what ``confirm`` does), so that the
  background confirmer of ``confirm="auto"`` needs no call of its own while
  its client keeps placing; the reply is then ``{"placements": [...],
  "confirmed": {"confirmed": [...], "unknown": [...]} or null}``.

Errors raised by the daemon come back as the same ``scheduler.exception``
types. Payloads are checked to be plain JSON here too, so a value that cannot
travel is refused locally with ``InvalidRequest`` instead of a transport error.
"""
from __future__ import annotations

import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import oslo_messaging
from oslo_config import cfg
from oslo_log import log as logging

from scheduler import confirmer, exception, rpc

LOG = logging.getLogger(__name__)

_UNSET = object()
_CLIENTS = object()     # prepare(): the client's own timeout and call monitor
CONFIRM_MODES = ("auto", "sync", "manual", "none")


def _older_scheduler(error: BaseException) -> bool:
    """Whether ``error`` is a scheduler's refusal of the call's API version."""
    return isinstance(error, exception.InvalidRequest) \
        and getattr(error, "kwargs", {}).get("field") == "version"


def _confirm_answer(reply) -> dict | None:
    """The answer to the confirm a select carried (None: not confirmed)."""
    answer = reply.get("confirmed") if isinstance(reply, dict) else None
    if not isinstance(answer, dict):
        return None
    return answer


class SchedulerAPI:
    """Calls the scheduler daemon over ``[scheduler] topic``.

    ``timeout`` overrides ``[DEFAULT] rpc_response_timeout`` for every call
    (select_destinations excepted: it waits up to ``[scheduler] long_rpc_timeout``
    and uses ``timeout`` as its heartbeat interval). ``retry`` bounds how often a
    lost broker connection is retried before ``MessageDeliveryFailure``
    (None: forever).
    """

    VERSION = "1.4"

    def __init__(self, conf: cfg.ConfigOpts = cfg.CONF, *,
                 transport: oslo_messaging.Transport | None = None,
                 topic: str | None = None, timeout: float | None = None,
                 retry: int | None = None, exchange: str | None = None,
                 on_claim_lost: Callable[[list[str], str], None] | None = None) -> None:
        """``topic`` (and ``exchange``): send every call there instead of to
        ``[scheduler] topic`` and ``admin_topic``; without ``exchange``, the admin
        topic's exchange when ``topic`` is ``[scheduler] admin_topic``, else the
        control exchange. ``on_claim_lost(instance_uuids, reason)``: called (from
        the background confirmer's thread) for a placement made with
        ``confirm="auto"`` that could not be confirmed and was given back
        (``scheduler.confirmer``)."""
        from scheduler import broker

        if topic is not None and exchange is None:
            exchange = broker.exchange_of(conf, admin=topic == rpc.admin_topic(conf))
        self.conf = conf
        self._on_claim_lost = on_claim_lost
        self._confirmer: confirmer.BackgroundConfirmer | None = None
        self._confirmer_lock = threading.Lock()
        self._carry = True      # selects carry confirms (RPC API 1.4) while the daemon takes them
        self._own_transport = transport is None
        self.transport = transport or rpc.get_transport(conf)
        self.timeout = timeout
        self.client = rpc.get_client(
            self.transport, topic or conf.scheduler.topic,
            version_cap=conf.scheduler.rpc_version_cap,
            timeout=timeout, retry=retry, exchange=exchange)
        admin = rpc.admin_topic(conf) if topic is None else None
        self.admin_client = self.client if admin is None else rpc.get_client(
            self.transport, admin, version_cap=conf.scheduler.rpc_version_cap,
            timeout=timeout, retry=retry, exchange=broker.exchange_of(conf, admin=True))
        self._prepared: dict[tuple, Any] = {}
        self._sendable: dict[tuple, bool] = {}

    def _prepare(self, client: oslo_messaging.RPCClient, version: str,
                 timeout: Any = _CLIENTS, call_monitor_timeout: Any = _CLIENTS) -> Any:
        """``client.prepare(version=..., ...)``, made once per client and
        arguments: a prepared call context holds no call's state, and every
        call of a client would otherwise build the same one again."""
        key = (client, client.version_cap, version, timeout, call_monitor_timeout)
        cctxt = self._prepared.get(key)
        if cctxt is None:
            kw = {} if timeout is _CLIENTS else {"timeout": timeout,
                                                 "call_monitor_timeout": call_monitor_timeout}
            cctxt = self._prepared[key] = client.prepare(version=version, **kw)
        return cctxt

    def _can_send(self, version: str, client: oslo_messaging.RPCClient | None = None
                  ) -> bool:
        """``client.can_send_version(version)`` (default: the compute client),
        asked once per version cap and version: the answer depends on nothing
        else."""
        client = client or self.client
        key = (client.version_cap, version)
        can = self._sendable.get(key)
        if can is None:
            can = self._sendable[key] = client.can_send_version(version)
        return can

    def _send(self, cctxt, ctxt, method: str, **kwargs: Any) -> Any:
        """``cctxt.call(ctxt, method, **kwargs)``, sent again while the scheduler
        answers that it is busy (it did nothing: safe for every method), for at
        most ``[scheduler] busy_retry_timeout`` seconds."""
        sent_at = time.monotonic()
        pause = 0.1
        while True:
            try:
                return cctxt.call(ctxt, method, **kwargs)
            except exception.ServiceUnavailable as e:
                from scheduler import admission

                give_up = sent_at + self.conf.scheduler.busy_retry_timeout
                if admission.BUSY not in str(e) or time.monotonic() + pause > give_up:
                    raise
            LOG.debug("The scheduler is busy; sending %s again in %.1f s", method, pause)
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(2 * pause, 2.0)

    def close(self) -> None:
        """Send the confirms still queued (``confirm="auto"``), then let go of
        the transport when this client made it."""
        if self._confirmer is not None:
            self._confirmer.close()
        if self._own_transport:
            self.transport.cleanup()

    def __enter__(self) -> SchedulerAPI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, ctxt, method: str, *, version: str = "1.0", **kwargs: Any) -> Any:
        rpc.check_json(kwargs, "arguments")
        client = self.client if method in rpc.COMPUTE_METHODS else self.admin_client
        return self._send(self._prepare(client, version), ctxt or rpc.new_context(), method,
                          **kwargs)

    def _holds(self, confirm: str) -> bool:
        """Whether placements are made pending (``confirm`` auto or manual, and the
        daemon speaks 1.1)."""
        if confirm not in CONFIRM_MODES:
            raise exception.InvalidRequest(field="confirm",
                                           reason=f"expected one of {', '.join(CONFIRM_MODES)}")
        return confirm != "none" and self._can_send("1.1")

    def _confirmed(self, ctxt, placements: list, uuid_of) -> list:
        """Confirm the placements just received (``confirm="sync"``); sent again
        on a timeout or a database outage like the select itself. Raises
        ClaimExpired when the scheduler no longer holds one of them.

        A request fails as a whole: when one of its instances was reaped
        meanwhile, nothing is confirmed and the others are released (best
        effort: what cannot be released now stays pending, and the reaper
        gives it back after ``claim_ttl``). When the confirm gets no answer at
        all, they are released too; if that fails as well and the confirm had
        in fact been written, the claims stay held (``berth-manage allocations
        list`` shows them)."""
        uuids = [uuid_of(p) for p in placements]
        if not uuids:
            return placements
        retries = self.conf.scheduler.select_retries
        for attempt in range(retries + 1):
            try:
                answer = self.confirm(ctxt, uuids)
                break
            except (oslo_messaging.MessagingTimeout, exception.ServiceUnavailable) as e:
                if attempt == retries:
                    self._give_back(ctxt, uuids)
                    raise
                LOG.warning("confirm for %s failed (%s); sending it again (%d of %d)",
                            uuids, type(e).__name__, attempt + 1, retries)
                if isinstance(e, exception.ServiceUnavailable):
                    time.sleep(1.0)
            except Exception:
                self._give_back(ctxt, uuids)
                raise
        if answer.get("unknown"):
            # none was confirmed (all or none): the others are still pending
            self._give_back(ctxt, [u for u in uuids if u not in answer["unknown"]])
            raise exception.ClaimExpired(instance_uuids=list(answer["unknown"]))
        return placements

    def _background(self) -> confirmer.BackgroundConfirmer:
        with self._confirmer_lock:
            if self._confirmer is None:
                self._confirmer = confirmer.BackgroundConfirmer(
                    self, self.conf, on_claim_lost=self._on_claim_lost)
            return self._confirmer

    def wait_confirmed(self, instance_uuids: list[str], timeout: float | None = None
                       ) -> None:
        """Return once the placements of these instances (made with
        ``confirm="auto"``) are confirmed: call it before an instance is made
        visible, if it must not run a moment without its claim. Raises
        ``ClaimExpired`` when their request was lost (given back: do not build
        them), ``MessagingTimeout`` when the confirm is still unanswered after
        ``timeout`` seconds (it goes on in the background)."""
        if self._confirmer is not None:
            self._confirmer.wait_confirmed(instance_uuids, timeout)

    def _give_back(self, ctxt, uuids: list[str]) -> None:
        """Release the instances of a request that failed after its claims were
        made (idempotent; failures are left to the reaper)."""
        for uuid in uuids:
            try:
                self._call(ctxt, "release", instance_uuid=uuid)
            except Exception as e:      # noqa: BLE001 - the reaper's, if still pending
                LOG.warning("could not release %s of a failed request (%s); a pending "
                            "claim is released by the scheduler after claim_ttl",
                            uuid, type(e).__name__)

    # -- placement --------------------------------------------------------------------
    def select_destinations(self, ctxt, request_spec: dict,
                            instance_uuids: list[str] | None = None,
                            return_alternates: bool = False,
                            dry_run: bool = False,
                            confirm: str = "auto",
                            allow_preemption: bool = False) -> list[list[dict]]:
        """One list per instance: the chosen host first, then the alternates.

        A call that times out is sent again ``[scheduler] select_retries`` times
        with the same instance UUIDs (picked here when none are given); the
        scheduler answers a retry of a placed request with its placements.

        ``confirm``: ``auto`` (the claims are pending until this client has the
        reply: a lost reply costs nothing after ``[scheduler] claim_ttl``; the
        reply is returned at once and confirmed in the background, batched with
        other replies — ``scheduler.confirmer``: a placement that cannot be
        confirmed is given back, logged, reported to ``on_claim_lost`` and to
        ``wait_confirmed``), ``sync`` (the same, confirmed before this call
        returns: one more round trip, ``ClaimExpired`` raised here),
        ``manual`` (pending until the caller calls ``confirm``, e.g. once the
        instance is built), ``none`` (held at once, as before).

        ``allow_preemption`` (1.3): the caller deletes the instances a
        selection names in ``preempted`` (then releases them); an instance
        that fits nowhere may then take the room of instances of lower
        priority.
        """
        rpc.check_json(request_spec, "request_spec")
        monitor = self.timeout or self.conf.rpc_response_timeout
        kw: dict[str, Any] = {"pending": True} if not dry_run and self._holds(confirm) \
            else {}
        version = "1.1" if kw else "1.0"
        if allow_preemption:
            if not self._can_send("1.3"):
                raise exception.InvalidRequest(
                    field="allow_preemption",
                    reason="needs RPC API 1.3 ([scheduler] rpc_version_cap is "
                           f"{self.conf.scheduler.rpc_version_cap})")
            kw["allow_preemption"] = True
            version = "1.3"
        ctxt = ctxt or rpc.new_context()
        riding = self._riders(ctxt) if kw else []
        if riding:
            kw["confirm_instances"] = confirmer.BackgroundConfirmer.uuids_of(riding)
            version = "1.4"
        cctxt = self._prepare(self.client, version,
                              timeout=self.conf.scheduler.long_rpc_timeout,
                              call_monitor_timeout=monitor)
        retries = 0 if dry_run else self.conf.scheduler.select_retries
        if retries and instance_uuids is None and isinstance(request_spec, dict) \
                and not request_spec.get("instance_uuids"):
            count = request_spec.get("num_instances", 1)
            if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 1000:
                instance_uuids = [str(uuidlib.uuid4()) for _ in range(count)]
        sent_at = time.monotonic()
        try:
            for attempt in range(retries + 1):
                try:
                    placements = self._send(cctxt, ctxt, "select_destinations",
                                            request_spec=request_spec,
                                            instance_uuids=instance_uuids,
                                            return_alternates=return_alternates,
                                            dry_run=dry_run, **kw)
                    break
                except oslo_messaging.MessagingTimeout:
                    if attempt == retries or not (instance_uuids or
                                                  request_spec.get("instance_uuids")):
                        raise
                    LOG.warning("select_destinations for %s timed out; sending it again "
                                "(%d of %d)",
                                instance_uuids or request_spec["instance_uuids"],
                                attempt + 1, retries)
        except BaseException as e:
            if riding:
                self._confirmer.put_back(riding)    # the thread confirms them
                if _older_scheduler(e):
                    # refused before anything was done: the same select without
                    # them, and no select carries confirms from this client again
                    self._carry = False
                    LOG.warning("The scheduler does not serve RPC API 1.4: confirms go "
                                "in calls of their own. Set [scheduler] rpc_version_cap "
                                "to the oldest scheduler's version while upgrading.")
                    return self.select_destinations(
                        ctxt, request_spec, instance_uuids, return_alternates, dry_run,
                        confirm, allow_preemption)
            raise
        if riding:
            self._confirmer.ridden(riding, _confirm_answer(placements))
            placements = placements["placements"]
        if kw and confirm == "sync":
            return self._confirmed(ctxt, placements, lambda p: p[0]["instance_uuid"])
        if kw and confirm == "auto":
            self._background().add([p[0]["instance_uuid"] for p in placements], sent_at,
                                   ctxt)
        return placements

    def _riders(self, ctxt) -> list:
        """The background confirmer's queued placements of ``ctxt``'s caller, for
        this select to carry (``confirm_instances``, RPC API 1.4)."""
        if self._confirmer is None or not self._carry \
                or not self._can_send("1.4"):
            return []
        return self._confirmer.take(ctxt)

    def capacity(self, ctxt, request_spec: dict | list, per_az: bool = False,
                 per_aggregate: bool = False) -> list[dict]:
        """How many more instances of each request fit now (``scheduler.capacity``).

        Exact dry runs of the real filters: it can take seconds on a big fleet,
        so it waits up to ``[scheduler] long_rpc_timeout`` like select_destinations.
        """
        rpc.check_json(request_spec, "request_spec")
        monitor = self.timeout or self.conf.rpc_response_timeout
        cctxt = self._prepare(self.admin_client, "1.1",
                              timeout=self.conf.scheduler.long_rpc_timeout,
                              call_monitor_timeout=monitor)
        return self._send(cctxt, ctxt or rpc.new_context(), "capacity",
                          request_spec=request_spec,
                          per_az=per_az, per_aggregate=per_aggregate)

    def confirm(self, ctxt, instance_uuids: list[str]) -> dict:
        """Keep these instances' pending claims: ``{"confirmed": [...], "unknown":
        [...]}`` (unknown: the scheduler holds nothing for them — do not build)."""
        return self._call(ctxt, "confirm", version="1.1", instance_uuids=list(instance_uuids))

    def release(self, ctxt, instance_uuid: str) -> bool:
        if self._confirmer is not None:
            self._confirmer.forget(instance_uuid)   # its confirm would find nothing
        return self._call(ctxt, "release", instance_uuid=instance_uuid)

    def reschedule(self, ctxt, instance_uuid: str, failed_host: str,
                   confirm: str = "auto") -> list[dict]:
        """Release the failed build and place the instance again (``confirm`` as
        in select_destinations)."""
        ctxt = ctxt or rpc.new_context()
        if not self._holds(confirm):
            return self._call(ctxt, "reschedule", instance_uuid=instance_uuid,
                              failed_host=failed_host)
        sent_at = time.monotonic()
        placement = self._call(ctxt, "reschedule", version="1.1",
                               instance_uuid=instance_uuid, failed_host=failed_host,
                               pending=True)
        if confirm == "sync":
            self._confirmed(ctxt, [placement], lambda p: p[0]["instance_uuid"])
        elif confirm == "auto":
            self._background().add([placement[0]["instance_uuid"]], sent_at, ctxt)
        return placement

    # -- moves (1.2) ------------------------------------------------------------------
    def move_instance(self, ctxt, move: dict, return_alternates: bool = False
                      ) -> list[dict]:
        """Move an instance (``scheduler.moves``): ``move`` names the instance,
        the ``kind`` and its options; its ``migration_uuid`` is picked here when
        not given, and a call that times out is sent again with it (the
        scheduler answers a move sent again as the first one). The selections
        carry the ``migration_uuid`` to confirm or revert the move with."""
        rpc.check_json(move, "move")
        if isinstance(move, dict) and move.get("migration_uuid") is None:
            move = dict(move, migration_uuid=str(uuidlib.uuid4()))
        monitor = self.timeout or self.conf.rpc_response_timeout
        cctxt = self._prepare(self.client, "1.2",
                              timeout=self.conf.scheduler.long_rpc_timeout,
                              call_monitor_timeout=monitor)
        ctxt = ctxt or rpc.new_context()
        retries = self.conf.scheduler.select_retries
        for attempt in range(retries + 1):
            try:
                return self._send(cctxt, ctxt, "move_instance", move=move,
                                  return_alternates=return_alternates)
            except oslo_messaging.MessagingTimeout:
                if attempt == retries:
                    raise
                LOG.warning("move %s of %s timed out; sending it again (%d of %d)",
                            move.get("migration_uuid"), move.get("instance_uuid"),
                            attempt + 1, retries)
        raise AssertionError("unreachable")

    def confirm_move(self, ctxt, instance_uuid: str, migration_uuid: str) -> bool:
        return self._call(ctxt, "confirm_move", version="1.2", instance_uuid=instance_uuid,
                          migration_uuid=migration_uuid)

    def revert_move(self, ctxt, instance_uuid: str, migration_uuid: str) -> bool:
        return self._call(ctxt, "revert_move", version="1.2", instance_uuid=instance_uuid,
                          migration_uuid=migration_uuid)

    # -- host reporting ---------------------------------------------------------------
    def report_compute_node(self, ctxt, node: dict) -> dict:
        return self._call(ctxt, "report_compute_node", node=node)

    def report_pci_devices(self, ctxt, node: str, devices: list[dict]) -> dict:
        return self._call(ctxt, "report_pci_devices", node=node, devices=devices)

    def heartbeat(self, ctxt, host: str) -> bool:
        """``host`` is up (berth-agent, between full reports)."""
        return self._call(ctxt, "heartbeat", version="1.1", host=host)

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

    def aggregate_add_host(self, ctxt, name: str, host: str | None = None,
                           hosts: list[str] | None = None) -> dict:
        """Add ``host``, or every one of ``hosts`` in one transaction (all or
        none; RPC 1.1)."""
        return self._call(ctxt, "aggregate_add_host", **self._membership(name, host, hosts))

    def aggregate_remove_host(self, ctxt, name: str, host: str | None = None,
                              hosts: list[str] | None = None) -> dict:
        """Remove ``host``, or every one of ``hosts`` in one transaction (all or
        none; RPC 1.1)."""
        return self._call(ctxt, "aggregate_remove_host",
                          **self._membership(name, host, hosts))

    def _membership(self, name: str, host: str | None, hosts: list[str] | None) -> dict:
        """The arguments of a membership call: a list goes as ``hosts`` (1.1);
        one host as ``host`` (1.0) when the version cap forbids 1.1."""
        if hosts is None:
            return {"name": name, "host": host}
        hosts = list(hosts)
        if self._can_send("1.1", self.admin_client):
            return {"version": "1.1", "name": name, "host": host, "hosts": hosts}
        if host is None and len(hosts) == 1:
            return {"name": name, "host": hosts[0]}
        raise exception.InvalidRequest(
            field="hosts", reason="several hosts in one call need RPC API 1.1 "
                                  "([scheduler] rpc_version_cap is "
                                  f"{self.conf.scheduler.rpc_version_cap})")

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
