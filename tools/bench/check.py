"""Validity of a replay, read straight from SQL (issue 10).

``check(db, expectations)`` returns one line per violation (empty: valid):

- every inventory's ``used`` equals the sum of the allocations against it and stays
  within (total - reserved) x allocation ratio (``db.inventory``'s rule), a node's
  ``running_vms`` equals its consumers, and NUMA usage equals the sum of the fitted
  cells (as ``scheduler.simulate.check_invariants``, which raises instead of reporting
  when two consumers pin one CPU; here each node is checked on its own and reported);
- no host CPU is pinned by two allocations, pinned CPUs are dedicated CPUs of the
  cell they were fitted to, and no page size is used beyond its total;
- hard group policies hold: an affinity group's members on one host, an
  anti-affinity group's at most ``max_server_per_host`` (default 1) per host;
- PCI claims match consumers: every device in use names a consumer on its node
  that lists it, every listed device is in use by that consumer, a PF in use has
  no VF in use (and vice versa), and an instance holds as many devices as it asked
  for;
- placed instances landed in the zone they asked for, on a forced host when hosts
  were forced, never on an ignored host; instances the replay says it placed hold
  a consumer, and released ones hold none.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from db import inventory, models
from db.api import Database
from numa import errors as numa_errors
from numa import usage as numa_usage
from numa.topology import FittedTopology, HostTopology

_cn = models.ComputeNode.__table__
_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__
_cons = models.Consumer.__table__
_alloc = models.Allocation.__table__
_pci = models.PciDevice.__table__
_agg_hosts = models.AggregateHost.__table__
_agg_meta = models.AggregateMetadata.__table__

IN_USE = ("claimed", "allocated")


@dataclasses.dataclass
class Expectations:
    """What the trace asked and what the replay reported."""

    #: group uuid -> (policy, max_server_per_host or None)
    groups: Mapping[str, tuple[str, int | None]] = dataclasses.field(default_factory=dict)
    #: instance uuid -> the spec it was placed by (RPC payload)
    specs: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    placed: set[str] = dataclasses.field(default_factory=set)
    released: set[str] = dataclasses.field(default_factory=set)

    @classmethod
    def from_replay(cls, groups: Mapping, ops: Iterable[dict], outcomes: Iterable[dict]
                    ) -> Expectations:
        """``outcomes``: the replayer's per-operation records (``i``, ``outcome``,
        ``instances``)."""
        by_i = {op["i"]: op for op in ops}
        exp = cls(groups=dict(groups))
        for rec in outcomes:
            op = by_i[rec["i"]]
            if op["op"] == "select" and rec["outcome"] == "placed":
                for u in op["spec"]["instance_uuids"]:
                    exp.specs[u] = op["spec"]
                    exp.placed.add(u)
                    exp.released.discard(u)
            elif op["op"] == "release" and rec["outcome"] == "released":
                exp.released.add(op["instance_uuid"])
                exp.placed.discard(op["instance_uuid"])
        return exp


def check(db: Database, exp: Expectations | None = None) -> list[str]:
    exp = exp or Expectations()
    problems: list[str] = []
    with db.reader_connection() as conn:
        nodes = {r["id"]: r for r in conn.execute(
            sa.select(_cn).where(_cn.c.deleted == 0)).mappings()}
        consumers = list(conn.execute(sa.select(
            _cons.c.uuid, _cons.c.consumer_type, _cons.c.instance_uuid,
            _cons.c.compute_node_id, _cons.c.numa_cells, _cons.c.pci_devices,
            _cons.c.instance_group, _cons.c.project_id)).mappings())
        inventories = list(conn.execute(
            sa.select(_rp.c.compute_node_id, _rp.c.name, _rp.c.parent_id, _inv)
            .join(_rp, _rp.c.id == _inv.c.provider_id)).mappings())
        held = {(p, rc): int(n) for p, rc, n in conn.execute(
            sa.select(_alloc.c.provider_id, _alloc.c.resource_class,
                      sa.func.sum(_alloc.c.amount))
            .group_by(_alloc.c.provider_id, _alloc.c.resource_class))}
        devices = list(conn.execute(sa.select(
            _pci.c.compute_node_id, _pci.c.address, _pci.c.parent_addr, _pci.c.status,
            _pci.c.instance_uuid)).mappings())
        zones: dict[str, set[str]] = collections.defaultdict(set)
        for host, zone in conn.execute(
                sa.select(_agg_hosts.c.host, _agg_meta.c.value)
                .join(_agg_meta, _agg_meta.c.aggregate_id == _agg_hosts.c.aggregate_id)
                .where(_agg_meta.c.key == "availability_zone")):
            zones[host].add(zone)
    problems += _ledger(nodes, inventories, held)
    problems += _capacity(nodes, consumers)
    problems += _pinning(nodes, consumers)
    problems += _groups(nodes, consumers, exp.groups)
    problems += _pci_claims(nodes, consumers, devices, exp.specs)
    problems += _requests(nodes, consumers, zones, exp)
    return problems


def _ledger(nodes, inventories, held) -> list[str]:
    """Per inventory: ``used`` equals the sum of the allocations against it and
    stays within what may be allocated; no allocation without an inventory."""
    out = []
    seen = set()
    for inv in inventories:
        key = (inv["provider_id"], inv["resource_class"])
        seen.add(key)
        node = nodes.get(inv["compute_node_id"])
        if node is None:
            continue                    # a deleted node's providers
        where = node["host"] if inv["parent_id"] is None else f"{node['host']}/{inv['name']}"
        rc, used, want = inv["resource_class"], inv["used"], held.get(key, 0)
        if used != want:
            out.append(f"{where}: {rc} used {used} != sum of allocations {want}")
        if not inventory.fits(used, 0, inv["total"], inv["reserved"],
                              inv["allocation_ratio"]):
            limit = inventory.usable(inv["total"], inv["reserved"], inv["allocation_ratio"])
            out.append(f"{where}: {rc} used {used} > limit {limit:g}")
    for (provider, rc), amount in sorted(held.items()):
        if (provider, rc) not in seen and amount:
            out.append(f"provider {provider}: {amount} {rc} allocated without an inventory")
    return out


def _capacity(nodes, consumers) -> list[str]:
    """A node's running count equals its consumers; its NUMA usage equals the
    fresh topology plus every consumer's fitted cells."""
    out = []
    running = collections.Counter(a["compute_node_id"] for a in consumers)
    fitted = collections.defaultdict(list)
    for a in consumers:
        if a["numa_cells"]:
            fitted[a["compute_node_id"]].append(a["numa_cells"])
    for node_id in set(running) - set(nodes):
        out.append(f"consumers on node {node_id}, which does not exist")
    for node_id, n in nodes.items():
        if n["running_vms"] != running.get(node_id, 0):
            out.append(f"{n['host']}: running_vms {n['running_vms']} != "
                       f"{running.get(node_id, 0)} consumers")
        if n["numa_topology"]:
            problem = _numa_usage(n["numa_topology"], fitted.get(node_id, ()))
            if problem:
                out.append(f"{n['host']}: {problem}")
        elif node_id in fitted:
            out.append(f"{n['host']}: consumers with NUMA cells on a host without a "
                       f"topology")
    return out


