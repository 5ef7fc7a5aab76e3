"""PCI device rows: pools by GROUP BY, device claims and releases, host reports.

Every function takes an open SQLAlchemy ``Session`` or ``Connection`` and runs
inside the caller's transaction, so a device claim commits or rolls back with
the host claim. Pools are never stored (a stored summary drifts from the
device rows): ``pools_for_nodes`` derives them from the ``available`` rows
with one ``GROUP BY`` that the covering
indexes ``pci_devices_pool_idx`` (all nodes) and ``pci_devices_node_pool_idx``
(some nodes) serve.

Claims are race-free across schedulers: the node's devices are read with
``FOR UPDATE`` (MySQL/MariaDB; SQLite serializes writers anyway), and every
status change is an ``UPDATE ... WHERE status = <expected>`` whose row count is
checked, so two claims can never both get the last device.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from db import models
from db.api import chunks
from pci.device import (
    AVAILABLE,
    CLAIMED,
    IN_USE,
    REMOVED,
    TYPE_PF,
    TYPE_VF,
    UNAVAILABLE,
    UNCLAIMABLE,
    PciDevice,
    claim_plan,
    release_plan,
    tags_from_text,
    tags_text,
)
from pci.errors import PciClaimConflict
from pci.pools import PciPool, PoolKey, pool_key_of
from pci.report import ReportPlan, plan_report

Conn = Session | Connection
ClaimPick = tuple[str, PoolKey, int]  # (request_id, pool key, device count)

_t = models.PciDevice.__table__
_nodes = models.ComputeNode.__table__
# The pool key (pci.pools.PoolKey), in the covering indexes' order.
_POOL_COLUMNS = (_t.c.vendor_id, _t.c.product_id, _t.c.dev_type, _t.c.numa_node,
                 _t.c.physical_network, _t.c.tags)
_KEY_LEN = len(_POOL_COLUMNS)
_DEVICE_COLUMNS = (_t.c.id, _t.c.address, _t.c.vendor_id, _t.c.product_id, _t.c.dev_type,
                   _t.c.parent_addr, _t.c.numa_node, _t.c.physical_network, _t.c.status,
                   _t.c.instance_uuid, _t.c.request_id, _t.c.tags)


def _pools_query(per_node: bool):
    group = (_t.c.compute_node_id, *_POOL_COLUMNS)
    q = sa.select(*group, sa.func.count()).where(_t.c.status == AVAILABLE).group_by(*group)
    if not per_node:
        return q
    # MariaDB otherwise picks the status-first index and reads every
    # available device of the fleet (10 ms instead of 1 at 10,000 nodes).
    for dialect in ("mysql", "mariadb"):
        q = q.with_hint(_t, "FORCE INDEX (pci_devices_node_pool_idx)", dialect)
    return q.where(_t.c.compute_node_id.in_(sa.bindparam("ids", expanding=True)))


# Built once: the per-node form runs on refreshes after other schedulers' claims.
_POOLS = _pools_query(per_node=False)
_POOLS_BY_NODE = _pools_query(per_node=True)


def pools_for_nodes(conn: Conn, node_ids: Iterable[int] | None = None,
                    ) -> dict[int, tuple[PciPool, ...]]:
    """Free-device pools per compute node id, from one GROUP BY.

    ``node_ids=None``: every node with available devices (nodes without any are
    absent). Given ids: exactly those nodes, with ``()`` for a node that has no
    available device, so a refresh can overwrite stale pools. Each node's pools
    are in canonical order (``pci.pools.sort_pools``); equal keys and pools
    are shared objects across nodes.
    """
    if node_ids is None:
        rows: list = list(conn.execute(_POOLS))
        result: dict[int, list] = {}
    else:
        ids = sorted(set(node_ids))
        result = {node_id: [] for node_id in ids}
        rows = []
        for chunk in chunks(ids):
            rows.extend(conn.execute(_POOLS_BY_NODE, {"ids": chunk}))
    return _pools_by_node(rows, result)


def pools_from_rows(rows: Iterable[Sequence]) -> tuple[PciPool, ...]:
    """One node's pools from (key values as stored ..., count) rows, as
    ``pools_for_nodes`` builds them from its GROUP BY (``pool_rows`` back)."""
    return _pools_by_node([(0, *row) for row in rows], {0: []})[0]


def pool_rows(pools: Iterable[PciPool]) -> list[list]:
    """Pools as (key values as stored ..., count) rows (``pools_from_rows``)."""
    return [[k.vendor_id, k.product_id, k.dev_type, k.numa_node, k.physical_network,
             tags_text(k.tags), p.count] for p in pools for k in (p.key,)]


def _pools_by_node(rows, result: dict) -> dict[int, tuple[PciPool, ...]]:
    """``pools_for_nodes``' rows (node id, key values ..., count) as pools."""
    # Equal keys and equal (key, count) pools are shared objects: fewer objects
    # to build, and matching memoises per key.
    keys: dict[tuple, PoolKey] = {}
    shared: dict[tuple, PciPool] = {}
    for row in rows:
        values = tuple(row[1:])
        pool = shared.get(values)
        if pool is None:
            key = keys.get(values[:_KEY_LEN])
            if key is None:
                key = keys[values[:_KEY_LEN]] = PoolKey(*values[:_KEY_LEN - 1],
                                                        tags_from_text(values[_KEY_LEN - 1]))
            pool = shared[values] = PciPool(key, values[_KEY_LEN])
        pools = result.get(row[0])
        if pools is None:
            pools = result[row[0]] = []
        pools.append(pool)
    rank = {key: i for i, key in enumerate(sorted(keys.values(), key=PoolKey.sort_key))}
    return {node_id: tuple(sorted(pools, key=lambda p: rank[p.key])) if len(pools) > 1
            else tuple(pools) for node_id, pools in result.items()}


