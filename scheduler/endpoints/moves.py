"""The compute API's move calls (API 1.2): resize, migrate, live-migrate,
evacuate, rebuild and unshelve one instance, then confirm or revert the move
(``scheduler.moves``; doc/source/admin/moves.rst)."""
from __future__ import annotations

import dataclasses

from scheduler import exception, validation
from scheduler.endpoints import scoping
from scheduler.endpoints.rpc_method import rpc_method
from scheduler.rpc import check_json


class MovesEndpoint:
    """move_instance, confirm_move and revert_move, for an endpoint with
    ``scheduler`` (a ``FilterScheduler``) and ``_scope`` (``PlacementEndpoint``'s:
    another project's instance is acted on as one that holds nothing)."""

    @rpc_method
    def move_instance(self, ctxt, move, return_alternates=False, pending=False
                      ) -> list[dict]:
        """Move one instance (``scheduler.moves.MoveRequest``): its selections,
        each with the move's ``migration_uuid``."""
        from scheduler import moves

        check_json(move, "move")
        req = moves.MoveRequest.from_primitive(move)
        return_alternates = validation.boolean(return_alternates, "return_alternates")
        pending = validation.boolean(pending, "pending")
        if req.kind == "unshelve":
            # places an instance that holds nothing, from the caller's request:
            # of a project the caller may act for, as select_destinations
            spec = dict(req.request_spec)
            project = scoping.request_project(
                self.policy, ctxt, "move_instance",
                validation.optional(validation.text, spec.get("project_id"),
                                    "move.request_spec.project_id"))
            if project is not None:
                spec["project_id"] = project
            req = dataclasses.replace(req, request_spec=spec)
            scope = scoping.Scope({req.instance_uuid: req.instance_uuid})
        else:
            scope = self._scope(ctxt, "move_instance", [req.instance_uuid])
            req = dataclasses.replace(req, instance_uuid=scope[req.instance_uuid])
        try:
            selections = self._mover().move(req, return_alternates=return_alternates,
                                            pending=pending)
        except exception.BerthError as e:
            raise scope.error(e) from None
        return [s.to_primitive() for s in selections]

    @rpc_method
    def confirm_move(self, ctxt, instance_uuid, migration_uuid) -> bool:
        """The move is done: its source is released (idempotent)."""
        return self._end_move(ctxt, "confirm_move", instance_uuid, migration_uuid)

    @rpc_method
    def revert_move(self, ctxt, instance_uuid, migration_uuid) -> bool:
        """The move is undone: the destination is released, the source the
        instance's again (idempotent)."""
        return self._end_move(ctxt, "revert_move", instance_uuid, migration_uuid)

    def _end_move(self, ctxt, method: str, instance_uuid, migration_uuid) -> bool:
        instance_uuid, migration_uuid = self._move_ids(instance_uuid, migration_uuid)
        scope = self._scope(ctxt, method, [instance_uuid])
        end = self._mover().confirm if method == "confirm_move" else self._mover().revert
        try:
            return end(scope[instance_uuid], migration_uuid)
        except exception.BerthError as e:
            raise scope.error(e) from None

    @staticmethod
    def _move_ids(instance_uuid, migration_uuid) -> tuple[str, str]:
        return (validation.uuid(instance_uuid, "instance_uuid"),
                validation.uuid(migration_uuid, "migration_uuid"))

    def _mover(self):
        """The worker's Mover, made on first use (it shares the scheduler)."""
        from scheduler import moves

        mover = getattr(self, "_moves", None)
        if mover is None:
            mover = self._moves = moves.Mover(self.scheduler)
        return mover