def _numa_usage(host_json: str, fitted_jsons) -> str | None:
    stored = json.loads(host_json)
    expected = HostTopology.from_primitive({**stored, "cells": [
        {**c, "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [],
         "mempages": [{**m, "used": 0} for m in c.get("mempages", [])]}
        for c in stored["cells"]]})
    try:
        for text in fitted_jsons:
            expected = numa_usage.apply_usage(
                expected, FittedTopology.from_primitive(json.loads(text)))
    except numa_errors.NumaError as e:
        return f"the allocations' NUMA cells do not add up: {e}"
    if expected != HostTopology.from_primitive(stored):
        return "NUMA usage differs from the sum of its allocations"
    return None


def _pinning(nodes, consumers) -> list[str]:
    out = []
    by_node = collections.defaultdict(list)
    for a in consumers:
        if a["numa_cells"]:
            by_node[a["compute_node_id"]].append(a)
    for node_id, rows in by_node.items():
        node = nodes.get(node_id)
        if node is None or not node["numa_topology"]:
            continue                    # reported by _capacity
        topo = json.loads(node["numa_topology"])
        cells = {c["id"]: c for c in topo["cells"]}
        owner: dict[int, str] = {}
        pinned_by_cell = collections.defaultdict(set)
        for a in rows:
            fitted = json.loads(a["numa_cells"])
            for fc in fitted["cells"]:
                cell = cells.get(fc["host_cell_id"])
                cpus = set(fc.get("cpu_pinning", {}).values()) | set(
                    fc.get("cpuset_reserved", ())) | set(fc.get("cpuset_isolated", ()))
                if cell is None:
                    out.append(f"{node['host']}: {a['instance_uuid']} on missing cell "
                               f"{fc['host_cell_id']}")
                    continue
                stray = cpus - set(cell["pcpuset"])
                if stray:
                    out.append(f"{node['host']}: {a['instance_uuid']} pins non-dedicated "
                               f"CPUs {sorted(stray)} of cell {cell['id']}")
                for cpu in cpus:
                    if cpu in owner:
                        out.append(f"{node['host']}: CPU {cpu} pinned by {owner[cpu]} and "
                                   f"{a['instance_uuid']}")
                    owner[cpu] = a["instance_uuid"]
                pinned_by_cell[cell["id"]] |= cpus
        for cid, cell in cells.items():
            if set(cell.get("pinned_cpus", ())) != pinned_by_cell[cid]:
                out.append(f"{node['host']}: cell {cid} pinned_cpus "
                           f"{sorted(cell.get('pinned_cpus', ()))} != allocations' "
                           f"{sorted(pinned_by_cell[cid])}")
    for node in nodes.values():
        if node["numa_topology"]:
            for cell in json.loads(node["numa_topology"])["cells"]:
                for page in cell.get("mempages", ()):
                    if page.get("used", 0) + page.get("reserved", 0) > page["total"]:
                        out.append(f"{node['host']}: cell {cell['id']} {page['size_kb']} KiB "
                                   f"pages used {page['used']} > total {page['total']}")
    return out