def _device(row) -> PciDevice:
    return PciDevice(address=row.address, vendor_id=row.vendor_id, product_id=row.product_id,
                     dev_type=row.dev_type, parent_addr=row.parent_addr,
                     numa_node=row.numa_node, physical_network=row.physical_network,
                     status=row.status, instance_uuid=row.instance_uuid,
                     request_id=row.request_id, tags=tags_from_text(row.tags))


def _read_devices(conn: Conn, node_id: int, for_update: bool = False,
                  ) -> tuple[list[PciDevice], dict[str, int]]:
    """A node's devices by address, and their row ids."""
    stmt = sa.select(*_DEVICE_COLUMNS).where(_t.c.compute_node_id == node_id) \
        .order_by(_t.c.address)
    if for_update:
        stmt = stmt.with_for_update()
    devices, ids = [], {}
    for row in conn.execute(stmt):
        devices.append(_device(row))
        ids[row.address] = row.id
    return devices, ids


def devices_for_node(conn: Conn, node_id: int) -> list[PciDevice]:
    """All device rows of a node (every status), ordered by address."""
    return _read_devices(conn, node_id)[0]


def _set_status(conn: Conn, ids: Sequence[int], expected: Iterable[str], values: dict,
                ) -> int:
    """``UPDATE ... SET values WHERE id IN ids AND status IN expected``; rows changed."""
    if not ids:
        return 0
    stmt = (_t.update().where(_t.c.id.in_(ids), _t.c.status.in_(tuple(expected)))
            .values(**values))
    return conn.execute(stmt).rowcount


def _choose(devices: list[PciDevice], picks: Sequence[ClaimPick]) -> list[tuple[str, str]]:
    """(address, request_id) of the devices to claim for ``picks``.

    PF picks go first; VFs then avoid the children of chosen PFs and prefer PFs
    already partly used, so whole PFs stay free for later PF requests.
    """
    busy_parents = {d.parent_addr for d in devices if d.parent_addr and d.in_use}
    chosen: list[tuple[str, str]] = []
    taken: set[str] = set()
    ordered = sorted(picks, key=lambda pick: pick[1].dev_type != TYPE_PF)
    for request_id, key, count in ordered:
        free = [d for d in devices if d.status == AVAILABLE and d.address not in taken
                and pool_key_of(d) == key]
        if key.dev_type == TYPE_VF:
            free = [d for d in free if d.parent_addr not in taken]
            free.sort(key=lambda d: (d.parent_addr not in busy_parents, d.parent_addr or "",
                                     d.address))
        if len(free) < count:
            raise PciClaimConflict(
                f"{len(free)} of {count} {key.vendor_id}:{key.product_id} {key.dev_type} "
                f"devices on NUMA node {key.numa_node} are still available")
        for dev in free[:count]:
            chosen.append((dev.address, request_id))
            taken.add(dev.address)
            if dev.parent_addr:
                busy_parents.add(dev.parent_addr)
        if key.dev_type == TYPE_PF:
            # A chosen PF's VFs are no longer free for VF picks.
            for dev in free[:count]:
                taken.update(d.address for d in devices if d.parent_addr == dev.address)
    return chosen


