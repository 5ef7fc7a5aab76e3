"""Compute nodes: fleet import, host reports, listing and deletion.

Writes here change what a host *is* (capacity, ratios, topology, devices); they
never touch what the scheduler handed out (usage counters, allocations, claimed
devices). Every change to a node bumps its ``generation`` (claims are
compare-and-swap on it) and its ``updated_at`` (caches refresh changed rows).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from oslo_log import log as logging
from sqlalchemy.orm import Session

from db import aggregates as db_aggregates
from db import errors as exception
from db import host_states, models
from db import pci as db_pci
from db import providers as db_providers
from db.api import Database, chunks, retry_on_deadlock
from db.inventory import DISK_GB, MEMORY_MB, PCPU, VCPU, usable
from db.limits import MAX_NAME
from db.records import MEMPAGE_LAYOUT_KEYS, NUMA_CELL_LAYOUT_KEYS, Fleet, HostRecord
from pci import device as pci_device
from pci.report import ReportPlan, plan_report

LOG = logging.getLogger(__name__)

COMPUTE_BINARY = "berth-compute"

# HostRecord fields stored as plain columns, and those stored as JSON text (what
# the node has of each resource class is its providers' inventories:
# ``db.providers``).
_PLAIN_FIELDS = ("host", "hypervisor_type", "hypervisor_version", "host_ip", "disabled",
                 "disabled_reason")
_JSON_FIELDS = ("cpu_info", "supported_instances", "numa_topology", "stats", "metrics")


@dataclasses.dataclass
class ImportResult:
    """What a fleet import did, by host and aggregate name."""

    created: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)
    aggregates_created: list[str] = dataclasses.field(default_factory=list)
    aggregates_updated: list[str] = dataclasses.field(default_factory=list)
    aggregates_unchanged: list[str] = dataclasses.field(default_factory=list)
    # host -> the PCI report plan applied (only hosts whose devices changed)
    pci: dict[str, ReportPlan] = dataclasses.field(default_factory=dict)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        return (f"hosts: {len(self.created)} created, {len(self.updated)} updated, "
                f"{len(self.unchanged)} unchanged; aggregates: "
                f"{len(self.aggregates_created)} created, {len(self.aggregates_updated)} "
                f"updated, {len(self.aggregates_unchanged)} unchanged")


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# -- NUMA usage survives a re-import ------------------------------------------------------

def _has_usage(value: Any) -> bool:
    """Non-zero counters, non-empty lists (e.g. pinned CPUs), recursively."""
    if isinstance(value, dict):
        return any(_has_usage(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return len(value) > 0
    return bool(value)


def _cell_usage(cell: dict) -> dict:
    usage = {k: v for k, v in cell.items() if k not in NUMA_CELL_LAYOUT_KEYS}
    pages = {p.get("size_kb"): {k: v for k, v in p.items() if k not in MEMPAGE_LAYOUT_KEYS}
             for p in cell.get("mempages") or []}
    return {"cell": usage, "pages": {s: u for s, u in pages.items() if u}}


def merge_numa_usage(host: str, old: dict | None, new: dict | None) -> dict | None:
    """The new topology layout carrying the old topology's usage.

    Usage is every cell (and hugepage) field that is not part of the fleet layout.
    It is kept when the cells are the same (ids and CPUs; memory may change). A
    different layout is accepted only while the old one has no usage: otherwise
    placed instances would lose their pinned CPUs, so this raises Conflict.
    """
    if not old or not old.get("cells"):
        return new
    old_cells = {c.get("id"): c for c in old["cells"]}
    new_cells = {c.get("id"): c for c in (new or {}).get("cells", [])}
    compatible = old_cells.keys() == new_cells.keys() and all(
        sorted(old_cells[i].get(k) or []) == sorted(new_cells[i].get(k) or [])
        for i in old_cells for k in ("cpuset", "pcpuset"))
    if not compatible:
        used = [i for i, c in old_cells.items() if _has_usage(_cell_usage(c))]
        if used:
            raise exception.Conflict(
                f"host {host}: numa_topology: the cells or their CPUs changed while "
                f"cell(s) {', '.join(map(str, sorted(used)))} are in use; release or "
                f"delete the allocations first",
                reason="NUMA layout changed while in use")
        return new
    merged_cells = []
    for cell in new["cells"]:
        usage = _cell_usage(old_cells[cell.get("id")])
        merged = {**cell, **usage["cell"]}
        if usage["pages"]:
            merged["mempages"] = [{**p, **usage["pages"].get(p.get("size_kb"), {})}
                                  for p in cell.get("mempages") or []]
        merged_cells.append(merged)
    return {**new, "cells": merged_cells}


# -- capacity below usage ----------------------------------------------------------------

# The disabled_reason Berth writes when a report shrinks capacity below usage;
# cleared by the first report that fits again (an operator's reason is kept).
CAPACITY_REASON_PREFIX = "capacity below usage: "


def node_for_update(session: Session, node: str) -> models.ComputeNode | None:
    """The live node called ``node``, locked for the caller's transaction."""
    return session.scalars(
        sa.select(models.ComputeNode)
        .where(models.ComputeNode.hypervisor_hostname == node,
               models.ComputeNode.deleted == 0)
        .with_for_update()).first()


