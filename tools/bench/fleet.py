"""Seeded heterogeneous benchmark fleets and a fast bulk loader (issue 10).

``generate_fleet(n, seed)`` builds every row of an ``n``-host fleet in memory from
seven hardware models (``MODELS``): small hosts without NUMA, 2-socket SMT hosts with
2 MiB and 1 GiB pages, SR-IOV hosts (one NIC per NUMA cell: a PF and its VFs on that
cell's physnet), GPU-like PCI hosts, big-memory hosts, old-hypervisor hosts that also
run i686 guests, and aarch64 hosts (image support differs). Two availability zones
and aggregates with metadata. Usage is already on the fleet: plain instances, pinned
instances (placed with ``numa.fitting.fit_instance_to_host`` and applied with
``numa.usage.apply_usage``), claimed VFs and GPUs (statuses from
``pci.device.claim_plan``), and server groups of every policy with members.

Capacity is the resource ledger, as the product writes it: each node is a root
resource provider (the node's uuid and name, its derived traits) whose inventories
are ``db.inventory.node_inventories`` of the model's figures (PCPU for the NUMA
cells' dedicated CPUs, VCPU for the rest); each instance is a consumer with one
allocations row per class it holds, and each inventory's ``used`` is the sum of
those rows. An instance is placed only where every class it asks fits.

Fits and claim plans are computed once per (model shape, usage pattern) and reused,
so 100,000 hosts generate in well under a minute. ``load_fleet(db, fleet)`` writes
the rows with SQLAlchemy Core ``executemany`` in chunks; every host gets a heartbeat at load
time (ComputeFilter treats a host without one as down), so a benchmark raises
``service_down_time`` rather than keep heartbeats fresh.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sqlalchemy as sa

from db import inventory, migration, models
from db.api import Database
from db.inventory import DISK_GB, MEMORY_MB, PCPU, VCPU
from numa import fitting, request, usage
from numa.topology import HostTopology
from pci import device as pci_device
from scheduler import host_traits
from scheduler.filter_scheduler import group_key

COMPUTE_BINARY = "berth-compute"
MYSQL_URL = os.environ.get("BERTH_BENCH_MYSQL_URL", "mysql+pymysql://root:@127.0.0.1:3306")
AZS = ("az1", "az2")

VENDOR, PF_PRODUCT, VF_PRODUCT = "8086", "1572", "154c"
GPU_VENDOR, GPU_PRODUCT = "10de", "20b5"
PHYSNETS = ("physnet1", "physnet2")          # NIC of cell 0 on physnet1, cell 1 on physnet2
VFS_PER_PF = 8

SUPPORTED_X86 = [["x86_64", "kvm", "hvm"], ["x86_64", "qemu", "hvm"]]
SUPPORTED_OLD = [["x86_64", "qemu", "hvm"], ["i686", "qemu", "hvm"]]
SUPPORTED_ARM = [["aarch64", "kvm", "hvm"]]


@dataclasses.dataclass(frozen=True)
class Model:
    """One hardware model: its share of the fleet and how its hosts look."""

    name: str
    share: float
    vcpus: tuple[int, ...]
    memory_gb: tuple[int, ...]
    disk_gb: tuple[int, ...]
    cpu_ratios: tuple[float, ...]
    ram_ratios: tuple[float, ...] = (1.0,)
    numa_cells: int = 0                       # 0: no NUMA topology reported
    smt: bool = False
    pages_2m_frac: float = 0.0                # of each cell's memory
    pages_1g_frac: float = 0.0
    nics: bool = False                        # one PF + VFs per cell
    gpus: int = 0                             # type-PCI devices, half per cell
    hypervisor_versions: tuple[int, ...] = (8002000,)
    supported: list = dataclasses.field(default_factory=lambda: SUPPORTED_X86)
    cpu_arch: str = "x86_64"


MODELS = (
    Model("small", 0.25, (16, 24, 32), (64, 96, 128), (500, 1000), (4.0, 8.0, 16.0),
          (1.0, 1.5)),
    Model("smt2s", 0.25, (48, 64, 96), (256, 384, 512), (1000, 2000), (1.0, 2.0),
          numa_cells=2, smt=True, pages_2m_frac=0.125, pages_1g_frac=0.25),
    Model("sriov", 0.15, (64, 96), (384, 512), (1000, 2000), (1.0, 2.0), numa_cells=2,
          smt=True, pages_2m_frac=0.125, pages_1g_frac=0.25, nics=True),
    Model("gpu", 0.05, (64,), (512,), (4000,), (1.0,), numa_cells=2, smt=True,
          pages_2m_frac=0.125, gpus=4),
    Model("bigmem", 0.10, (128,), (1536, 2048, 3072), (4000, 8000), (1.0, 2.0)),
    Model("old", 0.15, (32, 48), (128, 256), (1000,), (4.0, 8.0), (1.0, 1.2),
          hypervisor_versions=(4002000, 5002000), supported=SUPPORTED_OLD),
    Model("arm", 0.05, (80,), (256,), (1000,), (2.0, 4.0), supported=SUPPORTED_ARM,
          cpu_arch="aarch64"),
)
MODEL_NAMES = tuple(m.name for m in MODELS)

# Existing plain instances: (vcpus, memory_mb, disk_mb); disk in whole GB.
EXISTING_FLAVORS = ((2, 8192, 40960), (4, 16384, 81920), (8, 32768, 163840),
                    (16, 65536, 163840))
# Existing pinned instances on NUMA hosts: (vcpus, memory_mb, disk_mb, extra_specs).
EXISTING_PINNED = (
    (4, 8192, 40960, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}),
    (8, 16384, 40960, {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate",
                       "hw:mem_page_size": "1GB"}),
    (4, 8192, 40960, {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0",
                      "hw:mem_page_size": "2MB"}),
    (8, 16384, 81920, {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                       "hw:mem_page_size": "large"}),
)
GROUP_FLAVOR = (1, 2048, 20480)
GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")

_cn = models.ComputeNode.__table__
_svc = models.Service.__table__
_pci = models.PciDevice.__table__
_rp = models.ResourceProvider.__table__
_inv = models.ProviderInventory.__table__
_cons = models.Consumer.__table__
_alloc = models.Allocation.__table__
_agg = models.Aggregate.__table__
_agg_hosts = models.AggregateHost.__table__
_agg_meta = models.AggregateMetadata.__table__
_groups = models.ServerGroup.__table__


@dataclasses.dataclass
class BenchFleet:
    """Every row of a generated fleet, ready for ``executemany`` (ids assigned), and
    what a trace needs to know about it (groups, instances, hosts by model)."""

    size: int
    seed: int
    nodes: list[dict[str, Any]]
    pci_devices: list[dict[str, Any]]
    providers: list[dict[str, Any]]           # one root provider per node
    inventories: list[dict[str, Any]]         # with ``used``: the sum of the allocations
    consumers: list[dict[str, Any]]           # one per existing instance
    allocations: list[dict[str, Any]]         # a consumer's amount of one class
    aggregates: list[dict[str, Any]]
    aggregate_hosts: list[dict[str, Any]]
    aggregate_metadata: list[dict[str, Any]]
    server_groups: list[dict[str, Any]]
    #: uuid -> {"policy", "max_server_per_host", "members": [instance uuids]}
    groups: dict[str, dict[str, Any]]
    models: dict[str, str]                    # host -> model name

    def counts(self) -> dict[str, int]:
        """Rows per kind, hosts per model, NUMA and PCI host counts, instances
        (consumers) and what they hold of each class (``used_VCPU``, ...)."""
        per_model = {m: 0 for m in MODEL_NAMES}
        for m in self.models.values():
            per_model[m] += 1
        used: dict[str, int] = {}
        for inv in self.inventories:
            used[inv["resource_class"]] = used.get(inv["resource_class"], 0) + inv["used"]
        return {"hosts": len(self.nodes),
                "numa_hosts": sum(1 for n in self.nodes if n["numa_topology"]),
                "pci_hosts": len({d["compute_node_id"] for d in self.pci_devices}),
                "pci_devices": len(self.pci_devices),
                "pci_available": sum(1 for d in self.pci_devices
                                     if d["status"] == "available"),
                "pci_claimed": sum(1 for d in self.pci_devices if d["status"] == "claimed"),
                "providers": len(self.providers),
                "inventories": len(self.inventories),
                "instances": len(self.consumers),
                "pinned_instances": sum(1 for c in self.consumers if c["numa_cells"]),
                "group_members": sum(1 for c in self.consumers if c["instance_group"]),
                "allocations": len(self.allocations),
                "groups": len(self.groups),
                "aggregates": len(self.aggregates),
                "aggregate_hosts": len(self.aggregate_hosts),
                **{f"used_{rc}": n for rc, n in sorted(used.items())},
                **{f"model_{m}": n for m, n in per_model.items()}}

    def instance_uuids(self) -> list[str]:
        return [c["instance_uuid"] for c in self.consumers]


def _uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


# -- host shapes (cached per model and size) ------------------------------------------------

def host_topology(model: Model, vcpus: int, memory_mb: int) -> dict[str, Any]:
    """``model.numa_cells`` cells; per cell a quarter of the threads shared, the rest
    dedicated (sibling pairs on SMT models); the model's fractions of each cell's
    memory in 2 MiB and 1 GiB pages, the rest in 4 KiB pages."""
    n = model.numa_cells
    per_cell, cell_mb = vcpus // n, memory_mb // n
    cells = []
    for cid in range(n):
        first = cid * per_cell
        n_shared = per_cell // 4
        shared = list(range(first, first + n_shared))
        dedicated = list(range(first + n_shared, first + per_cell))
        huge_2m = int(cell_mb * model.pages_2m_frac) // 2
        huge_1g = int(cell_mb * model.pages_1g_frac) // 1024
        small = (cell_mb - huge_2m * 2 - huge_1g * 1024) * 256
        pages = [{"size_kb": 4, "total": small, "used": 0, "reserved": 0}]
        if huge_2m:
            pages.append({"size_kb": 2048, "total": huge_2m, "used": 0, "reserved": 0})
        if huge_1g:
            pages.append({"size_kb": 1048576, "total": huge_1g, "used": 0, "reserved": 0})
        cells.append({
            "id": cid, "socket": cid, "cpuset": shared, "pcpuset": dedicated,
            "siblings": [dedicated[i:i + 2] for i in range(0, len(dedicated), 2)]
            if model.smt else [],
            "memory_mb": cell_mb, "mempages": pages,
            "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": []})
    return {"cells": cells}


def _pci_devices(model: Model) -> list[dict[str, Any]]:
    """The model's devices (without node id): per cell one PF with VFs on the cell's
    physnet, and/or GPUs split over the cells."""
    rows = []
    if model.nics:
        for cell, bus in enumerate(("3b", "86")):
            pf = f"0000:{bus}:00.0"
            rows.append({"address": pf, "vendor_id": VENDOR, "product_id": PF_PRODUCT,
                         "dev_type": "type-PF", "parent_addr": None, "numa_node": cell,
                         "physical_network": PHYSNETS[cell]})
            rows.extend({"address": f"0000:{bus}:{2 + vf // 8:02x}.{vf % 8}",
                         "vendor_id": VENDOR, "product_id": VF_PRODUCT,
                         "dev_type": "type-VF", "parent_addr": pf, "numa_node": cell,
                         "physical_network": PHYSNETS[cell]} for vf in range(VFS_PER_PF))
    for g in range(model.gpus):
        rows.append({"address": f"0000:{0x17 + g:02x}:00.0", "vendor_id": GPU_VENDOR,
                     "product_id": GPU_PRODUCT, "dev_type": "type-PCI", "parent_addr": None,
                     "numa_node": g * model.numa_cells // model.gpus,
                     "physical_network": None})
    return rows


@dataclasses.dataclass(frozen=True)
class _Pinned:
    """The result of placing a sequence of existing pinned flavors on a fresh host."""

    topology_json: str
    # (index into EXISTING_PINNED, fitted JSON, what it holds by class)
    fitted: tuple[tuple[int, str, tuple[tuple[str, int], ...]], ...]
    device_plan: tuple[tuple[tuple[str, ...], dict], ...]   # (addresses, claim plan)


class _Shapes:
    """Per-model caches: fresh topologies, pinned-usage patterns and claim plans,
    all computed with Berth's public numa/ and pci/ functions."""

    def __init__(self) -> None:
        self._topo: dict[tuple, dict] = {}
        self._topo_json: dict[tuple, str] = {}
        self._pinned: dict[tuple, _Pinned | None] = {}
        self._devices: dict[str, list[dict]] = {}

    def topology(self, model: Model, vcpus: int, memory_mb: int) -> dict:
        key = (model.name, vcpus, memory_mb)
        if key not in self._topo:
            self._topo[key] = host_topology(model, vcpus, memory_mb)
            self._topo_json[key] = json.dumps(self._topo[key], sort_keys=True)
        return self._topo[key]

    def topology_json(self, model: Model, vcpus: int, memory_mb: int) -> str:
        self.topology(model, vcpus, memory_mb)
        return self._topo_json[(model.name, vcpus, memory_mb)]

    def devices(self, model: Model) -> list[dict]:
        if model.name not in self._devices:
            self._devices[model.name] = _pci_devices(model)
        return self._devices[model.name]

    def pinned(self, model: Model, vcpus: int, memory_mb: int,
               pattern: tuple[int, ...]) -> _Pinned | None:
        """Place ``EXISTING_PINNED[i]`` for i in ``pattern`` one after the other (each
        pinned instance of a NIC/GPU host also takes one VF/GPU on its cell); None if
        one does not fit."""
        key = (model.name, vcpus, memory_mb, pattern)
        if key in self._pinned:
            return self._pinned[key]
        host = HostTopology.from_primitive(self.topology(model, vcpus, memory_mb))
        devices = [pci_device.PciDevice(**{k: v for k, v in d.items()})
                   for d in self.devices(model)]
        fitted_out, plans = [], []
        result: _Pinned | None = None
        for index in pattern:
            v, m, _, specs = EXISTING_PINNED[index]
            guest = request.instance_topology_from_specs(v, m, specs, {})
            fit = fitting.fit_instance_to_host(host, guest)
            if fit.fitted is None:
                break
            host = usage.apply_usage(host, fit.fitted)
            fitted_out.append((index, json.dumps(fit.fitted.to_primitive(), sort_keys=True),
                               tuple(_amounts(v, m, EXISTING_PINNED[index][2],
                                              fit.fitted).items())))
            cell = fit.fitted.cells[0].host_cell_id
            want = "type-VF" if model.nics else ("type-PCI" if model.gpus else None)
            pick = next((d for d in devices if d.dev_type == want and d.numa_node == cell
                         and d.status == pci_device.AVAILABLE), None) if want else None
            if pick is not None:
                plan = pci_device.claim_plan(devices, [pick.address])
                devices = [dataclasses.replace(d, status=plan[d.address])
                           if d.address in plan else d for d in devices]
                plans.append(((pick.address,), plan))
            else:
                plans.append(((), {}))
        else:
            result = _Pinned(json.dumps(host.to_primitive(), sort_keys=True),
                             tuple(fitted_out), tuple(plans))
        self._pinned[key] = result
        return result