def claim_devices(conn: Conn, node_id: int, instance_uuid: str,
                  picks_with_request_ids: Sequence[ClaimPick]) -> list[str]:
    """Claim devices on ``node_id`` for the picks of ``pci.matching.apply_requests``.

    Each pick is ``(request_id, PoolKey, count)``. Chosen rows become
    ``claimed`` (with ``instance_uuid`` and their ``request_id``); the PF/VF
    cascade marks relatives ``unclaimable``. Raises ``PciClaimConflict`` when a
    device is no longer free; the caller rolls the transaction back. Returns
    the claimed addresses.
    """
    picks = [p for p in picks_with_request_ids if p[2] > 0]
    if not picks:
        return []
    devices, ids = _read_devices(conn, node_id, for_update=True)
    chosen = _choose(devices, picks)
    plan = claim_plan(devices, [addr for addr, _ in chosen])

    by_request: dict[str, list[int]] = {}
    for addr, request_id in chosen:
        by_request.setdefault(request_id, []).append(ids[addr])
    for request_id, row_ids in by_request.items():
        done = _set_status(conn, row_ids, (AVAILABLE,),
                           {"status": CLAIMED, "instance_uuid": instance_uuid,
                            "request_id": request_id})
        if done != len(row_ids):
            raise PciClaimConflict("a device was claimed by another request first",
                                   tuple(a for a, _ in chosen))

    # Relatives: a free relative becomes unclaimable. A VF's parent is written
    # even when already unclaimable, so a concurrent release sees this claim.
    by_addr = {d.address: d for d in devices}
    chosen_addrs = {addr for addr, _ in chosen}
    relatives = {addr for addr, status in plan.items() if status == UNCLAIMABLE}
    relatives.update(by_addr[a].parent_addr for a in chosen_addrs
                     if by_addr[a].parent_addr in by_addr
                     and by_addr[by_addr[a].parent_addr].status == UNCLAIMABLE)
    rel_ids = [ids[a] for a in sorted(relatives)]
    done = _set_status(conn, rel_ids, (AVAILABLE, UNCLAIMABLE), {"status": UNCLAIMABLE})
    if done != len(rel_ids):
        raise PciClaimConflict("a parent or child device was claimed by another request",
                               tuple(sorted(relatives)))
    return sorted(chosen_addrs)


def release_devices(conn: Conn, instance_uuid: str) -> list[str]:
    """Free every device ``instance_uuid`` holds, restoring PF/VF relatives.

    Idempotent: returns the addresses freed (empty when it holds none).
    """
    stmt = sa.select(_t.c.compute_node_id).distinct().where(
        _t.c.instance_uuid == instance_uuid, _t.c.status.in_(tuple(IN_USE)))
    released: list[str] = []
    for node_id in sorted(conn.execute(stmt).scalars()):
        devices, ids = _read_devices(conn, node_id, for_update=True)
        plan = release_plan(devices, instance_uuid)
        own = [d.address for d in devices if d.instance_uuid == instance_uuid and d.in_use]
        _set_status(conn, [ids[a] for a in own], IN_USE,
                    {"status": AVAILABLE, "instance_uuid": None, "request_id": None})
        relatives = [ids[a] for a in plan if a not in own]
        _set_status(conn, relatives, (UNCLAIMABLE,), {"status": AVAILABLE})
        released.extend(own)
    return sorted(released)


