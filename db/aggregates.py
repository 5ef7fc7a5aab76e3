"""Host aggregates and availability zones (an AZ is the ``availability_zone`` metadata).

Every change to an aggregate, its hosts or its metadata bumps the aggregate's
``updated_at``: host-state caches poll ``max(updated_at)`` to notice changes.
A host belongs to one availability zone at most, as in Nova.

The public functions are whole transactions; the ``*_in_session`` helpers run
inside the caller's (``sync_many_in_session`` is fleet import's bulk form).
"""
from __future__ import annotations

import datetime
import functools
import math
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa
from oslo_db import exception as db_exc
from sqlalchemy.orm import Session

from db import errors as exception
from db import limits, models
from db.api import IN_CHUNK, Database, chunks, retry_on_deadlock

AZ_KEY = "availability_zone"
_UNSET = object()


def _check_name(field: str, value: object) -> str:
    """A name or metadata key (``db.limits.check_name``: no control characters)."""
    try:
        return limits.check_name(value)
    except limits.LimitError as e:
        raise exception.InvalidRequest(
            f"{field}: expected {e.expected}, got {_show(value)}",
            field=field, reason=f"expected {e.expected}") from None


def _show(value: object) -> str:
    return exception.clip(repr(value), 60)


def _check_metadata(metadata: Mapping) -> dict[str, str | None]:
    """Metadata as stored: string values (numbers and booleans converted), None to
    delete a key; keys the scheduler reads as numbers must hold one in range."""
    if not isinstance(metadata, Mapping):
        raise exception.InvalidRequest(f"metadata: expected a mapping, got {_show(metadata)}",
                                       field="metadata", reason="expected a mapping")
    out: dict[str, str | None] = {}
    for key, value in metadata.items():
        _check_name("metadata key", key)
        field = f"metadata.{key}"
        if value is None:
            out[key] = None
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, float) and not math.isfinite(value):
            raise exception.InvalidRequest(f"{field}: expected a finite number",
                                           field=field, reason="expected a finite number")
        elif isinstance(value, int | float):
            value = str(value)
        if not isinstance(value, str):
            raise exception.InvalidRequest(
                f"{field}: expected a string of at most 255 characters, got {_show(value)}",
                field=field, reason="expected a string")
        try:
            out[key] = limits.check_metadata_value(key, value)
        except limits.LimitError as e:
            raise exception.InvalidRequest(
                f"{field}: expected {e.expected}, got {_show(value)}",
                field=field, reason=f"expected {e.expected}, got {_show(value)}") from None
    return out


def _get(session: Session, name: str) -> models.Aggregate:
    agg = session.scalars(sa.select(models.Aggregate).where(
        models.Aggregate.name == name, models.Aggregate.deleted == 0)).first()
    if agg is None:
        raise exception.NotFound(kind="Aggregate", name=name)
    return agg


def _touch(agg: models.Aggregate) -> None:
    agg.updated_at = models.utcnow()


def _hosts(session: Session, agg_id: int) -> list[str]:
    return list(session.scalars(sa.select(models.AggregateHost.host).where(
        models.AggregateHost.aggregate_id == agg_id).order_by(models.AggregateHost.host)))


def _metadata(session: Session, agg_id: int) -> dict[str, str]:
    rows = session.execute(sa.select(models.AggregateMetadata.key,
                                     models.AggregateMetadata.value).where(
        models.AggregateMetadata.aggregate_id == agg_id))
    return dict(sorted(rows.tuples()))


def _to_dict(session: Session, agg: models.Aggregate) -> dict:
    metadata = _metadata(session, agg.id)
    return {"id": agg.id, "uuid": agg.uuid, "name": agg.name,
            "availability_zone": metadata.get(AZ_KEY),
            "hosts": _hosts(session, agg.id), "metadata": metadata,
            "created_at": agg.created_at.isoformat(),
            "updated_at": agg.updated_at.isoformat()}


def zones_of_host(session: Session, host: str) -> dict[str, list[str]]:
    """The availability zones a host is in: {zone: [aggregate names]}."""
    q = (sa.select(models.AggregateMetadata.value, models.Aggregate.name)
         .join(models.Aggregate, models.Aggregate.id == models.AggregateMetadata.aggregate_id)
         .join(models.AggregateHost,
               models.AggregateHost.aggregate_id == models.Aggregate.id)
         .where(models.AggregateHost.host == host, models.AggregateMetadata.key == AZ_KEY,
                models.Aggregate.deleted == 0)
         .order_by(models.Aggregate.name))
    zones: dict[str, list[str]] = {}
    for zone, name in session.execute(q).tuples():
        zones.setdefault(zone, []).append(name)
    return zones


