"""The compute API's calls: place instances, count what fits, release, confirm
and reschedule (doc/source/reference/rpc-api.rst)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from db import claims
from scheduler import capacity as capacity_count
from scheduler import exception, validation
from scheduler import priority as priorities
from scheduler.endpoints.rpc_method import rpc_method
from scheduler.request_spec import MAX_INSTANCES, RequestSpec
from scheduler.rpc import check_json


def _instance_uuids(value: Any) -> list[str] | None:
    """The ``instance_uuids`` argument: None, or distinct UUIDs."""
    return validation.optional(validation.uuids, value, "instance_uuids", MAX_INSTANCES)


class PlacementEndpoint:
    """select_destinations, capacity, release, confirm and reschedule, for an
    endpoint with ``db``, ``scheduler`` (a ``FilterScheduler`` or anything with
    its methods) and ``policy``."""

    def _parser(self) -> Callable[[Any], RequestSpec]:
        """The scheduler's request parser (it knows the PCI aliases)."""
        return getattr(self.scheduler, "parse_request", RequestSpec.from_primitive)

    @rpc_method
    def select_destinations(self, ctxt, request_spec, instance_uuids=None,
                            return_alternates=False, dry_run=False,
                            pending=False, allow_preemption=False) -> list[list[dict]]:
        check_json(request_spec, "request_spec")
        uuids = _instance_uuids(instance_uuids)
        return_alternates = validation.boolean(return_alternates, "return_alternates")
        dry_run = validation.boolean(dry_run, "dry_run")
        pending = validation.boolean(pending, "pending")
        allow_preemption = validation.boolean(allow_preemption, "allow_preemption")
        spec = self._parser()(request_spec)
        if priorities.needs_privilege(spec, self.conf):
            self.policy.authorize(ctxt, "high_priority")
        if uuids is not None and spec.instance_uuids is None \
                and len(uuids) != spec.num_instances:
            raise exception.InvalidRequest(
                field="instance_uuids",
                reason=f"{len(uuids)} given for num_instances={spec.num_instances}")
        kw = {"pending": True} if pending else {}
        if allow_preemption:
            kw["allow_preemption"] = True
        result = self.scheduler.select_destinations(
            spec, instance_uuids=uuids, return_alternates=return_alternates,
            dry_run=dry_run, **kw)
        return [[s.to_primitive() for s in alternatives] for alternatives in result]

    @rpc_method
    def capacity(self, ctxt, request_spec, per_az=False, per_aggregate=False) -> list[dict]:
        """How many more instances of each request fit now; claims nothing.

        ``request_spec``: one request spec (or bare flavor) or a list of them.
        """
        check_json(request_spec, "request_spec")
        per_az = validation.boolean(per_az, "per_az")
        per_aggregate = validation.boolean(per_aggregate, "per_aggregate")
        requests = capacity_count.parse_requests(request_spec, self._parser())
        return capacity_count.capacity(self.scheduler, requests, per_az=per_az,
                                       per_aggregate=per_aggregate)

    @rpc_method
    def release(self, ctxt, instance_uuid) -> bool:
        instance_uuid = validation.uuid(instance_uuid, "instance_uuid")
        if not self._may_act_on(ctxt, "release", instance_uuid):
            return False        # as for an instance that holds nothing
        return bool(self.scheduler.release(instance_uuid))

    @rpc_method
    def confirm(self, ctxt, instance_uuids) -> dict:
        """The caller holds these placements: their pending claims are kept
        (idempotent), all or none. ``unknown``: instances that hold none (never
        placed, released, or reaped after claim_ttl) — do not build them; then
        none is confirmed, and the others stay pending."""
        uuids = _instance_uuids(instance_uuids)
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

    @rpc_method
    def reschedule(self, ctxt, instance_uuid, failed_host, pending=False) -> list[dict]:
        instance_uuid = validation.uuid(instance_uuid, "instance_uuid")
        failed_host = validation.name(failed_host, "failed_host")
        pending = validation.boolean(pending, "pending")
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