# -- generation -------------------------------------------------------------------------------

def _fill_target(rng: random.Random) -> float:
    """Fraction of the RAM limit already used: many empty hosts, a few nearly full."""
    r = rng.random()
    if r < 0.30:
        return 0.0
    if r < 0.80:
        return rng.uniform(0.0, 0.5)
    if r < 0.95:
        return rng.uniform(0.5, 0.9)
    return rng.uniform(0.95, 1.0)


def _amounts(vcpus: int, memory_mb: int, disk_mb: int, fitted=None) -> dict[str, int]:
    """What an instance holds by class, as a claim writes it: PCPU for every host
    CPU its fitted NUMA cells pin (dedicated vCPUs, an isolated emulator thread,
    siblings kept idle), VCPU for its other vCPUs, MEMORY_MB, and DISK_GB."""
    guest_pinned = host_pinned = 0
    if fitted is not None:
        guest_pinned = sum(len(cell.cpu_pinning) for cell in fitted.cells)
        host_pinned = sum(len(cell.host_cpus) for cell in fitted.cells)
    out = {VCPU: vcpus - guest_pinned, PCPU: host_pinned, MEMORY_MB: memory_mb,
           DISK_GB: inventory.disk_gb(disk_mb)}
    return {rc: n for rc, n in out.items() if n > 0}


