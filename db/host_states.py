"""The reads behind the host-state cache: full load once, changed rows after.

Core (not ORM) selects: these run on every request at 10,000+ hosts.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from db import models
from db.api import chunks
from db.inventory import Inventory

_cn = models.ComputeNode.__table__
_svc = models.Service.__table__
_agg = models.Aggregate.__table__
_agg_hosts = models.AggregateHost.__table__
_agg_meta = models.AggregateMetadata.__table__
_alloc = models.Consumer.__table__
_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__
_changes = models.NodeChange.__table__
Timestamp = models.Timestamp

NODE_COLUMNS = [c for c in _cn.c if c.name not in ("created_at", "deleted_at")]


_ALL_NODES = sa.select(*NODE_COLUMNS).where(_cn.c.deleted == 0)
# Built once with an expanding IN: a refresh of a few changed nodes runs these
# on every request that follows another scheduler's claim.
_NODES_BY_ID = _ALL_NODES.where(_cn.c.id.in_(sa.bindparam("ids", expanding=True)))


def load_nodes(conn: Connection, node_ids: Iterable[int] | None = None) -> list[sa.RowMapping]:
    """Live compute_nodes rows (all, or the given ids)."""
    if node_ids is None:
        return list(conn.execute(_ALL_NODES).mappings())
    out: list[sa.RowMapping] = []
    for chunk in chunks(list(node_ids)):
        out.extend(conn.execute(_NODES_BY_ID, {"ids": chunk}).mappings())
    return out


def _changes_query():
    text = sa.literal(None, sa.Text)
    nodes = sa.select(sa.literal(0), _cn.c.id, _cn.c.generation, _cn.c.deleted,
                      _cn.c.updated_at, text).where(_cn.c.updated_at >= sa.bindparam("since"))
    # the journal's rows line up with the nodes' (id, generation, -, stamp)
    changes = sa.select(sa.literal(1), _changes.c.compute_node_id, _changes.c.generation,
                        sa.literal(0), _changes.c.at, _changes.c.change).where(
        _changes.c.at >= sa.bindparam("since"))
    aggs = sa.select(sa.literal(2), sa.func.count(_agg.c.id), sa.literal(0), sa.literal(0),
                     sa.func.max(_agg.c.updated_at), text)
    return sa.union_all(nodes, changes, aggs)


_CHANGES = _changes_query()     # built once: this runs on every request


@dataclasses.dataclass
class Changes:
    """What ``changes_since`` found."""

    #: (id, generation, deleted, updated_at) of the node rows touched
    nodes: list[tuple[int, int, int, datetime.datetime]]
    #: node id -> {generation: (at, change text)} of the journalled claims and
    #: releases (``db.node_changes``)
    journal: dict[int, dict[int, tuple[datetime.datetime, str]]]
    #: ``aggregates_version``
    aggregates: tuple


def changes_since(conn: Connection, since: datetime.datetime) -> Changes:
    """Node rows touched at or after ``since`` (narrow: the caller fetches full
    rows only for generations it has not seen yet), the claims and releases
    journalled since then, and ``aggregates_version``, in one round trip."""
    out = Changes([], {}, (None, 0))
    for kind, a, b, c, d, text in conn.execute(_CHANGES, {"since": since}):
        if kind == 0:
            out.nodes.append((a, b, c, d))
        elif kind == 1:
            out.journal.setdefault(a, {})[b] = (d, text)
        else:
            out.aggregates = (d, a)
    return out


def _nodes_journal_query():
    text = sa.literal(None, sa.Text)
    ids = sa.bindparam("ids", expanding=True)
    nodes = sa.select(sa.literal(0), _cn.c.id, _cn.c.generation, sa.literal(None, Timestamp),
                      text).where(_cn.c.id.in_(ids), _cn.c.deleted == 0)
    changes = sa.select(sa.literal(1), _changes.c.compute_node_id, _changes.c.generation,
                        _changes.c.at, _changes.c.change).where(
        _changes.c.at >= sa.bindparam("since"), _changes.c.compute_node_id.in_(ids))
    return sa.union_all(nodes, changes)


_NODES_JOURNAL = _nodes_journal_query()


def nodes_journal(conn: Connection, node_ids: list[int], since: datetime.datetime
                  ) -> tuple[dict[int, int], dict[int, dict[int, tuple[datetime.datetime, str]]]]:
    """The live nodes' generations (id -> generation) and their claims and
    releases journalled at or after ``since`` (as ``Changes.journal``), in one
    round trip (the journal's rows by their ``at`` index)."""
    generations: dict[int, int] = {}
    journal: dict[int, dict[int, tuple[datetime.datetime, str]]] = {}
    for kind, node_id, generation, at, text in conn.execute(
            _NODES_JOURNAL, {"ids": list(node_ids), "since": since}):
        if kind == 0:
            generations[node_id] = generation
        else:
            journal.setdefault(node_id, {})[generation] = (at, text)
    return generations, journal


def heartbeats(conn: Connection, since: datetime.datetime | None = None,
               hosts: list[str] | None = None) -> dict[str, datetime.datetime | None]:
    """host -> last_seen_up, for services rows changed since ``since`` and/or of
    the given hosts (or all)."""
    q = sa.select(_svc.c.host, _svc.c.last_seen_up)
    if since is not None:
        q = q.where(_svc.c.updated_at >= since)
    if hosts is not None:
        q = q.where(_svc.c.host.in_(hosts))
    out: dict[str, datetime.datetime | None] = {}
    for host, seen in conn.execute(q):
        prev = out.get(host)
        if prev is None or (seen is not None and seen > prev):
            out[host] = seen
    return out


def aggregates_version(conn: Connection) -> tuple:
    """Changes whenever an aggregate, its hosts or its metadata change."""
    return tuple(conn.execute(sa.select(sa.func.max(_agg.c.updated_at),
                                        sa.func.count(_agg.c.id))).one())


def load_aggregates(conn: Connection) -> list[dict]:
    """Live aggregates with their hosts and metadata."""
    aggs: dict[int, dict] = {}
    for row in conn.execute(sa.select(_agg.c.id, _agg.c.uuid, _agg.c.name)
                            .where(_agg.c.deleted == 0)):
        aggs[row.id] = {"id": row.id, "uuid": row.uuid, "name": row.name,
                        "hosts": set(), "metadata": {}}
    for agg_id, host in conn.execute(sa.select(_agg_hosts.c.aggregate_id, _agg_hosts.c.host)):
        if agg_id in aggs:
            aggs[agg_id]["hosts"].add(host)
    for agg_id, key, value in conn.execute(
            sa.select(_agg_meta.c.aggregate_id, _agg_meta.c.key, _agg_meta.c.value)):
        if agg_id in aggs:
            aggs[agg_id]["metadata"][key] = value
    return list(aggs.values())


# Preempted consumers are not on their node any more, as far as filters go.
_INSTANCES = sa.select(_alloc.c.compute_node_id, _alloc.c.uuid, _alloc.c.instance_group).where(
    _alloc.c.consumer_type != models.PREEMPTED)
_specs = models.RequestSpecRow.__table__
# The request each allocation answered: stored once per request (request_specs),
# or on the allocation itself (rows written before migration 0003).
_IMAGES = (sa.select(_alloc.c.compute_node_id, _alloc.c.uuid,
                     sa.func.coalesce(_specs.c.spec, _alloc.c.request_spec))
           .select_from(_alloc.outerjoin(_specs, _specs.c.id == _alloc.c.request_spec_id)))
_IMAGES_BY_NODE = _IMAGES.where(
    _alloc.c.compute_node_id.in_(sa.bindparam("ids", expanding=True)))
_INSTANCES_BY_NODE = _INSTANCES.where(
    _alloc.c.compute_node_id.in_(sa.bindparam("ids", expanding=True)))


def instances_by_node(conn: Connection, node_ids: Iterable[int] | None = None
                      ) -> dict[int, dict[str, str | None]]:
    """node id -> {instance_uuid: server group uuid or None} from allocations."""
    if node_ids is None:
        results = [conn.execute(_INSTANCES)]
    else:
        results = [conn.execute(_INSTANCES_BY_NODE, {"ids": chunk})
                   for chunk in chunks(list(node_ids))]
    out: dict[int, dict[str, str | None]] = {}
    for result in results:
        for node_id, inst, group in result:
            out.setdefault(node_id, {})[inst] = group
    return out


def instance_images_by_node(conn: Connection, node_ids: Iterable[int] | None = None
                            ) -> dict[int, dict[str, frozenset[tuple[str, str]]]]:
    """node id -> {instance_uuid: its image's (property, value) pairs}, from the
    request each allocation answered (ImagePropertiesWeigher)."""
    if node_ids is None:
        results = [conn.execute(_IMAGES)]
    else:
        results = [conn.execute(_IMAGES_BY_NODE, {"ids": chunk})
                   for chunk in chunks(list(node_ids))]
    out: dict[int, dict[str, frozenset[tuple[str, str]]]] = {}
    for result in results:
        for node_id, inst, text in result:
            out.setdefault(node_id, {})[inst] = image_pairs(_image_properties(text))
    return out


def image_pairs(properties) -> frozenset[tuple[str, str]]:
    """An image's properties as (property, value) pairs."""
    return frozenset((str(k), str(v)) for k, v in (properties or {}).items())


def _image_properties(text: str | None) -> dict:
    if not text:
        return {}
    try:
        spec = json.loads(text)
    except ValueError:
        return {}
    image = spec.get("image") if isinstance(spec, dict) else None
    props = image.get("properties") if isinstance(image, dict) else None
    return props if isinstance(props, dict) else {}


# -- the ledger: each node's providers, their inventories (with usage) and traits -----------

@dataclasses.dataclass
class ProviderRecord:
    """One provider of a node as stored: its inventories with their usage."""

    id: int
    uuid: str
    name: str
    parent_id: int | None
    traits: frozenset[str] = frozenset()
    inventories: dict[str, tuple[Inventory, int]] = dataclasses.field(default_factory=dict)


_PROVIDERS = sa.select(_rp.c.id, _rp.c.uuid, _rp.c.name, _rp.c.parent_id, _rp.c.traits,
                       _rp.c.compute_node_id).order_by(_rp.c.compute_node_id, _rp.c.id)
_INVENTORIES = sa.select(_inv.c.provider_id, _inv.c.resource_class, _inv.c.total,
                         _inv.c.reserved, _inv.c.min_unit, _inv.c.max_unit, _inv.c.step_size,
                         _inv.c.allocation_ratio, _inv.c.used)
_PROVIDERS_BY_NODE = _PROVIDERS.where(
    _rp.c.compute_node_id.in_(sa.bindparam("ids", expanding=True)))
_INVENTORIES_BY_NODE = _INVENTORIES.join_from(_inv, _rp, _rp.c.id == _inv.c.provider_id).where(
    _rp.c.compute_node_id.in_(sa.bindparam("ids", expanding=True)))

#: Inventories read from rows: equal rows share one (immutable) Inventory.
_INVENTORY_VALUES: dict[tuple, Inventory] = {}


def _inventory(values: tuple) -> Inventory:
    inv = _INVENTORY_VALUES.get(values)
    if inv is None:
        if len(_INVENTORY_VALUES) >= 65536:
            _INVENTORY_VALUES.clear()
        inv = _INVENTORY_VALUES[values] = Inventory(*values)
    return inv


#: Trait texts read from rows: equal texts share one frozenset.
_TRAIT_SETS: dict[str, frozenset[str]] = {}


def trait_set(text: str | None) -> frozenset[str]:
    """A provider's ``traits`` column as a set."""
    traits = _TRAIT_SETS.get(text or "")
    if traits is None:
        if len(_TRAIT_SETS) >= 16384:
            _TRAIT_SETS.clear()
        traits = _TRAIT_SETS[text or ""] = frozenset((text or "").split())
    return traits


def trait_text(traits) -> str:
    """Traits as the ``traits`` column stores them."""
    return " ".join(sorted(traits))


def load_providers(conn: Connection, node_ids: Iterable[int] | None = None
                   ) -> dict[int, list[ProviderRecord]]:
    """node id -> its providers (the root first, then the others by id)."""
    if node_ids is None:
        chunked = [((_PROVIDERS, {}), (_INVENTORIES, {}))]
    else:
        chunked = [((_PROVIDERS_BY_NODE, {"ids": chunk}), (_INVENTORIES_BY_NODE, {"ids": chunk}))
                   for chunk in chunks(list(node_ids))]
    out: dict[int, list[ProviderRecord]] = {}
    for (q_rp, p_rp), (q_inv, p_inv) in chunked:
        by_id: dict[int, ProviderRecord] = {}
        for pid, uuid, name, parent_id, traits, node_id in conn.execute(q_rp, p_rp):
            rec = by_id[pid] = ProviderRecord(pid, uuid, name, parent_id, trait_set(traits))
            providers = out.setdefault(node_id, [])
            if parent_id is None:
                providers.insert(0, rec)
            else:
                providers.append(rec)
        for pid, rc, total, reserved, lo, hi, step, ratio, used in conn.execute(q_inv, p_inv):
            rec = by_id.get(pid)
            if rec is not None:
                rec.inventories[rc] = (_inventory((total, reserved, lo, hi, step, ratio)),
                                       used)
    return out