def capacity_shortfalls(node: models.ComputeNode, rec: HostRecord) -> list[str]:
    """What the reported capacity ``rec`` can no longer hold of ``node``'s usage.

    Each inventory's ``(total - reserved) x ratio`` against what is allocated
    from it (``db.providers``); NUMA cells compare memory and page counts
    against the cells' usage (a cell whose CPUs changed under pinned guests is
    refused by ``merge_numa_usage`` instead).
    """
    session = Session.object_session(node)
    stored = host_states.load_providers(session.connection(), [node.id]).get(node.id, [])
    return _shortfalls(stored, node.numa_topology, rec)


def _shortfalls(stored: list[host_states.ProviderRecord], numa_topology: str | None,
                rec: HostRecord) -> list[str]:
    """capacity_shortfalls from a node's ``stored`` providers and stored NUMA text."""
    out = db_providers.planned_shortfalls(stored, rec)
    old_cells = {c.get("id"): c for c in (_loads(numa_topology) or {}).get("cells", [])}
    for cell in (rec.numa_topology or {}).get("cells", []):
        old = old_cells.get(cell["id"])
        if old is None:
            continue
        if (old.get("memory_usage") or 0) > cell["memory_mb"]:
            out.append(f"NUMA cell {cell['id']} memory_mb {cell['memory_mb']} < "
                       f"{old['memory_usage']} used")
        used_pages = {p.get("size_kb"): p.get("used") or 0 for p in old.get("mempages") or []}
        for page in cell.get("mempages") or []:
            used = used_pages.get(page["size_kb"], 0)
            reserved = page.get("reserved") or 0
            if used + reserved > page["total"]:
                held = f"{used} used" + (f" + {reserved} reserved" if reserved else "")
                out.append(f"NUMA cell {cell['id']} {page['size_kb']} kB pages "
                           f"{page['total']} < {held}")
    return out


# -- writes -------------------------------------------------------------------------------

def _record_values(rec: HostRecord) -> dict[str, Any]:
    values = {f: getattr(rec, f) for f in _PLAIN_FIELDS}
    values["hypervisor_hostname"] = rec.node
    for f in _JSON_FIELDS:
        values[f] = getattr(rec, f)
    return values


def _touch_service(session: Session, host: str, now: datetime.datetime) -> None:
    svc = session.scalars(sa.select(models.Service).where(
        models.Service.host == host, models.Service.binary == COMPUTE_BINARY)).first()
    if svc is None:
        session.add(models.Service(host=host, binary=COMPUTE_BINARY, last_seen_up=now,
                                   report_count=1, created_at=now, updated_at=now))
    else:
        svc.last_seen_up = now
        svc.report_count = models.Service.report_count + 1
        svc.updated_at = now
    session.flush()


