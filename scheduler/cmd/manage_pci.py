"""``berth-manage pci pools``: free PCI devices per host, grouped into pools.

Pools are computed on demand with one GROUP BY over ``pci_devices``
(``db.pci.pools_for_nodes``); they are never stored.
"""
from __future__ import annotations

import argparse

import sqlalchemy as sa

from db import models
from db import pci as db_pci
from scheduler import exception
from scheduler.cmd import common

POOL_COLUMNS: list[common.Column] = [
    ("HOST", "host"),
    ("NODE", "node"),
    ("VENDOR", "vendor_id"),
    ("PRODUCT", "product_id"),
    ("TYPE", "dev_type"),
    ("NUMA", "numa_node"),
    ("PHYSNET", "physical_network"),
    ("TAGS", "tags"),
    ("FREE", "count"),
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("pci", help="PCI devices")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    pools = commands.add_parser("pools", help="pools of free devices per host")
    pools.add_argument("--host", metavar="NAME", help="only this host (or node)")
    common.add_json_flag(pools)
    pools.set_defaults(func=do_pools)


def list_pools(conn, host: str | None = None) -> list[dict]:
    """One row per (node, pool) with the node's names, ordered by host and node."""
    nodes_t = models.ComputeNode.__table__
    q = sa.select(nodes_t.c.id, nodes_t.c.host, nodes_t.c.hypervisor_hostname).where(
        nodes_t.c.deleted == 0)
    if host is not None:
        q = q.where(sa.or_(nodes_t.c.host == host, nodes_t.c.hypervisor_hostname == host))
    names = {row.id: (row.host, row.hypervisor_hostname) for row in conn.execute(q)}
    if host is not None and not names:
        raise exception.NotFound(kind="Host", name=host)
    pools = db_pci.pools_for_nodes(conn, sorted(names) if host is not None else None)
    rows = []
    for node_id, node_pools in pools.items():
        if node_id not in names:
            continue
        for pool in node_pools:
            rows.append({"host": names[node_id][0], "node": names[node_id][1],
                         "vendor_id": pool.key.vendor_id, "product_id": pool.key.product_id,
                         "dev_type": pool.key.dev_type, "numa_node": pool.key.numa_node,
                         "physical_network": pool.key.physical_network,
                         "tags": dict(pool.key.tags), "count": pool.count})
    rows.sort(key=lambda r: (r["host"], r["node"]))
    return rows


def do_pools(args: argparse.Namespace) -> int:
    with common.database().reader_connection() as conn:
        rows = list_pools(conn, args.host)
    if args.json:
        common.print_json(rows)
    else:
        common.print_table(rows, POOL_COLUMNS, empty="no free PCI devices")
    return common.EXIT_OK
