"""The compute API's move calls (API 1.2): resize, migrate, live-migrate,
evacuate, rebuild and unshelve one instance, then confirm or revert the move
(``scheduler.moves``; doc/source/admin/moves.rst)."""
from __future__ import annotations

from scheduler import exception, validation
from scheduler.endpoints.rpc_method import rpc_method
from scheduler.rpc import check_json


class MovesEndpoint:
    """move_instance, confirm_move and revert_move, for an endpoint with
    ``scheduler`` (a ``FilterScheduler``) and the policy check ``_may_act_on``
    (``PlacementEndpoint``'s)."""

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
        if not self._may_act_on(ctxt, "move_instance", req.instance_uuid):
            # as for an instance that holds nothing
            raise exception.NotFound(kind="Instance allocation", name=req.instance_uuid)
        return [s.to_primitive() for s in self._mover().move(
            req, return_alternates=return_alternates, pending=pending)]

    @rpc_method
    def confirm_move(self, ctxt, instance_uuid, migration_uuid) -> bool:
        """The move is done: its source is released (idempotent)."""
        instance_uuid, migration_uuid = self._move_ids(instance_uuid, migration_uuid)
        if not self._may_act_on(ctxt, "confirm_move", instance_uuid):
            raise exception.NotFound(kind="Move", name=migration_uuid)
        return self._mover().confirm(instance_uuid, migration_uuid)

    @rpc_method
    def revert_move(self, ctxt, instance_uuid, migration_uuid) -> bool:
        """The move is undone: the destination is released, the source the
        instance's again (idempotent)."""
        instance_uuid, migration_uuid = self._move_ids(instance_uuid, migration_uuid)
        if not self._may_act_on(ctxt, "revert_move", instance_uuid):
            raise exception.NotFound(kind="Move", name=migration_uuid)
        return self._mover().revert(instance_uuid, migration_uuid)

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