def check_zones(session: Session, hosts: Iterable[str]) -> None:
    """Conflict if any of ``hosts`` is now in more than one availability zone.

    Run after a change, inside its transaction: the whole change rolls back.
    A few hosts are looked up by name; many (a fleet import) with one query over
    every zone's members.
    """
    wanted = set(hosts)
    q = (sa.select(models.AggregateHost.host, models.AggregateMetadata.value,
                   models.Aggregate.name)
         .join(models.Aggregate, models.Aggregate.id == models.AggregateMetadata.aggregate_id)
         .join(models.AggregateHost, models.AggregateHost.aggregate_id == models.Aggregate.id)
         .where(models.AggregateMetadata.key == AZ_KEY, models.Aggregate.deleted == 0)
         .order_by(models.AggregateHost.host, models.Aggregate.name))
    queries = [q] if len(wanted) > IN_CHUNK else \
        [q.where(models.AggregateHost.host.in_(c)) for c in chunks(sorted(wanted))]
    zones: dict[str, dict[str, list[str]]] = {}
    for query in queries:
        for host, zone, name in session.execute(query).tuples():
            if host in wanted:
                zones.setdefault(host, {}).setdefault(zone, []).append(name)
    for host in sorted(zones):
        if len(zones[host]) > 1:
            where = ", ".join(f"{z} (aggregate {', '.join(n)})" for z, n in zones[host].items())
            raise exception.Conflict(
                f"host {host} would be in more than one availability zone: {where}",
                reason=f"host {host} in more than one availability zone")


def host_names(hosts: object, field: str = "hosts") -> list[str]:
    """``hosts`` as a list of checked names: InvalidRequest naming ``field[i]``
    for a bad or repeated one, or ``field`` for an empty list."""
    if not isinstance(hosts, list | tuple):
        raise exception.InvalidRequest(f"{field}: expected a list of host names",
                                       field=field, reason="expected a list of host names")
    if not hosts:
        raise exception.InvalidRequest(f"{field}: expected at least one host",
                                       field=field, reason="expected at least one host")
    seen: set[str] = set()
    for i, host in enumerate(hosts):
        _check_name(f"{field}[{i}]", host)
        if host in seen:
            raise exception.InvalidRequest(f"{field}[{i}]: {host} is listed twice",
                                           field=f"{field}[{i}]",
                                           reason=f"{host} is listed twice")
        seen.add(host)
    return list(hosts)


def _among(session: Session, query: sa.Select, column, names: Sequence[str]) -> set[str]:
    """Which of ``names`` ``query`` (selecting ``column``) returns: one
    statement, by name for a few, the whole result filtered here for many (an
    IN list is bounded; the statement count stays constant)."""
    if len(names) <= IN_CHUNK:
        query = query.where(column.in_(names))
    return set(session.scalars(query)).intersection(names)


def _unknown_hosts(session: Session, names: Sequence[str]) -> list[str]:
    """The names of ``names`` that are no live host, in the given order."""
    nodes = models.ComputeNode
    live = _among(session, sa.select(nodes.host).where(nodes.deleted == 0).distinct(),
                  nodes.host, names)
    return [h for h in names if h not in live]


def _members(session: Session, agg_id: int, names: Sequence[str]) -> set[str]:
    """Which of ``names`` are members of aggregate ``agg_id``."""
    member = models.AggregateHost
    return _among(session, sa.select(member.host).where(member.aggregate_id == agg_id),
                  member.host, names)


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _require_hosts(session: Session, names: Sequence[str]) -> None:
    """NotFound naming the first of ``names`` that is no live host."""
    unknown = _unknown_hosts(session, names)
    if not unknown:
        return
    message = None
    if len(unknown) > 1:
        message = (f"Host {unknown[0]} not found ({len(unknown)} unknown hosts: "
                   f"{_listed(unknown)}).")
    raise exception.NotFound(message, kind="Host", name=unknown[0])


# -- session-level operations (also used by fleet import) --------------------------------