_PLAIN = {f: _amounts(*f) for f in EXISTING_FLAVORS + (GROUP_FLAVOR,)}


class _Host:
    """A node being generated: its row, its root inventories and what its
    instances hold of each class."""

    __slots__ = ("node", "inventories", "used")

    def __init__(self, node: dict, inventories: dict[str, inventory.Inventory]) -> None:
        self.node = node
        self.inventories = inventories
        self.used = dict.fromkeys(inventories, 0)

    def room(self, amounts: dict[str, int]) -> bool:
        """Whether every class asked fits (``db.inventory``'s rule)."""
        invs, used = self.inventories, self.used
        return all(rc in invs and invs[rc].admits(used[rc], n) for rc, n in amounts.items())

    def capacity(self, rc: str) -> float:
        inv = self.inventories.get(rc)
        return inv.capacity if inv is not None else 0.0


def _pick_model(rng: random.Random) -> Model:
    r, acc = rng.random(), 0.0
    for m in MODELS:
        acc += m.share
        if r < acc:
            return m
    return MODELS[-1]


_CPU_INFO = {name: json.dumps({"arch": m.cpu_arch, "vendor": "Intel" if m.cpu_arch ==
                               "x86_64" else "ARM", "features": ["avx2", "sse4_2"]
                               if m.cpu_arch == "x86_64" else ["neon"]})
             for name, m in ((m.name, m) for m in MODELS)}
