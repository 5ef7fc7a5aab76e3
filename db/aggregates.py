"""Host aggregates and availability zones (an AZ is the ``availability_zone`` metadata).

Every change to an aggregate, its hosts or its metadata bumps the aggregate's
``updated_at``: host-state caches poll ``max(updated_at)`` to notice changes.
A host belongs to one availability zone at most, as in Nova.

The public functions are whole transactions; the ``*_in_session`` helpers let
``db.hosts.import_fleet`` apply aggregates inside its own transaction.
"""
from __future__ import annotations

import functools
import math
import uuid as uuidlib
from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from oslo_db import exception as db_exc
from sqlalchemy.orm import Session

from db import errors as exception
from db import limits, models
from db.api import Database, retry_on_deadlock

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
    """
    for host in sorted(set(hosts)):
        zones = zones_of_host(session, host)
        if len(zones) > 1:
            where = ", ".join(f"{z} (aggregate {', '.join(n)})" for z, n in zones.items())
            raise exception.Conflict(
                f"host {host} would be in more than one availability zone: {where}",
                reason=f"host {host} in more than one availability zone")


def _require_host(session: Session, host: str) -> None:
    exists = session.scalar(sa.select(models.ComputeNode.id).where(
        models.ComputeNode.host == host, models.ComputeNode.deleted == 0).limit(1))
    if exists is None:
        raise exception.NotFound(kind="Host", name=host)


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
    for host in hosts or ():
        add_host_in_session(session, agg, host)
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


def replace_metadata_in_session(session: Session, agg: models.Aggregate,
                                metadata: Mapping) -> None:
    """Make the aggregate's metadata exactly ``metadata``."""
    current = _metadata(session, agg.id)
    changes: dict = {k: None for k in current if k not in metadata}
    changes.update({k: v for k, v in metadata.items() if current.get(k) != str(v)})
    if changes:
        set_metadata_in_session(session, agg, changes)


def add_host_in_session(session: Session, agg: models.Aggregate, host: str) -> None:
    _check_name("host", host)
    _require_host(session, host)
    if host in _hosts(session, agg.id):
        raise exception.Conflict(f"host {host} is already in aggregate {agg.name}",
                                 reason=f"host {host} already in aggregate {agg.name}")
    session.add(models.AggregateHost(aggregate_id=agg.id, host=host))
    _touch(agg)
    session.flush()


def remove_host_in_session(session: Session, agg: models.Aggregate, host: str) -> None:
    deleted = session.execute(sa.delete(models.AggregateHost).where(
        models.AggregateHost.aggregate_id == agg.id, models.AggregateHost.host == host))
    if deleted.rowcount == 0:
        raise exception.NotFound(f"Host {host} is not in aggregate {agg.name}.",
                                 kind="Host", name=host)
    _touch(agg)
    session.flush()


def remove_host_everywhere(session: Session, host: str) -> list[str]:
    """Take ``host`` out of every aggregate (host deleted); returns the aggregate names."""
    aggs = list(session.scalars(
        sa.select(models.Aggregate).join(
            models.AggregateHost, models.AggregateHost.aggregate_id == models.Aggregate.id)
        .where(models.AggregateHost.host == host, models.Aggregate.deleted == 0)))
    for agg in aggs:
        remove_host_in_session(session, agg, host)
    return [a.name for a in aggs]


def sync_in_session(session: Session, name: str, availability_zone: str | None,
                    hosts: Iterable[str], metadata: Mapping) -> str:
    """Make aggregate ``name`` exactly as described; returns created/updated/unchanged.

    Zones are not checked here: the caller runs :func:`check_zones` once all
    aggregates are synced, so the order of aggregates in a fleet file does not matter.
    """
    agg = session.scalars(sa.select(models.Aggregate).where(
        models.Aggregate.name == name, models.Aggregate.deleted == 0)).first()
    wanted_meta = dict(metadata)
    if availability_zone is not None:
        wanted_meta[AZ_KEY] = availability_zone
    if agg is None:
        create_in_session(session, name, metadata=wanted_meta, hosts=hosts)
        return "created"
    before = (_hosts(session, agg.id), _metadata(session, agg.id))
    wanted_hosts = set(hosts)
    for host in before[0]:
        if host not in wanted_hosts:
            remove_host_in_session(session, agg, host)
    replace_metadata_in_session(session, agg, wanted_meta)
    for host in sorted(wanted_hosts - set(before[0])):
        add_host_in_session(session, agg, host)
    after = (_hosts(session, agg.id), _metadata(session, agg.id))
    return "unchanged" if after == before else "updated"


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


@retry_on_deadlock
def add_host(db: Database, name: str, host: str) -> dict:
    """Add ``host`` to aggregate ``name`` (Conflict if that puts it in a second zone)."""
    with db.writer() as session:
        agg = _get(session, name)
        add_host_in_session(session, agg, host)
        check_zones(session, [host])
        return _to_dict(session, agg)


@retry_on_deadlock
def remove_host(db: Database, name: str, host: str) -> dict:
    """Remove ``host`` from aggregate ``name``."""
    with db.writer() as session:
        agg = _get(session, name)
        remove_host_in_session(session, agg, host)
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
