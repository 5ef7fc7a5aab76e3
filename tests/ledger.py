"""Test helpers that put nodes and allocations in a database the way the product
does (``db.hosts`` and ``db.claims``), for tests that need a given state."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from db import claims, hosts, models
from db.inventory import DISK_GB, MEMORY_MB, VCPU
from scheduler import fleet

DEFAULTS = {"vcpus": 8, "memory_mb": 8192, "local_gb": 100, "cpu_allocation_ratio": 1.0,
            "ram_allocation_ratio": 1.0, "disk_allocation_ratio": 1.0}


def add_node(db, name: str, **fields: Any) -> int:
    """A node called ``name`` (fleet-file fields over DEFAULTS); its id."""
    rec = fleet.parse_host({"host": name, **DEFAULTS, **fields})
    with db.writer() as session:
        return hosts.upsert_host(session, rec)


def node_id(db, name: str) -> int:
    cn = models.ComputeNode.__table__
    with db.reader_connection() as conn:
        return conn.execute(sa.select(cn.c.id).where(
            sa.or_(cn.c.hypervisor_hostname == name, cn.c.host == name),
            cn.c.deleted == 0)).scalar_one()


def root_provider(db, node: int) -> int:
    rp = models.ResourceProvider.__table__
    with db.reader_connection() as conn:
        return conn.execute(sa.select(rp.c.id).where(rp.c.compute_node_id == node,
                                                     rp.c.parent_id.is_(None))).scalar_one()


def hold(db, node: str | int, instance_uuid: str,
         amounts: Mapping[str, int] | None = None, **record: Any) -> claims.ClaimResult:
    """What a claim writes: ``instance_uuid`` holds ``amounts`` (default 2 VCPU,
    2048 MB, 20 GB) of the node's root provider."""
    if isinstance(node, str):
        node = node_id(db, node)
    if amounts is None:
        amounts = {VCPU: 2, MEMORY_MB: 2048, DISK_GB: 20}
    root = root_provider(db, node)
    cn = models.ComputeNode.__table__
    with db.reader_connection() as conn:
        generation = conn.execute(sa.select(cn.c.generation).where(cn.c.id == node)
                                  ).scalar_one()
    items = tuple((root, rc, n) for rc, n in amounts.items() if n)
    return claims.claim(db, claims.ClaimRecord(
        instance_uuid=instance_uuid, node_id=node, seen_generation=generation, items=items,
        **record))


def used(db, node: str | int) -> dict[str, int]:
    """What the node's root provider has handed out, by class."""
    if isinstance(node, str):
        node = node_id(db, node)
    inv = models.ProviderInventory.__table__
    with db.reader_connection() as conn:
        return dict(conn.execute(sa.select(inv.c.resource_class, inv.c.used).where(
            inv.c.provider_id == root_provider(db, node))).tuples().all())


def total_used(db, rc: str = VCPU) -> int:
    """What every node has handed out of ``rc``, summed."""
    inv = models.ProviderInventory.__table__
    with db.reader_connection() as conn:
        return conn.execute(sa.select(sa.func.coalesce(sa.func.sum(inv.c.used), 0)).where(
            inv.c.resource_class == rc)).scalar_one()