def create_in_session(session: Session, name: str, availability_zone: str | None = None,
                      metadata: Mapping | None = None,
                      hosts: Iterable[str] | None = None) -> models.Aggregate:
    _check_name("name", name)
    exists = session.scalar(sa.select(models.Aggregate.id).where(
        models.Aggregate.name == name, models.Aggregate.deleted == 0))
    if exists is not None:
        raise exception.Conflict(f"aggregate {name} already exists",
                                 reason=f"aggregate {name} already exists")
    agg = models.Aggregate(uuid=str(uuidlib.uuid4()), name=name)
    session.add(agg)
    session.flush()
    meta = dict(metadata or {})
    if availability_zone is not None:
        meta[AZ_KEY] = availability_zone
    set_metadata_in_session(session, agg, meta)
    if hosts:
        add_hosts_in_session(session, agg, host_names(list(hosts)))
    return agg


def set_metadata_in_session(session: Session, agg: models.Aggregate,
                            metadata: Mapping) -> None:
    """Merge ``metadata`` into the aggregate's; a None value deletes that key."""
    changes = _check_metadata(metadata)
    if changes.get(AZ_KEY) is not None:
        _check_name(f"metadata.{AZ_KEY}", changes[AZ_KEY])
    current = {m.key: m for m in session.scalars(sa.select(models.AggregateMetadata).where(
        models.AggregateMetadata.aggregate_id == agg.id))}
    for key, value in changes.items():
        row = current.get(key)
        if value is None:
            if row is not None:
                session.delete(row)
        elif row is None:
            session.add(models.AggregateMetadata(aggregate_id=agg.id, key=key, value=value))
        else:
            row.value = value
    _touch(agg)
    session.flush()


def add_hosts_in_session(session: Session, agg: models.Aggregate,
                         names: Sequence[str]) -> None:
    """Add checked, distinct host ``names`` to ``agg`` in one multi-row insert;
    nothing is written when one is unknown (NotFound) or a member already
    (Conflict), each naming the first such host. A constant number of
    statements whatever the number of hosts."""
    _require_hosts(session, names)
    members = _members(session, agg.id, names)
    if members:
        already = [h for h in names if h in members]
        more = f" (and {len(already) - 1} more)" if len(already) > 1 else ""
        raise exception.Conflict(f"host {already[0]} is already in aggregate {agg.name}{more}",
                                 reason=f"host {already[0]} already in aggregate {agg.name}")
    session.execute(models.AggregateHost.__table__.insert(),
                    [{"aggregate_id": agg.id, "host": h} for h in names])
    _touch(agg)
    session.flush()


def remove_hosts_in_session(session: Session, agg: models.Aggregate,
                            names: Sequence[str]) -> None:
    """Take distinct host ``names`` out of ``agg``; nothing is removed when one
    is not a member (NotFound naming the first such host)."""
    members = _members(session, agg.id, names)
    absent = [h for h in names if h not in members]
    if absent:
        more = f" ({len(absent)} hosts are not: {_listed(absent)})" if len(absent) > 1 else ""
        raise exception.NotFound(f"Host {absent[0]} is not in aggregate {agg.name}{more}.",
                                 kind="Host", name=absent[0])
    member = models.AggregateHost
    for chunk in chunks(list(names)):
        session.execute(sa.delete(member).where(member.aggregate_id == agg.id,
                                                member.host.in_(chunk)))
    _touch(agg)
    session.flush()


def remove_host_everywhere(session: Session, host: str) -> list[str]:
    """Take ``host`` out of every aggregate (host deleted); returns the aggregate names."""
    aggs = list(session.scalars(
        sa.select(models.Aggregate).join(
            models.AggregateHost, models.AggregateHost.aggregate_id == models.Aggregate.id)
        .where(models.AggregateHost.host == host, models.Aggregate.deleted == 0)))
    for agg in aggs:
        remove_hosts_in_session(session, agg, [host])
    return [a.name for a in aggs]