def _upsert(session: Session, rec: HostRecord, now: datetime.datetime, heartbeat: bool
            ) -> tuple[int, str, ReportPlan | None]:
    """Write one node; returns (node id, created|updated|unchanged, PCI report).

    ``heartbeat``: also record that the host's service is up now. Hosts only
    ever imported from a fleet file send no heartbeats and count as up; a host
    that reports itself must keep reporting within service_down_time.
    """
    node = session.scalars(
        sa.select(models.ComputeNode)
        .where(models.ComputeNode.hypervisor_hostname == rec.node,
               models.ComputeNode.deleted == 0)
        .with_for_update()).first()
    values = _record_values(rec)
    if node is None:
        node = models.ComputeNode(uuid=str(uuidlib.uuid4()), generation=0, created_at=now,
                                  updated_at=now, **{k: (_dumps(v) if k in _JSON_FIELDS else v)
                                                     for k, v in values.items()})
        session.add(node)
        session.flush()
        status = "created"
    else:
        values["numa_topology"] = merge_numa_usage(rec.host, _loads(node.numa_topology),
                                                   values["numa_topology"])
        changed = _changed_values({k: getattr(node, k) for k in values}, values)
        for key, value in changed.items():
            setattr(node, key, value)
        status = "updated" if changed else "unchanged"
    report = None
    if rec.pci_devices is not None:
        report = db_pci.report_devices(session.connection(), node.id, rec.pci_devices,
                                       bump_generation=False)
        for warning in report.warnings:
            LOG.warning("Host %s: %s", rec.host, warning)
        if status == "unchanged" and not report.empty:
            status = "updated"
    synced = db_providers.sync(session.connection(), [(node.id, node.uuid, rec)], now)
    if status == "unchanged" and synced[node.id].changed:
        status = "updated"
    if status == "updated":
        node.generation = models.ComputeNode.generation + 1
        node.updated_at = now
    session.flush()
    if heartbeat:
        _touch_service(session, rec.host, now)
    return node.id, status, report


def upsert_host(session: Session, rec: HostRecord) -> int:
    """Create or update one node from its record, inside the caller's transaction.

    Updates capacity, ratios, topology (keeping NUMA usage) and description;
    reports the PCI devices when ``rec.pci_devices`` is not None; records a
    heartbeat for the host. Usage counters and allocations are left alone.
    Returns the node id.
    """
    node_id, _status, _report = _upsert(session, rec, models.utcnow(), heartbeat=True)
    return node_id


ProgressFn = Callable[[str, int, int], None]


