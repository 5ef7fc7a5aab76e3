"""A consumer's last transitions, kept after its row is gone.

A release, a reschedule or the end of a move deletes (or renames) a consumer.
When the answer of such a call is lost — the COMMIT went through but its
acknowledgement did not come back, so the transaction is retried whole; or the
reply was lost and the client sends the call again, maybe to another daemon —
the call sent again finds nothing and would answer "held nothing". Each of them
therefore writes one row here in its own transaction: the consumer, what
happened to it (``models.TRANSITION_KINDS``), where, for whom, and for a
reschedule the request it places again. The call sent again reads it and
answers what the first one did. Rows are kept ``[scheduler] transition_ttl``
seconds; the claim reaper deletes older ones.
"""
from __future__ import annotations

import dataclasses
import datetime

import sqlalchemy as sa

from db import models
from db.api import Database

_t = models.Transition.__table__


@dataclasses.dataclass(frozen=True)
class Transition:
    consumer_uuid: str
    instance_uuid: str
    kind: str
    node_id: int
    host: str | None
    project_id: str | None
    request_spec: str | None
    at: datetime.datetime


_INSERT = sa.insert(_t)
_LAST = (sa.select(_t.c.consumer_uuid, _t.c.instance_uuid, _t.c.kind, _t.c.compute_node_id,
                   _t.c.host, _t.c.project_id, _t.c.request_spec, _t.c.at)
         .where(_t.c.consumer_uuid == sa.bindparam("b_uuid"))
         .order_by(_t.c.id.desc()).limit(1))


def record(conn, *, consumer_uuid: str, instance_uuid: str, kind: str, node_id: int,
           host: str | None = None, project_id: str | None = None,
           request_spec: str | None = None,
           now: datetime.datetime | None = None) -> None:
    """Remember, in the caller's transaction, what is happening to the consumer."""
    assert kind in models.TRANSITION_KINDS, kind
    conn.execute(_INSERT, {"consumer_uuid": consumer_uuid, "instance_uuid": instance_uuid,
                           "kind": kind, "compute_node_id": node_id, "host": host,
                           "project_id": project_id, "request_spec": request_spec,
                           "at": now or models.utcnow()})


def last(conn, consumer_uuid: str) -> Transition | None:
    """The consumer's last remembered transition, in the caller's transaction."""
    row = conn.execute(_LAST, {"b_uuid": consumer_uuid}).first()
    return Transition(*row) if row is not None else None


def last_of(db: Database, consumer_uuid: str) -> Transition | None:
    """``last`` on its own, reading every write the cluster committed before it
    (``Database.causal_reader``)."""
    with db.causal_reader() as conn:
        return last(conn, consumer_uuid)


def projects_of(db: Database, consumer_uuids) -> dict[str, str | None]:
    """consumer uuid -> the project of its last remembered transition, for those
    that have one (one query, whether they do or not; causal like ``last_of``)."""
    uuids = list(consumer_uuids)
    if not uuids:
        return {}
    out: dict[str, str | None] = {}
    with db.causal_reader() as conn:
        for uuid, project in conn.execute(
                sa.select(_t.c.consumer_uuid, _t.c.project_id)
                .where(_t.c.consumer_uuid.in_(uuids)).order_by(_t.c.id)):
            out[uuid] = project
    return out


def purge(db: Database, before: datetime.datetime, limit: int = 1000) -> int:
    """Forget the oldest transitions made before ``before`` (at most ``limit``);
    how many were deleted."""
    return purge_older(db, _t, before, limit)


def purge_older(db: Database, table: sa.Table, before: datetime.datetime,
                limit: int) -> int:
    """Delete the oldest rows of ``table`` (an ``id`` and an ``at`` column)
    stamped before ``before``, at most ``limit``; how many."""
    with db.writer_connection() as conn:
        ids = [row[0] for row in conn.execute(
            sa.select(table.c.id).where(table.c.at < before).order_by(table.c.at)
            .limit(limit))]
        if ids:
            conn.execute(sa.delete(table).where(table.c.id.in_(ids)))
    return len(ids)