def sync_many_in_session(session: Session, records: Sequence, now: datetime.datetime
                         ) -> dict[str, str]:
    """Make each aggregate of ``records`` (``db.records.AggregateRecord``) exactly as
    described, in bulk; returns name -> created/updated/unchanged.

    What is stored is read with one query per table; membership and metadata are
    then written with one multi-row insert and one delete per table, so an
    aggregate of 10,000 hosts costs a few statements. The hosts must exist (the
    fleet file defines them); zones are checked by the caller (:func:`check_zones`).
    """
    agg_t, host_t, meta_t = (models.Aggregate.__table__, models.AggregateHost.__table__,
                             models.AggregateMetadata.__table__)
    names = [r.name for r in records]
    for name in names:
        _check_name("name", name)
    existing: dict[str, int] = {}
    for chunk in chunks(names):
        existing.update(session.execute(sa.select(agg_t.c.name, agg_t.c.id).where(
            agg_t.c.name.in_(chunk), agg_t.c.deleted == 0)).tuples().all())
    new = [r for r in records if r.name not in existing]
    if new:
        session.execute(agg_t.insert(), [
            {"uuid": str(uuidlib.uuid4()), "name": r.name, "deleted": 0, "created_at": now,
             "updated_at": now} for r in new])
        for chunk in chunks([r.name for r in new]):
            existing.update(session.execute(sa.select(agg_t.c.name, agg_t.c.id).where(
                agg_t.c.name.in_(chunk), agg_t.c.deleted == 0)).tuples().all())
    ids = list(existing.values())
    hosts_now: dict[int, set[str]] = {}
    meta_now: dict[int, dict[str, str]] = {}
    for chunk in chunks(ids):
        for agg_id, host in session.execute(sa.select(host_t.c.aggregate_id, host_t.c.host)
                                            .where(host_t.c.aggregate_id.in_(chunk))):
            hosts_now.setdefault(agg_id, set()).add(host)
        for agg_id, key, value in session.execute(
                sa.select(meta_t.c.aggregate_id, meta_t.c.key, meta_t.c.value)
                .where(meta_t.c.aggregate_id.in_(chunk))):
            meta_now.setdefault(agg_id, {})[key] = value
    statuses: dict[str, str] = {}
    add_hosts, drop_hosts, add_meta, drop_meta, set_meta, touched = [], [], [], [], [], []
    created = {r.name for r in new}
    for rec in records:
        agg_id = existing[rec.name]
        wanted_meta = _check_metadata(dict(rec.metadata))
        if rec.availability_zone is not None:
            wanted_meta[AZ_KEY] = _check_name(f"metadata.{AZ_KEY}", rec.availability_zone)
        have_hosts, have_meta = hosts_now.get(agg_id, set()), meta_now.get(agg_id, {})
        wanted_hosts = set(rec.hosts)
        add_hosts += [{"aggregate_id": agg_id, "host": h}
                      for h in sorted(wanted_hosts - have_hosts)]
        drop_hosts += [(agg_id, h) for h in sorted(have_hosts - wanted_hosts)]
        add_meta += [{"aggregate_id": agg_id, "key": k, "value": v}
                     for k, v in wanted_meta.items() if k not in have_meta]
        set_meta += [{"_agg": agg_id, "_key": k, "value": v}
                     for k, v in wanted_meta.items() if k in have_meta and have_meta[k] != v]
        drop_meta += [(agg_id, k) for k in have_meta if k not in wanted_meta]
        changed = wanted_hosts != have_hosts or wanted_meta != have_meta
        statuses[rec.name] = ("created" if rec.name in created
                              else "updated" if changed else "unchanged")
        if changed and rec.name not in created:
            touched.append(agg_id)
    by_agg: dict[int, list[str]] = {}
    for agg_id, host in drop_hosts:
        by_agg.setdefault(agg_id, []).append(host)
    for agg_id, hosts in by_agg.items():
        for chunk in chunks(hosts):
            session.execute(host_t.delete().where(host_t.c.aggregate_id == agg_id,
                                                  host_t.c.host.in_(chunk)))
    for agg_id, key in drop_meta:
        session.execute(meta_t.delete().where(meta_t.c.aggregate_id == agg_id,
                                              meta_t.c.key == key))
    if set_meta:
        session.execute(meta_t.update().where(meta_t.c.aggregate_id == sa.bindparam("_agg"),
                                              meta_t.c.key == sa.bindparam("_key"))
                        .values(value=sa.bindparam("value")), set_meta)
    for chunk in chunks(add_meta, 5000):
        session.execute(meta_t.insert(), list(chunk))
    for chunk in chunks(add_hosts, 5000):
        session.execute(host_t.insert(), list(chunk))
    for chunk in chunks(touched):
        session.execute(agg_t.update().where(agg_t.c.id.in_(chunk)).values(updated_at=now))
    return statuses


def list_in_session(session: Session) -> list[dict]:
    aggs = session.scalars(sa.select(models.Aggregate).where(
        models.Aggregate.deleted == 0).order_by(models.Aggregate.name))
    return [_to_dict(session, a) for a in aggs]


# -- public API: one transaction each ----------------------------------------------------