def _groups(nodes, consumers, policies) -> list[str]:
    """``policies`` by group UUID; members are stored under their project's key
    of the group (``scheduler.filter_scheduler.group_key``)."""
    from scheduler.filter_scheduler import group_key

    projects = {a["project_id"] for a in consumers}
    uuid_of = {group_key(p, g): g for g in policies for p in projects}
    policies = {key: policies[g] for key, g in uuid_of.items()}
    out = []
    hosts_of = collections.defaultdict(collections.Counter)
    for a in consumers:
        if a["instance_group"]:
            node = nodes.get(a["compute_node_id"])
            hosts_of[a["instance_group"]][node["host"] if node else "?"] += 1
    for key, counts in hosts_of.items():
        policy, max_per_host = policies.get(key, (None, None))
        group = uuid_of.get(key, key)
        if policy == "affinity" and len(counts) > 1:
            out.append(f"affinity group {group} spans hosts {sorted(counts)}")
        elif policy == "anti-affinity":
            limit = max_per_host or 1
            for host, n in counts.items():
                if n > limit:
                    out.append(f"anti-affinity group {group} has {n} members on {host} "
                               f"(at most {limit})")
    return out


def _requested_devices(spec: dict) -> int:
    alias = (spec.get("flavor", {}).get("extra_specs") or {}).get("pci_passthrough:alias")
    total = 0
    for part in (alias or "").split(","):
        if part.strip():
            name, _, count = part.partition(":")
            total += int(count or 1)
    return total + sum(int(r.get("count", 1)) for r in spec.get("pci_requests") or ())


def _pci_claims(nodes, consumers, devices, specs) -> list[str]:
    out = []
    listed = {}
    for a in consumers:
        addrs = json.loads(a["pci_devices"]) if a["pci_devices"] else []
        listed[a["uuid"]] = (a["compute_node_id"], set(addrs))   # devices name the consumer
        spec = specs.get(a["instance_uuid"]) if a["consumer_type"] == "instance" else None
        if spec is not None and len(addrs) != _requested_devices(spec):
            out.append(f"{a['instance_uuid']} holds {len(addrs)} device(s), asked for "
                       f"{_requested_devices(spec)}")
    used_by = collections.defaultdict(set)
    by_node = collections.defaultdict(dict)
    for d in devices:
        by_node[d["compute_node_id"]][d["address"]] = d
    for node_id, devs in by_node.items():
        host = nodes[node_id]["host"] if node_id in nodes else str(node_id)
        for d in devs.values():
            if d["status"] not in IN_USE:
                continue
            used_by[d["instance_uuid"]].add((node_id, d["address"]))
            alloc = listed.get(d["instance_uuid"])
            if alloc is None or alloc[0] != node_id or d["address"] not in alloc[1]:
                out.append(f"{host}: device {d['address']} is {d['status']} by "
                           f"{d['instance_uuid']}, which is no consumer listing it here")
            parent = devs.get(d["parent_addr"]) if d["parent_addr"] else None
            if parent is not None and parent["status"] in IN_USE:
                out.append(f"{host}: VF {d['address']} and its PF {parent['address']} are "
                           f"both in use")
            if parent is not None and parent["status"] == "available":
                out.append(f"{host}: PF {parent['address']} is available while its VF "
                           f"{d['address']} is in use")
    for inst, (node_id, addrs) in listed.items():
        if {(node_id, a) for a in addrs} != used_by.get(inst, set()):
            out.append(f"{inst}: consumer lists devices {sorted(addrs)} but holds "
                       f"{sorted(a for _, a in used_by.get(inst, ()))}")
    return out


def _requests(nodes, consumers, zones, exp: Expectations) -> list[str]:
    out = []
    where = {a["instance_uuid"]: nodes[a["compute_node_id"]]["host"] for a in consumers
             if a["compute_node_id"] in nodes and a["consumer_type"] == "instance"}
    held = {a["instance_uuid"]: nodes[a["compute_node_id"]]["host"] for a in consumers
            if a["compute_node_id"] in nodes}
    for inst in sorted(exp.placed):
        host = where.get(inst)
        if host is None:
            out.append(f"{inst} was reported placed but has no allocation")
            continue
        spec = exp.specs.get(inst, {})
        az = spec.get("availability_zone")
        if az and az not in zones.get(host, ()):
            out.append(f"{inst} asked for zone {az}, landed on {host} in "
                       f"{sorted(zones.get(host, ())) or 'no zone'}")
        forced = spec.get("force_hosts")
        if forced and host not in forced:
            out.append(f"{inst} forced to {forced}, landed on {host}")
        if host in (spec.get("ignore_hosts") or ()):
            out.append(f"{inst} landed on ignored host {host}")
    for inst in sorted(exp.released):
        if inst in held:
            out.append(f"{inst} was released but still has an allocation on {held[inst]}")
    return out
