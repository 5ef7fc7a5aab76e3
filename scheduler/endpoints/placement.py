"""The compute API's calls: place instances, count what fits, release, confirm
and reschedule (doc/source/reference/rpc-api.rst)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler import capacity as capacity_count
from scheduler import exception, validation
from scheduler import priority as priorities
from scheduler.endpoints import scoping
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
                            pending=False, allow_preemption=False,
                            confirm_instances=None) -> list[list[dict]] | dict:
        """Place the request's instances. ``confirm_instances`` (1.4): earlier
        placements of this caller to confirm first, as ``confirm`` does; the
        answer is then ``{"placements": [...], "confirmed": ...}``, where
        ``confirmed`` is ``confirm``'s answer, or None when the caller may not
        confirm (it then calls ``confirm`` and hears why)."""
        check_json(request_spec, "request_spec")
        uuids = _instance_uuids(instance_uuids)
        carried = None if confirm_instances is None else \
            validation.uuids(confirm_instances, "confirm_instances", MAX_INSTANCES)
        return_alternates = validation.boolean(return_alternates, "return_alternates")
        dry_run = validation.boolean(dry_run, "dry_run")
        pending = validation.boolean(pending, "pending")
        allow_preemption = validation.boolean(allow_preemption, "allow_preemption")
        spec = self._parser()(request_spec)
        project = scoping.request_project(self.policy, ctxt, "select_destinations",
                                          spec.project_id)
        if project != spec.project_id:
            spec = spec.replace(project_id=project)
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
        # before the select: its answer is the caller's whatever the select's
        # (a NoValidHost leaves them confirmed; the caller, seeing none, sends
        # them again in a confirm call of their own, which is idempotent)
        confirmed = self._confirm_carried(ctxt, carried) if carried else None
        result = self.scheduler.select_destinations(
            spec, instance_uuids=uuids, return_alternates=return_alternates,
            dry_run=dry_run, **kw)
        placements = [[s.to_primitive() for s in alternatives] for alternatives in result]
        if carried is None:
            return placements
        return {"placements": placements, "confirmed": confirmed}

    def _confirm_carried(self, ctxt, uuids: list[str]) -> dict | None:
        """``confirm``'s answer for the placements a select carried; None when
        this caller may not confirm (the select goes on)."""
        try:
            project = scoping.claims_project(self.policy, ctxt, "confirm")
        except exception.BerthError:
            return None
        return self._confirmed(uuids, project)

    def _confirmed(self, uuids: list[str], project) -> dict:
        """Confirm ``uuids`` as a caller scoped to ``project``: ``confirm``'s answer."""
        confirmed, unknown = self.scheduler.confirm(uuids, project=project)
        return {"confirmed": confirmed, "unknown": unknown}

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
        scope = self._scope(ctxt, "release", [instance_uuid])
        return bool(self.scheduler.release(scope[instance_uuid]))

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
        # another project's claim counts as held by nobody (as ``_scope`` makes
        # it), decided in the confirm's own transaction
        project = scoping.claims_project(self.policy, ctxt, "confirm")
        return self._confirmed(uuids, project)

    @rpc_method
    def reschedule(self, ctxt, instance_uuid, failed_host, pending=False) -> list[dict]:
        instance_uuid = validation.uuid(instance_uuid, "instance_uuid")
        failed_host = validation.name(failed_host, "failed_host")
        pending = validation.boolean(pending, "pending")
        scope = self._scope(ctxt, "reschedule", [instance_uuid])
        kw = {"pending": True} if pending else {}
        try:
            selections = self.scheduler.reschedule(scope[instance_uuid], failed_host, **kw)
        except exception.BerthError as e:
            raise scope.error(e) from None
        return [s.to_primitive() for s in selections]

    def _scope(self, ctxt, method: str, instance_uuids: list[str]) -> scoping.Scope:
        """The instances of a call as the caller may act on them
        (``scheduler.endpoints.scoping``)."""
        return scoping.scope(self.db, self.policy, ctxt, method, instance_uuids)