def _translate_duplicate(fn):
    """A concurrent create of the same name surfaces as Conflict, not a DB error."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except db_exc.DBDuplicateEntry as e:
            raise exception.Conflict(f"duplicate entry: {', '.join(e.columns or [])}",
                                     reason="duplicate entry") from None
    return wrapper


@_translate_duplicate
@retry_on_deadlock
def create_aggregate(db: Database, name: str, availability_zone: str | None = None,
                     metadata: Mapping | None = None,
                     hosts: Iterable[str] | None = None) -> dict:
    """Create an aggregate (optionally an AZ, with metadata and hosts)."""
    with db.writer() as session:
        agg = create_in_session(session, name, availability_zone, metadata, hosts)
        check_zones(session, _hosts(session, agg.id))
        return _to_dict(session, agg)


@_translate_duplicate
@retry_on_deadlock
def update_aggregate(db: Database, name: str, new_name: str | None = None,
                     availability_zone: str | None | object = _UNSET) -> dict:
    """Rename an aggregate and/or set its zone (``availability_zone=None`` removes it)."""
    with db.writer() as session:
        agg = _get(session, name)
        if new_name is not None and new_name != name:
            _check_name("name", new_name)
            taken = session.scalar(sa.select(models.Aggregate.id).where(
                models.Aggregate.name == new_name, models.Aggregate.deleted == 0))
            if taken is not None:
                raise exception.Conflict(f"aggregate {new_name} already exists",
                                         reason=f"aggregate {new_name} already exists")
            agg.name = new_name
        if availability_zone is not _UNSET:
            set_metadata_in_session(session, agg, {AZ_KEY: availability_zone})
            check_zones(session, _hosts(session, agg.id))
        _touch(agg)
        session.flush()
        return _to_dict(session, agg)


@retry_on_deadlock
def delete_aggregate(db: Database, name: str) -> None:
    """Soft-delete an empty aggregate (Conflict while it still has hosts, as in Nova)."""
    with db.writer() as session:
        agg = _get(session, name)
        hosts = _hosts(session, agg.id)
        if hosts:
            raise exception.Conflict(
                f"aggregate {name} still has hosts: {', '.join(hosts)}; remove them first",
                reason=f"aggregate {name} still has hosts")
        session.execute(sa.delete(models.AggregateMetadata).where(
            models.AggregateMetadata.aggregate_id == agg.id))
        now = models.utcnow()
        agg.deleted = agg.id
        agg.deleted_at = now
        agg.updated_at = now


def add_host(db: Database, name: str, host: str) -> dict:
    """Add ``host`` to aggregate ``name`` (Conflict if that puts it in a second zone)."""
    _check_name("host", host)
    return _add_hosts(db, name, [host])


def add_hosts(db: Database, name: str, hosts: Sequence[str]) -> dict:
    """Add every one of ``hosts`` to aggregate ``name`` in one transaction, or
    none: an unknown host (NotFound), a member already or a host the change
    would put in a second zone (Conflict) is named, and nothing is written."""
    return _add_hosts(db, name, host_names(hosts))


@retry_on_deadlock
def _add_hosts(db: Database, name: str, names: list[str]) -> dict:
    with db.writer() as session:
        agg = _get(session, name)
        add_hosts_in_session(session, agg, names)
        check_zones(session, names)
        return _to_dict(session, agg)


def remove_host(db: Database, name: str, host: str) -> dict:
    """Remove ``host`` from aggregate ``name``."""
    _check_name("host", host)
    return _remove_hosts(db, name, [host])


def remove_hosts(db: Database, name: str, hosts: Sequence[str]) -> dict:
    """Remove every one of ``hosts`` from aggregate ``name`` in one
    transaction, or none (NotFound naming the first that is not a member)."""
    return _remove_hosts(db, name, host_names(hosts))


@retry_on_deadlock
def _remove_hosts(db: Database, name: str, names: list[str]) -> dict:
    with db.writer() as session:
        agg = _get(session, name)
        remove_hosts_in_session(session, agg, names)
        return _to_dict(session, agg)


@retry_on_deadlock
def set_metadata(db: Database, name: str, metadata: Mapping) -> dict:
    """Merge metadata into aggregate ``name``; a None value deletes that key."""
    with db.writer() as session:
        agg = _get(session, name)
        set_metadata_in_session(session, agg, metadata)
        check_zones(session, _hosts(session, agg.id))
        return _to_dict(session, agg)


def list_aggregates(db: Database) -> list[dict]:
    """Every live aggregate with its zone, hosts and metadata, by name."""
    with db.reader() as session:
        return list_in_session(session)


def get_aggregate(db: Database, name: str) -> dict:
    """One aggregate; raises NotFound."""
    with db.reader() as session:
        return _to_dict(session, _get(session, name))
