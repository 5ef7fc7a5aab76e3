"""The ledger's invariants, checked in SQL (tests, scenarios, benchmarks, fault runs).

* every inventory's ``used`` equals the sum of the allocations against it
  (but those of preempted consumers: their room was handed over), and stays
  within ``db.inventory``'s rule (``(total - reserved) x ratio``);
* a node's ``running_vms`` equals the number of consumers it holds (preempted
  ones aside);
* a node's NUMA usage equals the sum of its (not preempted) consumers' fitted cells.

A node below its usage because a report shrank it (``capacity below usage``)
breaks the second half of the first rule by design; :func:`check` reports it
like any other breach, and callers that expect it say so.
"""
from __future__ import annotations

import json
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from db import models
from db.inventory import DISK_GB, MEMORY_MB, PCPU, VCPU, fits, usable

_cn = models.ComputeNode.__table__
_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__
_cons = models.Consumer.__table__
_alloc = models.Allocation.__table__


def _node_filter(q, column, hosts: Iterable[str] | None):
    if hosts is None:
        return q
    return q.where(column.in_(sa.select(_cn.c.id).where(_cn.c.host.in_(sorted(hosts)),
                                                        _cn.c.deleted == 0)))


def check(conn: Connection, hosts: Iterable[str] | None = None) -> list[str]:
    """What breaks the invariants on the nodes of ``hosts`` (None: every node);
    a handful of queries whatever the number of nodes."""
    hosts = None if hosts is None else list(hosts)
    failures: list[str] = []
    sums: dict[tuple[int, str], int] = {}
    for pid, rc, amount in conn.execute(_node_filter(
            sa.select(_alloc.c.provider_id, _alloc.c.resource_class,
                      sa.func.sum(_alloc.c.amount))
            .join(_rp, _rp.c.id == _alloc.c.provider_id)
            .group_by(_alloc.c.provider_id, _alloc.c.resource_class),
            _rp.c.compute_node_id, hosts)):
        sums[(pid, rc)] = int(amount)
    # preempted consumers keep their rows, uncounted (few: read apart)
    for pid, rc, amount in conn.execute(_node_filter(
            sa.select(_alloc.c.provider_id, _alloc.c.resource_class,
                      sa.func.sum(_alloc.c.amount))
            .join(_rp, _rp.c.id == _alloc.c.provider_id)
            .join(_cons, _cons.c.id == _alloc.c.consumer_id)
            .where(_cons.c.consumer_type == models.PREEMPTED)
            .group_by(_alloc.c.provider_id, _alloc.c.resource_class),
            _rp.c.compute_node_id, hosts)):
        sums[(pid, rc)] -= int(amount)
    seen = set()
    q = (sa.select(_cn.c.host, _rp.c.name, _rp.c.parent_id, _inv)
         .join(_rp, _rp.c.id == _inv.c.provider_id)
         .join(_cn, _cn.c.id == _rp.c.compute_node_id)
         .where(_cn.c.deleted == 0))
    if hosts is not None:
        q = q.where(_cn.c.host.in_(sorted(hosts)))
    for row in conn.execute(q).mappings():
        key = (row["provider_id"], row["resource_class"])
        seen.add(key)
        where = row["host"] if row["parent_id"] is None else f"{row['host']}/{row['name']}"
        want = sums.get(key, 0)
        if row["used"] != want:
            failures.append(f"{where}: {row['resource_class']} used {row['used']} != sum of "
                            f"allocations {want}")
        if not fits(row["used"], 0, row["total"], row["reserved"], row["allocation_ratio"]):
            limit = usable(row["total"], row["reserved"], row["allocation_ratio"])
            failures.append(f"{where}: {row['resource_class']} used {row['used']} > "
                            f"limit {limit}")
    for (pid, rc), amount in sums.items():
        if (pid, rc) not in seen and amount:
            failures.append(f"provider {pid}: {amount} {rc} allocated without an inventory")
    counts: dict[int, int] = {}
    fitted: dict[int, list[str]] = {}
    for node_id, numa_cells in conn.execute(_node_filter(
            sa.select(_cons.c.compute_node_id, _cons.c.numa_cells)
            .where(_cons.c.consumer_type != models.PREEMPTED),
            _cons.c.compute_node_id, hosts)):
        counts[node_id] = counts.get(node_id, 0) + 1
        if numa_cells is not None:
            fitted.setdefault(node_id, []).append(numa_cells)
    nodes = sa.select(_cn.c.id, _cn.c.host, _cn.c.running_vms, _cn.c.numa_topology).where(
        _cn.c.deleted == 0)
    if hosts is not None:
        nodes = nodes.where(_cn.c.host.in_(sorted(hosts)))
    for node_id, host, running, topology in conn.execute(nodes):
        if running != counts.get(node_id, 0):
            failures.append(f"{host}: running_vms {running} != {counts.get(node_id, 0)} "
                            f"consumers")
        if topology:
            problem = numa_usage_problem(topology, fitted.get(node_id, []))
            if problem:
                failures.append(f"{host}: {problem}")
    return failures


def numa_usage_problem(host_json: str, fitted_jsons: list[str]) -> str | None:
    """NUMA usage on the node must equal the sum of its consumers' fitted cells."""
    from numa import usage
    from numa.topology import FittedTopology, HostTopology

    stored = json.loads(host_json)
    empty = {**stored, "cells": [
        {**c, "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [],
         "mempages": [{**m, "used": 0} for m in c.get("mempages", [])]}
        for c in stored["cells"]]}
    expected = HostTopology.from_primitive(empty)
    for text in fitted_jsons:
        expected = usage.apply_usage(expected, FittedTopology.from_primitive(json.loads(text)))
    if expected != HostTopology.from_primitive(stored):
        return "NUMA usage differs from the sum of its allocations"
    return None


#: Classic usage counter names and the class of the root provider they read.
CLASSIC_COUNTERS = {"vcpus_used": VCPU, "pcpus_used": PCPU, "memory_mb_used": MEMORY_MB,
                    "local_gb_used": DISK_GB}


def usage_by_host(conn: Connection) -> dict[str, dict[str, int]]:
    """host -> what its nodes hold: every class (summed over the providers),
    the classic counters of the root (vcpus_used, pcpus_used, memory_mb_used,
    local_gb_used, disk_mb_used) and running_vms."""
    out: dict[str, dict[str, int]] = {}
    for host, running in conn.execute(sa.select(_cn.c.host, _cn.c.running_vms)
                                      .where(_cn.c.deleted == 0)):
        entry = out.setdefault(host, {"running_vms": 0})
        entry["running_vms"] += running
        for name in (*CLASSIC_COUNTERS, "disk_mb_used"):
            entry.setdefault(name, 0)
    q = (sa.select(_cn.c.host, _rp.c.parent_id, _inv.c.resource_class, _inv.c.used)
         .join(_rp, _rp.c.id == _inv.c.provider_id)
         .join(_cn, _cn.c.id == _rp.c.compute_node_id)
         .where(_cn.c.deleted == 0))
    for host, parent, rc, used in conn.execute(q):
        entry = out[host]
        entry[rc] = entry.get(rc, 0) + used
        if parent is None:
            for name, cls in CLASSIC_COUNTERS.items():
                if cls == rc:
                    entry[name] += used
            if rc == DISK_GB:
                entry["disk_mb_used"] += used * 1024
    return out
