"""Writes of a node's providers, their inventories and traits (fleet imports and
host reports).

What a node *has* is rewritten from its record; what it *handed out* is never
touched: ``used`` of every inventory stays as the claims left it. A provider or
an inventory that the record no longer lists is deleted when nothing is
allocated from it; otherwise it is kept with a total of 0 (and the node shows
as below its usage) — an allocation is never silently dropped.

Everything is written in bulk for many nodes at once (one read of what is
stored, then multi-row statements), as a fleet import of 10,000 hosts needs.
"""
from __future__ import annotations

import dataclasses
import datetime
import uuid as uuidlib
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from db import host_states, models
from db.api import chunks
from db.inventory import Inventory, fits, usable
from db.records import HostRecord

_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__


@dataclasses.dataclass
class Synced:
    """What ``sync`` did to one node."""

    changed: bool = False
    #: What the node's inventories can no longer hold of their usage.
    shortfalls: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Wanted:
    name: str
    uuid: str | None
    parent: str | None              # a child's parent name; None: the root
    traits: str
    inventories: Mapping[str, Inventory]


def _wanted(node_uuid: str, rec: HostRecord) -> list[_Wanted]:
    root = _Wanted(rec.node, node_uuid, None, host_states.trait_text(rec.traits),
                   dict(rec.inventories))
    return [root] + [_Wanted(p.name, p.uuid, p.parent or rec.node,
                             host_states.trait_text(p.traits), dict(p.inventories))
                     for p in rec.providers]


def shortfall(rc: str, inv: Inventory, used: int, provider: str | None = None) -> str | None:
    """The text of an inventory that cannot hold its usage, or None."""
    if used <= 0 or fits(used, 0, inv.total, inv.reserved, inv.allocation_ratio):
        return None
    where = f" of {provider}" if provider else ""
    capacity = usable(inv.total, inv.reserved, inv.allocation_ratio)
    capacity = int(capacity) if float(capacity).is_integer() else round(capacity, 2)
    return f"{rc}{where} {capacity} < {used} used"


def planned_shortfalls(stored: Sequence[host_states.ProviderRecord], rec: HostRecord
                       ) -> list[str]:
    """What ``rec`` (a report or a fleet entry) would leave below its usage of
    the node's ``stored`` providers."""
    if not stored:
        return []
    out = []
    wanted = {w.name: w for w in _wanted(stored[0].uuid, rec)}
    for i, prov in enumerate(stored):
        want = wanted.get(rec.node if i == 0 else prov.name)
        for rc, (_old, used) in sorted(prov.inventories.items()):
            inv = want.inventories.get(rc) if want else None
            text = shortfall(rc, inv or Inventory(total=0, max_unit=1), used,
                             None if i == 0 else prov.name)
            if text:
                out.append(text)
    return out


def sync(conn: Connection, nodes: Sequence[tuple[int, str, HostRecord]],
         now: datetime.datetime) -> dict[int, Synced]:
    """Make the stored providers of each (node id, node uuid, record) what the
    record says; returns what changed per node."""
    result = {node_id: Synced() for node_id, _u, _r in nodes}
    if not nodes:
        return result
    stored = host_states.load_providers(conn, [n for n, _u, _r in nodes])
    new_providers: list[tuple[int, _Wanted]] = []       # (node, provider) to insert
    updates: list[dict] = []
    deletes: list[int] = []
    # (node, provider name, whether it is the root, the inventories it should have)
    inv_plan: list[tuple[int, str, bool, Mapping[str, Inventory]]] = []
    for node_id, node_uuid, rec in nodes:
        have = {p.name if p.parent_id is not None else rec.node: p
                for p in stored.get(node_id, ())}
        by_id = {p.id: p for p in stored.get(node_id, ())}
        wanted = _wanted(node_uuid, rec)
        names = {w.name for w in wanted}
        for w in wanted:
            old = have.get(w.name)
            if old is None:
                new_providers.append((node_id, w))
                result[node_id].changed = True
            else:
                parent = by_id.get(old.parent_id)
                parent_name = None if parent is None else (
                    rec.node if parent.parent_id is None else parent.name)
                if w.parent is not None and parent_name != w.parent:
                    updates.append({"_id": old.id, "_parent": w.parent, "_node": node_id,
                                    "traits": w.traits, "name": w.name})
                    result[node_id].changed = True
                elif host_states.trait_text(old.traits) != w.traits or (
                        w.parent is None and old.name != w.name):
                    updates.append({"_id": old.id, "_parent": None, "_node": node_id,
                                    "traits": w.traits, "name": w.name})
                    result[node_id].changed = True
            inv_plan.append((node_id, w.name, w.parent is None, w.inventories))
        for name, old in have.items():
            if name in names:
                continue
            if any(used for _inv_, used in old.inventories.values()):
                # allocations hold it: keep it, with nothing left to hand out
                inv_plan.append((node_id, name, False, {}))
            else:
                deletes.append(old.id)
                result[node_id].changed = True
    _insert_providers(conn, new_providers, now)
    ids = _provider_ids(conn, [n for n, _u, _r in nodes])
    if updates:
        stmt = (_rp.update().where(_rp.c.id == sa.bindparam("_id"))
                .values(traits=sa.bindparam("traits"), name=sa.bindparam("name"),
                        parent_id=sa.bindparam("_parent_id"), updated_at=now))
        keep_parent = {pid: rec.parent_id for provs in stored.values() for rec in provs
                       for pid in (rec.id,)}
        rows = [{"_id": row["_id"], "traits": row["traits"], "name": row["name"],
                 "_parent_id": ids[(row["_node"], row["_parent"])]
                 if row["_parent"] is not None else keep_parent[row["_id"]]}
                for row in updates]
        for chunk in chunks(rows, 1000):
            conn.execute(stmt, chunk)
    if deletes:
        for chunk in chunks(deletes):
            conn.execute(_inv.delete().where(_inv.c.provider_id.in_(chunk)))
            conn.execute(_rp.delete().where(_rp.c.id.in_(chunk)))
    root_name = {n: rec.node for n, _u, rec in nodes}
    stored_inv = {(node_id, p.name if p.parent_id is not None else root_name[node_id]):
                  p.inventories for node_id, provs in stored.items() for p in provs}
    _sync_inventories(conn, inv_plan, stored_inv, ids, result)
    return result