def _changed_values(old: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The stored columns that differ from ``values`` (JSON compared as values)."""
    changed = {}
    for key, value in values.items():
        current = old[key]
        if key in _JSON_FIELDS:
            if _loads(current) != value:
                changed[key] = _dumps(value)
        elif current != value:
            changed[key] = value
    return changed


def _live_nodes(session: Session, names: list[str], ids_only: bool = False
                ) -> dict[str, dict[str, Any]]:
    """node name -> its stored row (the import's columns, id and generation), locked;
    ``ids_only``: just the id (rows this import has just inserted)."""
    cn = models.ComputeNode.__table__
    cols = [cn.c.id, cn.c.hypervisor_hostname]
    if not ids_only:
        cols += [cn.c.generation] + [cn.c[k] for k in (*_PLAIN_FIELDS, *_JSON_FIELDS)]
    out: dict[str, dict[str, Any]] = {}
    for chunk in chunks(names):
        rows = session.execute(sa.select(*cols).where(cn.c.hypervisor_hostname.in_(chunk),
                                                      cn.c.deleted == 0).with_for_update())
        for row in rows.mappings():
            out[row["hypervisor_hostname"]] = dict(row)
    return out


def _plan_nodes(fleet: Fleet, stored: dict[str, dict[str, Any]],
                devices: dict[int, list[pci_device.PciDevice]],
                held: dict[int, list[host_states.ProviderRecord]], result: ImportResult
                ) -> tuple[list[dict], list[dict], dict[str, ReportPlan]]:
    """(rows to insert, {"_id", changed columns...} per changed node, PCI plans by
    node); ``held``: the stored nodes' providers with their usage."""
    inserts: list[dict] = []
    updates: list[dict] = []
    plans: dict[str, ReportPlan] = {}
    # A new node's plan depends only on its device list, which hosts share.
    new_plans: dict[tuple, ReportPlan] = {}
    for rec in fleet.hosts:
        values = _record_values(rec)
        reported = rec.pci_devices or []
        old = stored.get(rec.node)
        if old is None:
            inserts.append({k: (_dumps(v) if k in _JSON_FIELDS else v)
                            for k, v in values.items()})
            key = tuple(reported)
            plan = new_plans.get(key)
            if plan is None:
                plan = new_plans[key] = plan_report((), reported,
                                                    field=f"host {rec.host}: pci_devices")
            result.created.append(rec.host)
        else:
            values["numa_topology"] = merge_numa_usage(rec.host, _loads(old["numa_topology"]),
                                                       values["numa_topology"])
            _disable_below_usage(rec, _shortfalls(held.get(old["id"], []),
                                                  old["numa_topology"], rec), values, result)
            changed = _changed_values(old, values)
            plan = plan_report(devices.get(old["id"], ()), reported,
                               field=f"host {rec.host}: pci_devices")
            if changed or not plan.empty:
                updates.append({"_id": old["id"], **changed})
                result.updated.append(rec.host)
            else:
                result.unchanged.append(rec.host)
        if not plan.empty or plan.warnings:
            plans[rec.node] = plan
        if not plan.empty:
            result.pci[rec.host] = plan
        for warning in plan.warnings:
            LOG.warning("Host %s: %s", rec.host, warning)
            result.warnings.append(f"{rec.host}: {warning}")
    return inserts, updates, plans


def _disable_below_usage(rec: HostRecord, shortfalls: list[str], values: dict[str, Any],
                         result: ImportResult) -> None:
    """A host imported with less capacity than its allocations hold is written
    disabled, with a ``capacity below usage: ...`` reason (unless the file disables
    it with a reason of its own), as a host's report would leave it: never enabled
    with negative free room."""
    if not shortfalls:
        return
    reason = "; ".join(shortfalls)
    if not values["disabled"]:
        values["disabled"] = True
        values["disabled_reason"] = (CAPACITY_REASON_PREFIX + reason)[:MAX_NAME]
    LOG.warning("Host %s imported with capacity below its usage (%s); host disabled",
                rec.host, reason)
    result.warnings.append(f"{rec.host}: {CAPACITY_REASON_PREFIX}{reason}; host disabled")


def _write_updates(session: Session, updates: list[dict], now: datetime.datetime) -> None:
    """One executemany per set of changed columns (most re-imports change the same ones)."""
    cn = models.ComputeNode.__table__
    by_columns: dict[tuple[str, ...], list[dict]] = {}
    for row in updates:
        by_columns.setdefault(tuple(sorted(k for k in row if k != "_id")), []).append(row)
    for columns, rows in by_columns.items():
        stmt = (cn.update().where(cn.c.id == sa.bindparam("_id"))
                .values(generation=cn.c.generation + 1, updated_at=now,
                        **{c: sa.bindparam(c) for c in columns}))
        session.execute(stmt, rows)


class _DryRun(Exception):
    """Ends a dry-run import's transaction (rolled back) with its result."""

    def __init__(self, result: ImportResult) -> None:
        super().__init__("dry run")
        self.result = result


def import_fleet(db: Database, fleet: Fleet, progress: ProgressFn | None = None,
                 dry_run: bool = False) -> ImportResult:
    """Write a validated fleet in one transaction; idempotent.

    ``dry_run``: do everything the import does, every check against the stored
    hosts, allocations, devices and aggregates included, then roll back; the
    result says what the import would do.
    """
    try:
        return _import_fleet(db, fleet, progress, dry_run)
    except _DryRun as done:
        return done.result


@retry_on_deadlock
def _import_fleet(db: Database, fleet: Fleet, progress: ProgressFn | None,
                  dry_run: bool) -> ImportResult:
    """Write a validated fleet in one transaction; idempotent.

    Hosts in the file are created or updated (a host without ``pci_devices``
    has none); hosts not in the file are left alone. Aggregates in the file are
    made exactly as described (hosts, zone, metadata); others are left alone.
    Every table is written in bulk (one read of what is stored, then
    multi-row inserts and updates), so the cost grows with the rows written,
    not with round trips per host. ``progress(phase, done, total)`` is called
    as the phases advance (the command shows it on a terminal).
    """
    result = ImportResult()
    report = progress or (lambda phase, done, total: None)
    cn = models.ComputeNode.__table__
    with db.writer() as session:
        now = models.utcnow()
        total = len(fleet.hosts)
        report("reading stored hosts", 0, total)
        stored = _live_nodes(session, [r.node for r in fleet.hosts])
        devices, device_ids = db_pci.devices_of_nodes(
            session.connection(), [row["id"] for row in stored.values()])
        report("comparing hosts", 0, total)
        held = host_states.load_providers(session.connection(),
                                          [row["id"] for row in stored.values()])
        inserts, updates, plans = _plan_nodes(fleet, stored, devices, held, result)
        for chunk in _progress_chunks(inserts, report, "writing new hosts"):
            session.execute(cn.insert(), [
                dict(row, uuid=str(uuidlib.uuid4()), generation=0, created_at=now,
                     updated_at=now) for row in chunk])
        if inserts:
            stored.update(_live_nodes(session, [row["hypervisor_hostname"]
                                                for row in inserts], ids_only=True))
        report("writing changed hosts", 0, len(updates))
        _write_updates(session, updates, now)
        report("writing PCI devices", 0, len(plans))
        db_pci.apply_reports(session.connection(),
                             {stored[node]["id"]: plan for node, plan in plans.items()},
                             device_ids)
        report("writing resource providers", 0, total)
        new = {stored[row["hypervisor_hostname"]]["id"] for row in inserts}
        _sync_providers(session, fleet, stored, {row["_id"] for row in updates} | new, now,
                        result)
        report("writing aggregates", 0, len(fleet.aggregates))
        statuses = db_aggregates.sync_many_in_session(session, fleet.aggregates, now)
        for name, status in statuses.items():
            getattr(result, f"aggregates_{status}").append(name)
        report("checking availability zones", 0, 0)
        # Leaving an aggregate never adds a zone: the file's members are enough.
        db_aggregates.check_zones(session, {h for agg in fleet.aggregates for h in agg.hosts})
        if dry_run:
            raise _DryRun(result)       # rolls the transaction back
        report("committing", total, total)
    LOG.info("Fleet imported: %s", result.summary())
    return result


def _sync_providers(session: Session, fleet: Fleet, stored: dict[str, dict[str, Any]],
                    bumped: set[int], now: datetime.datetime, result: ImportResult) -> None:
    """Write every host's providers, inventories and traits; a node whose only
    change is there is counted as updated and gets a new generation too
    (``bumped``: the nodes written already, new ones included)."""
    cn = models.ComputeNode.__table__
    uuids: dict[int, str] = {}
    for chunk in chunks([row["id"] for row in stored.values()]):
        uuids.update(session.execute(sa.select(cn.c.id, cn.c.uuid).where(
            cn.c.id.in_(chunk))).tuples().all())
    nodes = [(stored[rec.node]["id"], uuids[stored[rec.node]["id"]], rec) for rec in fleet.hosts]
    synced = db_providers.sync(session.connection(), nodes, now)
    also = [node_id for node_id, done in synced.items()
            if done.changed and node_id not in bumped]
    if not also:
        return
    for chunk in chunks(also):
        session.execute(cn.update().where(cn.c.id.in_(chunk))
                        .values(generation=cn.c.generation + 1, updated_at=now))
    names = {stored[rec.node]["id"]: rec.host for rec in fleet.hosts}
    moved = {names[node_id] for node_id in also}
    result.updated.extend(h for h in result.unchanged if h in moved)
    result.unchanged[:] = [h for h in result.unchanged if h not in moved]


def _progress_chunks(rows: list, report: ProgressFn, phase: str, size: int = 1000):
    """``rows`` in slices, reporting how many were written before each."""
    for i in range(0, len(rows), size):
        report(phase, i, len(rows))
        yield rows[i:i + size]
    if rows:
        report(phase, len(rows), len(rows))


@retry_on_deadlock
def heartbeat(db: Database, host: str) -> None:
    """Record that ``host`` is up (its ``berth-compute`` service row)."""
    with db.writer() as session:
        _nodes_of(session, host)
        _touch_service(session, host, models.utcnow())


@retry_on_deadlock
def delete_host(db: Database, name: str, force: bool = False) -> dict:
    """Soft-delete a host's nodes (by host or node name).

    Refuses with Conflict while allocations or in-use PCI devices exist, unless
    ``force``: then those allocations are deleted too, with the stored request
    specs no other allocation shares. The node's devices are always deleted,
    and the host leaves its aggregates.
    """
    with db.writer() as session:
        nodes = _nodes_of(session, name, for_update=True)
        ids = [n.id for n in nodes]
        node_names = [n.hypervisor_hostname for n in nodes]
        hosts = sorted({n.host for n in nodes})
        consumers = models.Consumer
        allocations = session.scalar(sa.select(sa.func.count()).where(
            consumers.compute_node_id.in_(ids)))
        in_use = session.scalar(sa.select(sa.func.count()).where(
            models.PciDevice.compute_node_id.in_(ids),
            models.PciDevice.status.in_(tuple(pci_device.IN_USE))))
        if (allocations or in_use) and not force:
            raise exception.Conflict(
                f"host {name} has {allocations} allocation(s) and {in_use} PCI device(s) in "
                f"use; release them first or force the delete",
                reason=f"host {name} has allocations")
        # The requests these allocations answered: their stored specs go with
        # the last allocation that refers to them (as a release does).
        spec_ids = list(session.scalars(sa.select(consumers.request_spec_id).where(
            consumers.compute_node_id.in_(ids),
            consumers.request_spec_id.is_not(None)).distinct()))
        held = sa.select(consumers.id).where(consumers.compute_node_id.in_(ids))
        session.execute(sa.delete(models.Allocation).where(
            models.Allocation.consumer_id.in_(held)))
        session.execute(sa.delete(consumers).where(consumers.compute_node_id.in_(ids)))
        specs = models.RequestSpecRow
        for chunk in chunks(spec_ids):
            session.execute(sa.delete(specs).where(
                specs.id.in_(chunk),
                ~sa.exists().where(consumers.request_spec_id == specs.id)))
        providers = sa.select(models.ResourceProvider.id).where(
            models.ResourceProvider.compute_node_id.in_(ids))
        session.execute(sa.delete(models.ProviderInventory).where(
            models.ProviderInventory.provider_id.in_(providers)))
        # children before their parents (each a statement: no cascade on SQLite)
        rp = models.ResourceProvider
        session.execute(sa.delete(rp).where(rp.compute_node_id.in_(ids),
                                            rp.parent_id.is_not(None)))
        session.execute(sa.delete(rp).where(rp.compute_node_id.in_(ids)))
        devices = session.execute(sa.delete(models.PciDevice).where(
            models.PciDevice.compute_node_id.in_(ids))).rowcount
        now = models.utcnow()
        for node in nodes:
            node.deleted = node.id
            node.deleted_at = now
            node.updated_at = now
            node.generation = models.ComputeNode.generation + 1
        session.flush()
        left = []
        for host in hosts:
            remaining = session.scalar(sa.select(sa.func.count()).where(
                models.ComputeNode.host == host, models.ComputeNode.deleted == 0))
            if not remaining:
                left += db_aggregates.remove_host_everywhere(session, host)
                session.execute(sa.delete(models.Service).where(models.Service.host == host))
    LOG.info("Deleted host %s (nodes %s, %d allocation(s), %d PCI device(s))",
             name, ", ".join(node_names), allocations, devices)
    return {"host": name, "nodes": node_names,
            "allocations_deleted": allocations, "pci_devices_deleted": devices,
            "aggregates_left": sorted(set(left))}


# -- reads --------------------------------------------------------------------------------

def _nodes_of(session: Session, name: str, for_update: bool = False
              ) -> list[models.ComputeNode]:
    """Live nodes named ``name`` (node name first, then host name); NotFound if none."""
    for column in (models.ComputeNode.hypervisor_hostname, models.ComputeNode.host):
        q = (sa.select(models.ComputeNode)
             .where(column == name, models.ComputeNode.deleted == 0)
             .order_by(models.ComputeNode.hypervisor_hostname))
        if for_update:
            q = q.with_for_update()
        nodes = list(session.scalars(q))
        if nodes:
            return nodes
    raise exception.NotFound(kind="Host", name=name)


def _resources(provider: host_states.ProviderRecord) -> dict[str, dict]:
    """A provider's inventories with what is used and free, by class."""
    out = {}
    for rc, (inv, used) in sorted(provider.inventories.items()):
        capacity = usable(inv.total, inv.reserved, inv.allocation_ratio)
        out[rc] = dict(inv.to_primitive(), used=used, free=_num(capacity - used))
    return out


def _num(value: float) -> float | int:
    value = round(value, 2)
    return int(value) if value == int(value) else value


def _context(session: Session, node_ids: list[int], hosts: list[str]) -> dict[str, Any]:
    """Aggregates, zones, PCI counts, allocation counts and heartbeats, one query each."""
    aggs: dict[str, list[str]] = {}
    zones: dict[str, str] = {}
    if hosts:
        rows = session.execute(
            sa.select(models.AggregateHost.host, models.Aggregate.name,
                      models.AggregateMetadata.value)
            .join(models.Aggregate, models.Aggregate.id == models.AggregateHost.aggregate_id)
            .outerjoin(models.AggregateMetadata, sa.and_(
                models.AggregateMetadata.aggregate_id == models.Aggregate.id,
                models.AggregateMetadata.key == db_aggregates.AZ_KEY))
            .where(models.Aggregate.deleted == 0, models.AggregateHost.host.in_(hosts))
            .order_by(models.Aggregate.name))
        for host, agg, zone in rows.tuples():
            aggs.setdefault(host, []).append(agg)
            if zone:
                zones[host] = zone
    pci: dict[int, dict[str, int]] = {}
    pci_tags: dict[int, dict[str, int]] = {}
    allocs: dict[int, int] = {}
    if node_ids:
        dev = models.PciDevice
        rows = session.execute(
            sa.select(dev.compute_node_id, dev.status, dev.tags, sa.func.count())
            .where(dev.compute_node_id.in_(node_ids))
            .group_by(dev.compute_node_id, dev.status, dev.tags))
        for node_id, status, tags, count in rows.tuples():
            if status == pci_device.REMOVED:
                continue
            by_status = pci.setdefault(node_id, {})
            by_status[status] = by_status.get(status, 0) + count
            for key, value in pci_device.tags_from_text(tags):
                by_tag = pci_tags.setdefault(node_id, {})
                by_tag[f"{key}={value}"] = by_tag.get(f"{key}={value}", 0) + count
        allocs = dict(session.execute(
            sa.select(models.Consumer.compute_node_id, sa.func.count())
            .where(models.Consumer.compute_node_id.in_(node_ids))
            .group_by(models.Consumer.compute_node_id)).tuples().all())
    seen = dict(session.execute(
        sa.select(models.Service.host, models.Service.last_seen_up)
        .where(models.Service.binary == COMPUTE_BINARY,
               models.Service.host.in_(hosts))).tuples().all()) if hosts else {}
    providers = host_states.load_providers(session.connection(), node_ids) if node_ids else {}
    return {"aggregates": aggs, "zones": zones, "pci": pci, "pci_tags": pci_tags,
            "allocations": allocs, "seen": seen, "providers": providers}


def _summary(node: models.ComputeNode, ctx: dict[str, Any]) -> dict[str, Any]:
    pci = ctx["pci"].get(node.id, {})
    seen = ctx["seen"].get(node.host)
    providers = ctx["providers"].get(node.id) or [
        host_states.ProviderRecord(0, node.uuid, node.hypervisor_hostname, None)]
    root = providers[0]
    resources = _resources(root)

    def field(rc: str, key: str, default: Any = 0) -> Any:
        return resources.get(rc, {}).get(key, default)

    return {
        "host": node.host, "node": node.hypervisor_hostname, "uuid": node.uuid,
        # the root provider's classic classes (every class: resources)
        "vcpus": field(VCPU, "total"), "vcpus_used": field(VCPU, "used"),
        "pcpus": field(PCPU, "total"), "pcpus_used": field(PCPU, "used"),
        "memory_mb": field(MEMORY_MB, "total"), "memory_mb_used": field(MEMORY_MB, "used"),
        "local_gb": field(DISK_GB, "total"), "local_gb_used": field(DISK_GB, "used"),
        "running_vms": node.running_vms,
        "cpu_allocation_ratio": field(VCPU, "allocation_ratio", 1.0),
        "ram_allocation_ratio": field(MEMORY_MB, "allocation_ratio", 1.0),
        "disk_allocation_ratio": field(DISK_GB, "allocation_ratio", 1.0),
        "reserved_host_cpus": field(VCPU, "reserved"),
        "reserved_host_memory_mb": field(MEMORY_MB, "reserved"),
        "reserved_host_disk_mb": field(DISK_GB, "reserved") * 1024,
        "free": {"vcpus": field(VCPU, "free"), "memory_mb": field(MEMORY_MB, "free"),
                 "local_gb": field(DISK_GB, "free")},
        "resources": resources,
        "traits": sorted(root.traits),
        "providers": [{"name": p.name, "uuid": p.uuid,
                       "parent": next((q.name if q.parent_id is not None else
                                       node.hypervisor_hostname for q in providers
                                       if q.id == p.parent_id), None),
                       "traits": sorted(p.traits), "resources": _resources(p)}
                      for p in providers[1:]],
        "disabled": node.disabled, "disabled_reason": node.disabled_reason,
        "availability_zone": ctx["zones"].get(node.host),
        "aggregates": ctx["aggregates"].get(node.host, []),
        "numa_cells": len((_loads(node.numa_topology) or {}).get("cells", [])),
        "pci_devices": {"total": sum(pci.values()), "available": pci.get("available", 0),
                        "by_status": dict(sorted(pci.items())),
                        # devices (of any status but removed) per tag, e.g. trusted=true
                        "by_tag": dict(sorted(ctx["pci_tags"].get(node.id, {}).items()))},
        "allocations": ctx["allocations"].get(node.id, 0),
        "last_seen_up": seen.isoformat() if seen else None,
        "generation": node.generation,
        "updated_at": node.updated_at.isoformat(),
    }


def list_hosts(db: Database) -> list[dict]:
    """Every live node with capacity, usage, free room, zone, aggregates and counts."""
    with db.reader() as session:
        nodes = list(session.scalars(
            sa.select(models.ComputeNode).where(models.ComputeNode.deleted == 0)
            .order_by(models.ComputeNode.host, models.ComputeNode.hypervisor_hostname)))
        ctx = _context(session, [n.id for n in nodes], sorted({n.host for n in nodes}))
        return [_summary(n, ctx) for n in nodes]


def get_host(db: Database, name: str) -> dict:
    """One node (by node or host name) in full: the summary plus description and NUMA."""
    with db.reader() as session:
        node = _nodes_of(session, name)[0]
        out = _summary(node, _context(session, [node.id], [node.host]))
        out.update({
            "hypervisor_type": node.hypervisor_type,
            "hypervisor_version": node.hypervisor_version,
            "host_ip": node.host_ip,
            "cpu_info": _loads(node.cpu_info),
            "supported_instances": _loads(node.supported_instances),
            "stats": _loads(node.stats) or {},
            "metrics": _loads(node.metrics) or {},
            "numa_topology": _loads(node.numa_topology),
            "current_workload": node.current_workload,
            "created_at": node.created_at.isoformat(),
        })
        return out
