"""Preemption in the ledger: who may be preempted, and preempting them inside a claim.

A consumer may be preempted by a request of higher priority when it is an
instance (not a move's holder, not moving), confirmed (not pending), of lower
priority and preemptible (or any, when the operator says so). Preempting it is
part of the claim that takes its room (``db.claims.claim`` with ``victims``):
in that one transaction each victim's row is locked and checked again, its
devices freed, its amounts taken off the inventories' ``used``, and it becomes
a ``preempted`` consumer naming the instance that took its room; then the claim
adds its own amounts under the usual guards. A concurrent request that chose
the same victims finds them preempted (or the node's generation moved) and
conflicts: a victim is preempted once, and its room handed out once.

A preempted consumer keeps its allocation rows (what it held) until the caller
deletes the instance and releases it; they no longer count in ``used``, and its
release gives nothing back.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from db import models
from db.api import Database, chunks

_cn = models.ComputeNode.__table__
_cons = models.Consumer.__table__
_items = models.Allocation.__table__
_rp = models.ResourceProvider.__table__
_pci = models.PciDevice.__table__

PREEMPTED = models.PREEMPTED
#: The window of ``[preemption] max_per_host_per_minute``.
BUDGET_WINDOW = datetime.timedelta(seconds=60)


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """A consumer that a request of higher priority may preempt."""

    uuid: str
    node_id: int
    priority: int
    created_at: datetime.datetime
    project_id: str | None
    instance_group: str | None
    numa_cells: str | None
    amounts: tuple[tuple[int, str, int], ...]     # (provider id, class, amount)
    pci_pools: tuple = ()           # ((pci.pools.PoolKey, count), ...) of its devices


@dataclasses.dataclass(frozen=True, slots=True)
class Victims:
    """What a claim preempts: the consumers, and the rule they were chosen by
    (checked again on each, under its row lock)."""

    uuids: tuple[str, ...]
    priority: int                   # the claim's: each victim's is lower
    any_preemptible: bool = False   # [preemption] preempt_non_preemptible
    max_per_minute: int = 0         # [preemption] max_per_host_per_minute (0: none)
    #: [preemption] max_per_az_per_minute (0: none), the node's zone, the nodes
    #: of that zone and the aggregates that make it (locked while counting).
    max_per_zone_per_minute: int = 0
    zone: str | None = None
    zone_nodes: frozenset = frozenset()
    zone_aggregates: tuple[int, ...] = ()


class VictimGone(Exception):
    """A victim is no longer preemptible by this claim (released, preempted by
    another request, or moved meanwhile)."""


class BudgetExhausted(Exception):
    """The node preempted ``[preemption] max_per_host_per_minute`` already, or
    its availability zone (``zone``) ``max_per_az_per_minute``."""

    def __init__(self, message: str, zone: str | None = None) -> None:
        super().__init__(message)
        self.zone = zone


def _eligible(priority: int, any_preemptible: bool):
    """The rule, as a SQL condition over ``consumers``."""
    where = [_cons.c.consumer_type == "instance", _cons.c.pending == sa.false(),
             _cons.c.priority < priority,
             sa.or_(_cons.c.move_state.is_(None), _cons.c.move_state != "moving")]
    if not any_preemptible:
        where.append(_cons.c.preemptible == sa.true())
    return sa.and_(*where)


_CANDIDATE_COLUMNS = (_cons.c.id, _cons.c.uuid, _cons.c.compute_node_id, _cons.c.priority,
                      _cons.c.created_at, _cons.c.project_id, _cons.c.instance_group,
                      _cons.c.numa_cells, _cons.c.pci_devices)


def candidates(db: Database, priority: int, node_ids: Iterable[int],
               any_preemptible: bool = False, uuids: Iterable[str] | None = None
               ) -> dict[int, list[Candidate]]:
    """node id -> the consumers on it a request of ``priority`` may preempt,
    with what each holds (and, when it holds devices, their pools); with
    ``uuids``, only those consumers (``node_ids`` is then not read)."""
    eligible = _eligible(priority, any_preemptible)
    with db.reader_connection() as conn:
        if uuids is not None:
            found = _read_candidates(conn, eligible, _cons.c.uuid, sorted(set(uuids)))
        else:
            found = _read_candidates(conn, eligible, _cons.c.compute_node_id,
                                     sorted(set(node_ids)))
    out: dict[int, list[Candidate]] = {}
    for c, _preemptible, _pending in found:
        out.setdefault(c.node_id, []).append(c)
    return out


def _indexable(any_preemptible: bool):
    """The consumers ``scheduler.preemptible_index`` keeps: instances that are
    not moving and (unless ``any_preemptible``) preemptible, of any priority,
    pending or not (their pending flag is kept with them)."""
    where = [_cons.c.consumer_type == "instance",
             sa.or_(_cons.c.move_state.is_(None), _cons.c.move_state != "moving")]
    if not any_preemptible:
        where.append(_cons.c.preemptible == sa.true())
    return sa.and_(*where)


def indexable(conn, node_ids: Sequence[int] | None, any_preemptible: bool
              ) -> list[tuple[Candidate, bool, bool]]:
    """(candidate, preemptible, pending) of every consumer the preemptible
    index keeps, on ``node_ids`` (None: every node)."""
    where = _indexable(any_preemptible)
    if node_ids is None:
        return _read_candidates(conn, where, None, None)
    return _read_candidates(conn, where, _cons.c.compute_node_id, sorted(set(node_ids)))


def pending_states(db: Database, uuids: Sequence[str]) -> dict[str, bool]:
    """uuid -> whether the instance's claim is still pending (absent: it holds
    nothing as an instance any more: released, preempted or moving)."""
    out: dict[str, bool] = {}
    with db.reader_connection() as conn:
        for chunk in chunks(sorted(set(uuids))):
            for uuid, pending in conn.execute(
                    sa.select(_cons.c.uuid, _cons.c.pending)
                    .where(_indexable(True), _cons.c.uuid.in_(chunk))):
                out[uuid] = bool(pending)
    return out


def _read_candidates(conn, where, column, values) -> list[tuple[Candidate, bool, bool]]:
    """The consumers matching ``where`` (and ``column`` IN ``values`` unless
    None), with what each holds and, when it holds devices, their pools:
    (candidate, preemptible, pending)."""
    rows: list = []
    select = sa.select(*_CANDIDATE_COLUMNS, _cons.c.preemptible, _cons.c.pending).where(where)
    if column is None:
        rows.extend(conn.execute(select).all())
    else:
        for chunk in chunks(values):
            rows.extend(conn.execute(select.where(column.in_(chunk))).all())
    amounts: dict[int, list] = {}
    items = sa.select(_items.c.consumer_id, _items.c.provider_id, _items.c.resource_class,
                      _items.c.amount)
    if column is None:
        # every indexed consumer: one pass over the allocations they hold
        wanted = {r.id for r in rows}
        for cid, p, rc, n in conn.execute(
                items.join(_cons, _cons.c.id == _items.c.consumer_id).where(where)):
            if cid in wanted:
                amounts.setdefault(cid, []).append((p, rc, n))
    else:
        for chunk in chunks([r.id for r in rows]):
            for cid, p, rc, n in conn.execute(items.where(_items.c.consumer_id.in_(chunk))):
                amounts.setdefault(cid, []).append((p, rc, n))
    pools: dict[str, list] = {}
    with_devices = [r.uuid for r in rows if r.pci_devices]
    if with_devices:
        from db.pci import _POOL_COLUMNS
        from pci.device import tags_from_text
        from pci.pools import PoolKey

        for chunk in chunks(with_devices):
            for row in conn.execute(
                    sa.select(_pci.c.instance_uuid, *_POOL_COLUMNS, sa.func.count())
                    .where(_pci.c.instance_uuid.in_(chunk))
                    .group_by(_pci.c.instance_uuid, *_POOL_COLUMNS)):
                key = PoolKey(*row[1:-2], tags_from_text(row[-2]))
                pools.setdefault(row[0], []).append((key, row[-1]))
    return [(Candidate(uuid=r.uuid, node_id=r.compute_node_id, priority=r.priority,
                       created_at=r.created_at, project_id=r.project_id,
                       instance_group=r.instance_group, numa_cells=r.numa_cells,
                       amounts=tuple(sorted(amounts.get(r.id, ()))),
                       pci_pools=tuple(pools.get(r.uuid, ()))),
             bool(r.preemptible), bool(r.pending)) for r in rows]


_LOCK_VICTIM = (sa.select(_cons.c.id, _cons.c.uuid, _cons.c.consumer_type,
                          _cons.c.compute_node_id, _cons.c.pending, _cons.c.priority,
                          _cons.c.preemptible, _cons.c.move_state, _cons.c.pci_devices)
                .where(_cons.c.uuid == sa.bindparam("b_uuid"))
                # a victim another claim is preempting right now is not waited
                # for (its claim holds the lock while it runs): it is gone
                .with_for_update(skip_locked=True))
_RECENT = (sa.select(sa.func.count()).select_from(_cons)
           .where(_cons.c.consumer_type == PREEMPTED,
                  _cons.c.compute_node_id == sa.bindparam("b_node"),
                  _cons.c.preempted_at > sa.bindparam("b_since")))
_RECENT_NODES = (sa.select(_cons.c.compute_node_id)
                 .where(_cons.c.consumer_type == PREEMPTED,
                        _cons.c.preempted_at > sa.bindparam("b_since")))
_agg = models.Aggregate.__table__
_ITEMS_OF = sa.select(_items.c.provider_id, _items.c.resource_class, _items.c.amount).where(
    _items.c.consumer_id == sa.bindparam("b_id"))


def preempt_locked(conn, node_id: int, victims: Victims, by: str,
                   now: datetime.datetime) -> tuple[tuple[int, str, int], ...]:
    """Inside a claim's transaction: check each victim again under its row
    lock, free its devices and make it ``preempted`` by ``by``; returns the
    amounts to take off the inventories (the caller does, with its own
    UPDATE). Raises VictimGone or BudgetExhausted (the claim rolls back)."""
    from db import pci as db_pci

    if victims.max_per_minute:
        recent = conn.execute(_RECENT, {"b_node": node_id,
                                        "b_since": now - BUDGET_WINDOW}).scalar_one()
        if recent + len(victims.uuids) > victims.max_per_minute:
            raise BudgetExhausted(f"node {node_id} preempted {recent} instance(s) within "
                                  f"the last minute")
    if victims.max_per_zone_per_minute:
        _check_zone_budget(conn, victims, now)
    freed: list[tuple[int, str, int]] = []
    for uuid in sorted(victims.uuids):     # one lock order for every claim
        row = conn.execute(_LOCK_VICTIM, {"b_uuid": uuid}).mappings().first()
        if (row is None or row["consumer_type"] != "instance"
                or row["compute_node_id"] != node_id or row["pending"]
                or row["priority"] >= victims.priority
                or row["move_state"] == "moving"
                or not (row["preemptible"] or victims.any_preemptible)):
            raise VictimGone(f"instance {uuid} is no longer preemptible on node {node_id} "
                             f"(or another request is preempting it)")
        if row["pci_devices"]:
            db_pci.release_devices(conn, uuid)
        freed.extend(conn.execute(_ITEMS_OF, {"b_id": row["id"]}))
        conn.execute(sa.update(_cons).where(_cons.c.id == row["id"]).values(
            consumer_type=PREEMPTED, preempted_by=by, preempted_at=now, pci_devices=None))
    return tuple(freed)


def _check_zone_budget(conn, victims: Victims, now: datetime.datetime) -> None:
    """Raise BudgetExhausted when the zone preempted its budget within the
    window. The zone's aggregate rows are locked first, so that concurrent
    claims in one zone count one after the other (a zone made of no aggregate,
    the default one, has no row to lock: there two schedulers' claims on
    different nodes may both count the same total)."""
    if victims.zone_aggregates:
        conn.execute(sa.select(_agg.c.id).where(_agg.c.id.in_(sorted(victims.zone_aggregates)))
                     .with_for_update())
    nodes = victims.zone_nodes
    recent = sum(1 for (node_id,) in conn.execute(_RECENT_NODES,
                                                  {"b_since": now - BUDGET_WINDOW})
                 if node_id in nodes)
    if recent + len(victims.uuids) > victims.max_per_zone_per_minute:
        raise BudgetExhausted(f"availability zone {victims.zone} preempted {recent} "
                              f"instance(s) within the last minute", zone=victims.zone)


def preempted_count(db: Database) -> int:
    """Preempted consumers the caller has not released yet (a metric)."""
    with db.reader_connection() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(_cons)
                            .where(_cons.c.consumer_type == PREEMPTED)).scalar_one()


def preempted_of(db: Database, by: Sequence[str]) -> dict[str, list[dict]]:
    """Instance uuid -> the consumers it preempted (uuid, host, node, priority,
    project), for replies that are answered again (a retried request)."""
    if not by:
        return {}
    out: dict[str, list[dict]] = {}
    with db.reader_connection() as conn:
        for row in conn.execute(
                sa.select(_cons.c.uuid, _cons.c.preempted_by, _cons.c.priority,
                          _cons.c.project_id, _cn.c.host, _cn.c.hypervisor_hostname)
                .join(_cn, _cn.c.id == _cons.c.compute_node_id)
                .where(_cons.c.consumer_type == PREEMPTED,
                       _cons.c.preempted_by.in_(list(by)))
                .order_by(_cons.c.uuid)):
            out.setdefault(row.preempted_by, []).append(
                {"instance_uuid": row.uuid, "host": row.host,
                 "node": row.hypervisor_hostname, "priority": row.priority,
                 "project_id": row.project_id})
    return out


def numa_cells_json(text: str | None):
    """A victim's fitted NUMA cells (None without)."""
    if not text:
        return None
    from numa.topology import FittedTopology

    return FittedTopology.from_primitive(json.loads(text))
