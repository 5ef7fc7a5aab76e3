"""Moves in the ledger: the holders of a moving instance's source, and the revert.

A move's claim (``db.claims.claim`` with ``move_from``) turns the instance's
consumer on its source into a *holder* — a ``migration`` consumer (resize,
migrate, live-migrate) or an ``evacuation`` consumer (evacuate) whose uuid is
the move's id — and writes the instance's new consumer on the destination, in
one transaction. Confirming the move releases the holder
(``db.claims.release``); reverting it (``revert``) releases the destination
and hands the source back to the instance, also in one transaction: the room
was held, so a revert always fits.
"""
from __future__ import annotations

import dataclasses
import datetime

import sqlalchemy as sa

from db import claims, models, transitions
from db.api import Database, retry_on_deadlock

_cn = models.ComputeNode.__table__
_cons = models.Consumer.__table__

HOLD_TYPES = ("migration", "evacuation")


@dataclasses.dataclass(frozen=True)
class Holder:
    """A moving instance's source, held."""

    uuid: str                       # the move's id
    instance_uuid: str
    hold_type: str
    node_id: int
    host: str
    created_at: datetime.datetime


_HOLDERS = (sa.select(_cons.c.uuid, _cons.c.instance_uuid, _cons.c.consumer_type,
                      _cons.c.compute_node_id, _cn.c.host, _cons.c.created_at)
            .join(_cn, _cn.c.id == _cons.c.compute_node_id)
            .where(_cons.c.consumer_type.in_(HOLD_TYPES)))


def _holders(conn, q) -> list[Holder]:
    return [Holder(*row) for row in conn.execute(q)]


def holder_of(db: Database, instance_uuid: str) -> Holder | None:
    """The instance's move in progress (its source's holder), if any."""
    with db.causal_reader() as conn:
        found = _holders(conn, _HOLDERS.where(_cons.c.instance_uuid == instance_uuid))
    return found[0] if found else None


def holders(db: Database, *, host: str | None = None, hold_type: str | None = None,
            older_than: datetime.datetime | None = None, limit: int = 500
            ) -> list[Holder]:
    """Holders on ``host`` (host or node name), of ``hold_type``, made before
    ``older_than``; oldest first."""
    q = _HOLDERS.order_by(_cons.c.created_at).limit(limit)
    if host is not None:
        q = q.where(sa.or_(_cn.c.host == host, _cn.c.hypervisor_hostname == host))
    if hold_type is not None:
        q = q.where(_cons.c.consumer_type == hold_type)
    if older_than is not None:
        q = q.where(_cons.c.created_at < older_than)
    with db.reader_connection() as conn:
        return _holders(conn, q)


@dataclasses.dataclass(frozen=True)
class Reverted:
    """What a revert did: the destination given back (None: the instance held
    none any more), and the source node handed back to the instance."""

    released: claims.Released | None
    source_node_id: int


_LOCK_HOLDER = claims._LOCK_ALLOCATION.where(_cons.c.consumer_type.in_(HOLD_TYPES))


@retry_on_deadlock
def revert(db: Database, instance_uuid: str, holder: str) -> Reverted | None:
    """Release the instance's destination and give it its source back, in one
    transaction; None when ``holder`` holds nothing for it (confirmed or
    reverted already: idempotent)."""
    from db import pci as db_pci

    now = models.utcnow()
    with db.hot_writer() as conn:
        held = conn.execute(_LOCK_HOLDER, {"b_uuid": holder}).mappings().first()
        if held is None or held["instance_uuid"] != instance_uuid:
            return None
        dest = conn.execute(claims._LOCK_ALLOCATION, {"b_uuid": instance_uuid}
                            ).mappings().first()
        released = claims._release_locked(conn, dest) if dest is not None else None
        transitions.record(conn, consumer_uuid=holder, instance_uuid=instance_uuid,
                           kind="move-reverted", node_id=held["compute_node_id"],
                           project_id=held["project_id"], now=now)
        conn.execute(sa.update(_cons).where(_cons.c.id == held["id"]).values(
            uuid=instance_uuid, consumer_type="instance", pending=False, move_id=holder,
            move_state="reverted"))
        db_pci.hand_over_devices(conn, held["compute_node_id"], holder, instance_uuid)
        conn.execute(sa.update(_cn).where(_cn.c.id == held["compute_node_id"])
                     .values(generation=_cn.c.generation + 1, updated_at=now))
    return Reverted(released=released, source_node_id=held["compute_node_id"])


@retry_on_deadlock
def confirm(db: Database, instance_uuid: str, holder: str) -> claims.Released | None:
    """Release the instance's source (the move is done), in one transaction with
    the instance's record of it; None when ``holder`` holds nothing for it."""
    with db.hot_writer() as conn:
        held = conn.execute(_LOCK_HOLDER, {"b_uuid": holder}).mappings().first()
        if held is None or held["instance_uuid"] != instance_uuid:
            return None
        released = claims._release_locked(conn, held, "move-confirmed")
        conn.execute(sa.update(_cons).where(_cons.c.uuid == instance_uuid,
                                            _cons.c.move_id == holder)
                     .values(move_state="confirmed"))
    return released


_ENDED = {"move-confirmed": "confirmed", "move-reverted": "reverted"}


def move_state(db: Database, instance_uuid: str, move_id: str) -> str | None:
    """How the instance's move ``move_id`` stands (moving, confirmed or
    reverted), as the instance's consumer records it or, once that is gone
    (the instance released since), as the move's holder was remembered
    (``db.transitions``); None: not a move of this instance that is known."""
    with db.causal_reader() as conn:
        row = conn.execute(sa.select(_cons.c.move_id, _cons.c.move_state).where(
            _cons.c.uuid == instance_uuid)).first()
        if row is not None and row[0] == move_id:
            return row[1]
        ended = transitions.last(conn, move_id)
    if ended is not None and ended.instance_uuid == instance_uuid:
        return _ENDED.get(ended.kind)
    return None