def hand_over_devices(conn: Conn, node_id: int, old_uuid: str, new_uuid: str) -> int:
    """The devices ``old_uuid`` holds on ``node_id`` are now ``new_uuid``'s (a
    move hands the instance's source over to its migration); how many."""
    return conn.execute(sa.update(_t).where(
        _t.c.compute_node_id == node_id, _t.c.instance_uuid == old_uuid,
        _t.c.status.in_(tuple(IN_USE))).values(instance_uuid=new_uuid)).rowcount


def _row_values(dev: PciDevice) -> dict:
    return {"vendor_id": dev.vendor_id, "product_id": dev.product_id,
            "dev_type": dev.dev_type, "parent_addr": dev.parent_addr,
            "numa_node": dev.numa_node, "physical_network": dev.physical_network,
            "status": dev.status, "instance_uuid": dev.instance_uuid,
            "request_id": dev.request_id, "tags": tags_text(dev.tags)}


def report_devices(conn: Conn, node_id: int, devices: Sequence[PciDevice],
                   bump_generation: bool = True) -> ReportPlan:
    """Apply a host's device report to its rows (see ``pci.report.plan_report``).

    When anything changed and ``bump_generation`` is set, the node's generation
    is bumped so host-state caches refresh its pools. Returns the plan applied
    (its ``warnings`` are for the operator).
    """
    existing, ids = _read_devices(conn, node_id, for_update=True)
    plan = plan_report(existing, devices)
    if plan.add:
        conn.execute(_t.insert(), [dict(_row_values(d), compute_node_id=node_id,
                                         address=d.address) for d in plan.add])
    for dev in plan.update:
        conn.execute(_t.update().where(_t.c.id == ids[dev.address])
                     .values(**_row_values(dev)))
    if plan.remove:
        _set_status(conn, [ids[a] for a in plan.remove],
                    (AVAILABLE, UNCLAIMABLE, UNAVAILABLE),
                    {"status": REMOVED})
    if bump_generation and not plan.empty:
        conn.execute(_nodes.update().where(_nodes.c.id == node_id)
                     .values(generation=_nodes.c.generation + 1))
    return plan


# -- bulk forms for fleet import -----------------------------------------------------------

def devices_of_nodes(conn: Conn, node_ids: Sequence[int]
                     ) -> tuple[dict[int, list[PciDevice]], dict[int, dict[str, int]]]:
    """Every device row of many nodes, locked: (node id -> devices by address,
    node id -> {address: row id}), in a few chunked reads."""
    devices: dict[int, list[PciDevice]] = {}
    ids: dict[int, dict[str, int]] = {}
    for chunk in chunks(list(node_ids)):
        stmt = (sa.select(_t.c.compute_node_id, *_DEVICE_COLUMNS)
                .where(_t.c.compute_node_id.in_(chunk))
                .order_by(_t.c.compute_node_id, _t.c.address).with_for_update())
        for row in conn.execute(stmt):
            devices.setdefault(row.compute_node_id, []).append(_device(row))
            ids.setdefault(row.compute_node_id, {})[row.address] = row.id
    return devices, ids


def apply_reports(conn: Conn, plans: dict[int, ReportPlan],
                  ids: dict[int, dict[str, int]]) -> None:
    """Apply many nodes' report plans (``report_devices`` without the reads and
    without the generation bump, which the caller makes): one multi-row
    insert, one executemany update and chunked removals."""
    adds = [dict(_row_values(d), compute_node_id=node_id, address=d.address)
            for node_id, plan in plans.items() for d in plan.add]
    for chunk in chunks(adds, 5000):
        conn.execute(_t.insert(), list(chunk))
    updates = [dict(_row_values(d), _id=ids[node_id][d.address])
               for node_id, plan in plans.items() for d in plan.update]
    if updates:
        stmt = _t.update().where(_t.c.id == sa.bindparam("_id")).values(
            **{k: sa.bindparam(k) for k in updates[0] if k != "_id"})
        conn.execute(stmt, updates)
    removed = [ids[node_id][a] for node_id, plan in plans.items() for a in plan.remove]
    for chunk in chunks(removed):
        _set_status(conn, list(chunk), (AVAILABLE, UNCLAIMABLE, UNAVAILABLE),
                    {"status": REMOVED})