_SUPPORTED = {m.name: json.dumps(m.supported) for m in MODELS}


def _traits(model: Model, topology: dict | None) -> str:
    """A node's traits as the product derives them (CPU flags, SMT siblings)."""
    return " ".join(sorted(host_traits.derived(json.loads(_CPU_INFO[model.name]), topology)))


class _Rows:
    """The ledger rows of instances as they are placed: consumers (ids assigned)
    and their allocations against the node's root provider (same id as the node)."""

    def __init__(self) -> None:
        self.consumers: list[dict[str, Any]] = []
        self.allocations: list[dict[str, Any]] = []

    def add(self, host: _Host, inst: str, amounts: dict[str, int], numa_cells: str | None,
            pci_devices: str | None, group: str | None = None) -> None:
        node = host.node
        consumer_id = len(self.consumers) + 1
        node["running_vms"] += 1
        self.consumers.append({
            "id": consumer_id, "uuid": inst, "consumer_type": "instance", "instance_uuid": inst,
            "compute_node_id": node["id"], "numa_cells": numa_cells, "pci_devices": pci_devices,
            "project_id": "bench", "user_id": "bench",
            "instance_group": group_key("bench", group), "request_spec": None,
            "pending": False})
        for rc, n in amounts.items():
            host.used[rc] += n
            self.allocations.append({"consumer_id": consumer_id, "provider_id": node["id"],
                                     "resource_class": rc, "amount": n})