def _insert_providers(conn: Connection, new: list[tuple[int, _Wanted]],
                      now: datetime.datetime) -> None:
    """Insert providers parents first (a child's parent id is known by then)."""
    pending = list(new)
    while pending:
        ready = [(n, w) for n, w in pending if w.parent is None
                 or not any(n2 == n and w2.name == w.parent for n2, w2 in pending)]
        if not ready:
            raise ValueError("provider parents form a cycle")
        ids = _provider_ids(conn, sorted({n for n, _w in ready}))
        rows = [{"uuid": w.uuid or str(uuidlib.uuid4()), "name": w.name, "compute_node_id": n,
                 "parent_id": None if w.parent is None else ids[(n, w.parent)],
                 "traits": w.traits, "created_at": now, "updated_at": now}
                for n, w in ready]
        for chunk in chunks(rows, 1000):
            conn.execute(_rp.insert(), chunk)
        done = {(n, w.name) for n, w in ready}
        pending = [(n, w) for n, w in pending if (n, w.name) not in done]


def _provider_ids(conn: Connection, node_ids: Sequence[int]) -> dict[tuple[int, str], int]:
    """(node id, provider name) -> provider id; the root under the node's own
    name whatever the stored one (a renamed node's root is renamed after)."""
    out = {}
    cn = models.ComputeNode.__table__
    for chunk in chunks(list(node_ids)):
        q = (sa.select(_rp.c.compute_node_id, _rp.c.name, _rp.c.id, _rp.c.parent_id,
                       cn.c.hypervisor_hostname)
             .join(cn, cn.c.id == _rp.c.compute_node_id)
             .where(_rp.c.compute_node_id.in_(chunk)))
        for node_id, name, pid, parent, node_name in conn.execute(q):
            out[(node_id, node_name if parent is None else name)] = pid
    return out


_INV_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


def _sync_inventories(conn: Connection, plan, stored_inv, ids, result) -> None:
    inserts: list[dict] = []
    updates: list[dict] = []
    deletes: list[tuple[int, str]] = []
    zero = Inventory(total=0, reserved=0, min_unit=1, max_unit=1)
    for node_id, name, is_root, wanted in plan:
        pid = ids.get((node_id, name))
        if pid is None:
            continue
        have = stored_inv.get((node_id, name), {})
        where = None if is_root else name
        for rc, inv in wanted.items():
            old = have.get(rc)
            values = {f: getattr(inv, f) for f in _INV_FIELDS}
            if old is None:
                inserts.append(dict(values, provider_id=pid, resource_class=rc, used=0))
                result[node_id].changed = True
                continue
            if old[0] != inv:
                updates.append(dict(values, _pid=pid, _rc=rc))
                result[node_id].changed = True
            text = shortfall(rc, inv, old[1], where)
            if text:
                result[node_id].shortfalls.append(text)
        for rc, (_old, used) in have.items():
            if rc in wanted:
                continue
            result[node_id].changed = True
            if used:
                # allocations hold it: keep it, with nothing left to hand out
                updates.append(dict({f: getattr(zero, f) for f in _INV_FIELDS}, _pid=pid,
                                    _rc=rc))
                result[node_id].shortfalls.append(shortfall(rc, zero, used, where))
            else:
                deletes.append((pid, rc))
    for chunk in chunks(inserts, 1000):
        conn.execute(_inv.insert(), chunk)
    if updates:
        stmt = (_inv.update().where(_inv.c.provider_id == sa.bindparam("_pid"),
                                    _inv.c.resource_class == sa.bindparam("_rc"))
                .values(**{f: sa.bindparam(f) for f in _INV_FIELDS}))
        for chunk in chunks(updates, 1000):
            conn.execute(stmt, chunk)
    if deletes:
        stmt = _inv.delete().where(_inv.c.provider_id == sa.bindparam("_pid"),
                                   _inv.c.resource_class == sa.bindparam("_rc"))
        for chunk in chunks([{"_pid": pid, "_rc": rc} for pid, rc in deletes], 1000):
            conn.execute(stmt, chunk)
