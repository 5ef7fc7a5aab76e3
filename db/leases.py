"""Named leases in the database: one holder at a time, for a bounded time.

Leader election for work that one process of a deployment must do (the claim
reaper): every candidate calls ``acquire`` each interval; the holder renews it,
the others take it over only once it has expired (its holder died or lost the
database). Clocks of the candidates are assumed within a few seconds of each
other; the lease should last a few intervals.
"""
from __future__ import annotations

import datetime

import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import models
from db.api import Database, retry_on_deadlock

_leases = models.Lease.__table__

_TAKE = (sa.update(_leases)
         .where(_leases.c.name == sa.bindparam("b_name"),
                sa.or_(_leases.c.holder == sa.bindparam("b_holder"),
                       _leases.c.expires_at < sa.bindparam("b_now")))
         .values(holder=sa.bindparam("b_holder"), expires_at=sa.bindparam("b_until")))
_FREE = (sa.update(_leases)
         .where(_leases.c.name == sa.bindparam("b_name"),
                _leases.c.holder == sa.bindparam("b_holder"))
         .values(expires_at=sa.bindparam("b_now")))


@retry_on_deadlock
def acquire(db: Database, name: str, holder: str, seconds: float,
            now: datetime.datetime | None = None) -> bool:
    """Take or renew lease ``name`` for ``seconds``; True if ``holder`` has it now."""
    now = now or models.utcnow()
    params = {"b_name": name, "b_holder": holder, "b_now": now,
              "b_until": now + datetime.timedelta(seconds=seconds)}
    with db.writer_connection() as conn:
        if conn.execute(_TAKE, params).rowcount == 1:
            return True
        if conn.execute(sa.select(_leases.c.name).where(_leases.c.name == name)).first():
            return False        # somebody else holds it, and it has not expired
    try:
        with db.writer_connection() as conn:
            conn.execute(sa.insert(_leases).values(name=name, holder=holder,
                                                   expires_at=params["b_until"]))
        return True
    except db_exc.DBDuplicateEntry:
        return False            # another candidate created it first


@retry_on_deadlock
def give_up(db: Database, name: str, holder: str) -> None:
    """End ``holder``'s lease now (a clean stop), so another takes over at once."""
    with db.writer_connection() as conn:
        conn.execute(_FREE, {"b_name": name, "b_holder": holder,
                             "b_now": models.utcnow() - datetime.timedelta(seconds=1)})


def holder_of(db: Database, name: str) -> tuple[str, datetime.datetime] | None:
    """(holder, expires_at) of lease ``name``, or None if nobody ever took it."""
    with db.reader_connection() as conn:
        row = conn.execute(sa.select(_leases.c.holder, _leases.c.expires_at)
                           .where(_leases.c.name == name)).first()
    return (row[0], row[1]) if row else None