def generate_fleet(size: int, seed: int = 42) -> BenchFleet:
    """All rows of a ``size``-host fleet; deterministic for ``seed``."""
    rng = random.Random(seed)
    shapes = _Shapes()
    hosts: list[_Host] = []
    devices: list[dict[str, Any]] = []
    rows = _Rows()
    traits: dict[str, str] = {}
    host_model: dict[str, str] = {}
    members: dict[str, list[str]] = {name: [] for name in
                                     ("az1", "az2", "ssd", "highmem", "pinned", "sriov", "gpu",
                                      "windows", "legacy")}
    for i in range(size):
        model = _pick_model(rng)
        node_id = i + 1
        name = f"compute-{i:06d}"
        vcpus, memory_mb = rng.choice(model.vcpus), rng.choice(model.memory_gb) * 1024
        local_gb = rng.choice(model.disk_gb)
        cpu_ratio, ram_ratio = rng.choice(model.cpu_ratios), rng.choice(model.ram_ratios)
        node = {
            "id": node_id, "uuid": _uuid(rng), "host": name, "hypervisor_hostname": name,
            "running_vms": 0, "current_workload": 0, "failed_builds": 0,
            "hypervisor_type": "QEMU",
            "hypervisor_version": rng.choice(model.hypervisor_versions),
            "host_ip": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            "cpu_info": _CPU_INFO[model.name], "supported_instances": _SUPPORTED[model.name],
            "numa_topology": None, "stats": json.dumps({"model": model.name}),
            "metrics": "{}", "disabled": rng.random() < 0.01, "disabled_reason": None,
            "generation": 1, "deleted": 0,
        }
        if node["disabled"]:
            node["disabled_reason"] = "maintenance"
        topology = shapes.topology(model, vcpus, memory_mb) if model.numa_cells else None
        if model.name not in traits:
            traits[model.name] = _traits(model, topology)
        host = _Host(node, inventory.node_inventories(
            vcpus=vcpus, memory_mb=memory_mb, local_gb=local_gb,
            cpu_allocation_ratio=cpu_ratio, ram_allocation_ratio=ram_ratio,
            disk_allocation_ratio=1.0, reserved_host_memory_mb=4096,
            reserved_host_disk_mb=10240,
            dedicated_cpus=sum(len(c["pcpuset"]) for c in topology["cells"])
            if topology else 0))
        host_model[name] = model.name
        node_devices = [{**d, "compute_node_id": node_id, "status": "available",
                         "instance_uuid": None} for d in shapes.devices(model)]
        if model.numa_cells:
            node["numa_topology"] = shapes.topology_json(model, vcpus, memory_mb)
            if rng.random() < 0.4:
                pattern = tuple(rng.randrange(len(EXISTING_PINNED))
                                for _ in range(rng.randint(1, 3)))
                pinned = shapes.pinned(model, vcpus, memory_mb, pattern)
                if pinned is not None and host.room(_summed(
                        dict(held) for _i, _f, held in pinned.fitted)):
                    node["numa_topology"] = pinned.topology_json
                    by_addr = {d["address"]: d for d in node_devices}
                    for (_index, fitted, held), (addrs, plan) in zip(
                            pinned.fitted, pinned.device_plan, strict=True):
                        inst = _uuid(rng)
                        for addr, status in plan.items():
                            by_addr[addr]["status"] = status
                            if status == pci_device.CLAIMED:
                                by_addr[addr]["instance_uuid"] = inst
                        rows.add(host, inst, dict(held), fitted,
                                 json.dumps(list(addrs)) if addrs else None)
        target = _fill_target(rng) * host.capacity(MEMORY_MB)
        for _ in range(64):
            if host.used[MEMORY_MB] >= target:
                break
            flavor = _PLAIN[rng.choice(EXISTING_FLAVORS)]
            if not host.room(flavor):
                break
            rows.add(host, _uuid(rng), flavor, None, None)
        hosts.append(host)
        devices.extend(node_devices)
        members[AZS[(i // 64) % 2]].append(name)         # racks of 64 alternate zones
        if rng.random() < 0.3 and model.name not in ("old", "arm"):
            members["ssd"].append(name)
        if model.name == "bigmem":
            members["highmem"].append(name)
        if model.numa_cells:
            members["pinned"].append(name)
        if model.nics:
            members["sriov"].append(name)
        if model.gpus:
            members["gpu"].append(name)
        if model.name == "old":
            members["legacy"].append(name)
        if rng.random() < 0.05:
            members["windows"].append(name)

    groups, server_groups = _add_groups(rng, hosts, rows, size)
    providers, inventories = [], []
    for host in hosts:
        node = host.node
        providers.append({"id": node["id"], "uuid": node["uuid"],
                          "name": node["hypervisor_hostname"], "compute_node_id": node["id"],
                          "parent_id": None,
                          "traits": traits[host_model[node["host"]]]})
        inventories.extend({"provider_id": node["id"], "resource_class": rc,
                            **inv.to_primitive(), "used": host.used[rc]}
                           for rc, inv in host.inventories.items())
    metadata = {"az1": {"availability_zone": "az1"}, "az2": {"availability_zone": "az2"},
                "ssd": {"ssd": "true"}, "highmem": {"highmem": "true"},
                "pinned": {"pinned": "true"}, "sriov": {"sriov": "true"},
                "gpu": {"gpu": "true"}, "legacy": {"legacy": "true"},
                "windows": {"os_type": "windows", "cpu_allocation_ratio": "2.0"}}
    aggregates, agg_hosts, agg_meta = [], [], []
    for agg_id, (name, agg_members) in enumerate(members.items(), start=1):
        aggregates.append({"id": agg_id, "uuid": _uuid(rng), "name": name, "deleted": 0})
        agg_hosts.extend({"aggregate_id": agg_id, "host": h} for h in agg_members)
        agg_meta.extend({"aggregate_id": agg_id, "key": k, "value": v}
                        for k, v in metadata[name].items())
    return BenchFleet(size=size, seed=seed, nodes=[h.node for h in hosts],
                      pci_devices=devices, providers=providers, inventories=inventories,
                      consumers=rows.consumers, allocations=rows.allocations,
                      aggregates=aggregates, aggregate_hosts=agg_hosts,
                      aggregate_metadata=agg_meta, server_groups=server_groups,
                      groups=groups, models=host_model)


def _summed(amounts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for held in amounts:
        for rc, n in held.items():
            out[rc] = out.get(rc, 0) + n
    return out


def _add_groups(rng: random.Random, hosts: list[_Host], rows: _Rows, size: int
                ) -> tuple[dict[str, dict], list[dict]]:
    """Server groups of every policy with 2-4 members each, on enabled hosts with
    room: an affinity group's members on one host, an anti-affinity group's on
    distinct hosts (at most ``max_server_per_host`` per host when set)."""
    groups: dict[str, dict] = {}
    out = []
    per_policy = max(3, size // 400)
    enabled = [h for h in hosts if not h.node["disabled"]]
    flavor = _PLAIN[GROUP_FLAVOR]
    for policy in GROUP_POLICIES:
        for g in range(per_policy):
            uuid = _uuid(rng)
            max_per_host = 2 if policy == "anti-affinity" and g % 3 == 0 else None
            n_members = rng.randint(2, 4)
            if policy == "affinity":
                picked = [rng.choice(enabled)] * n_members
            elif policy == "anti-affinity":
                picks = rng.sample(enabled, n_members)
                picked = picks if max_per_host is None else (picks[:1] * 2 + picks[1:])[
                    :n_members]
            else:
                picked = [rng.choice(enabled) for _ in range(n_members)]
            member_uuids = []
            for host in picked:
                if not host.room(flavor):
                    continue
                inst = _uuid(rng)
                rows.add(host, inst, flavor, None, None, group=uuid)
                member_uuids.append(inst)
            groups[uuid] = {"policy": policy, "max_server_per_host": max_per_host,
                            "members": member_uuids}
            if policy in ("affinity", "anti-affinity"):
                out.append({"uuid": group_key("bench", uuid), "generation": 0})
    return groups, out


# -- loading ------------------------------------------------------------------------------

def _chunks(rows: list, size: int) -> Iterator[list]:
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def load_fleet(db: Database, fleet: BenchFleet, chunk: int = 10000) -> float:
    """Bulk-insert the fleet into a migrated, empty database; returns seconds taken.

    Node rows are stamped between an hour and 30 days in the past, spread out as in
    a live fleet (all at one instant, every refresh would re-read them all within
    its overlap window). Each host gets a ``services`` row with a heartbeat now.
    """
    t0 = time.perf_counter()
    now = models.utcnow()
    stamp = (now - datetime.timedelta(hours=1)).replace(microsecond=0)
    times = {"created_at": stamp, "updated_at": stamp}
    nodes = [{**n, "created_at": stamp - datetime.timedelta(days=30),
              "updated_at": stamp - datetime.timedelta(seconds=(n["id"] * 7919) % 2592000)}
             for n in fleet.nodes]
    services = [{"host": n["host"], "binary": COMPUTE_BINARY, "last_seen_up": now,
                 "report_count": 1, "disabled": False, "created_at": stamp,
                 "updated_at": now} for n in fleet.nodes]
    plan: list[tuple[sa.Table, list[dict], dict]] = [
        (_cn, nodes, {}),
        (_svc, services, {}),
        (_pci, fleet.pci_devices, times),
        (_rp, fleet.providers, {"created_at": stamp - datetime.timedelta(days=30),
                                "updated_at": stamp}),
        (_inv, fleet.inventories, {}),
        (_cons, fleet.consumers, {"created_at": stamp}),
        (_alloc, fleet.allocations, {}),
        (_agg, fleet.aggregates, times),
        (_agg_hosts, fleet.aggregate_hosts, {}),
        (_agg_meta, fleet.aggregate_metadata, {}),
        (_groups, fleet.server_groups, {}),
    ]
    with db.writer_connection() as conn:
        if db.dialect in ("mysql", "mariadb"):
            conn.exec_driver_sql("SET unique_checks = 0")
            conn.exec_driver_sql("SET foreign_key_checks = 0")
        for table, rows, extra in plan:
            for part in _chunks(rows, chunk):
                conn.execute(table.insert(), [{**r, **extra} for r in part] if extra else part)
        if db.dialect in ("mysql", "mariadb"):
            conn.exec_driver_sql("SET unique_checks = 1")
            conn.exec_driver_sql("SET foreign_key_checks = 1")
    return time.perf_counter() - t0


# -- throwaway databases ------------------------------------------------------------------

@dataclasses.dataclass
class BenchDatabase:
    """A migrated, throwaway database; ``drop()`` removes it."""

    backend: str
    url: str
    db: Database
    drop: Callable[[], None]


def create_database(backend: str, workdir: str | None = None) -> BenchDatabase:
    """A fresh migrated database: a SQLite file in ``workdir`` (a temp dir by default)
    or a uniquely named MariaDB database (``BERTH_BENCH_MYSQL_URL``)."""
    if backend == "sqlite":
        tmp = workdir or tempfile.mkdtemp(prefix="berth-bench-")
        path = os.path.join(tmp, f"bench-{uuidlib.uuid4().hex[:8]}.sqlite")
        url = f"sqlite:///{path}"
        db = Database(url)
        migration.db_sync(db)

        def drop() -> None:
            db.dispose()
            for suffix in ("", "-wal", "-shm", "-journal"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)

        return BenchDatabase(backend, url, db, drop)
    if backend != "mariadb":
        raise ValueError(f"unknown backend {backend!r}")
    name = "berth_bench_" + uuidlib.uuid4().hex[:12]
    admin = sa.create_engine(MYSQL_URL + "/")
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    url = f"{MYSQL_URL}/{name}?charset=utf8mb4"
    db = Database(url)
    migration.db_sync(db)

    def drop_mariadb() -> None:
        db.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()

    return BenchDatabase(backend, url, db, drop_mariadb)
