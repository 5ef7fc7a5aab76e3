"""The records a fleet file or a host's report becomes: plain values that the
scheduler validates (``scheduler.fleet``) and the database layer writes
(``db.hosts``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from db.inventory import Inventory
from pci import device as pci_device

# The NUMA cell keys of the fleet format; anything else stored in a cell is usage.
NUMA_CELL_LAYOUT_KEYS = frozenset(
    {"id", "socket", "cpuset", "pcpuset", "siblings", "memory_mb", "mempages"})
# The page keys of the fleet format: ``reserved`` pages are the host's (e.g.
# ``[compute] reserved_huge_pages``), reported like the total; ``used`` is usage.
MEMPAGE_LAYOUT_KEYS = frozenset({"size_kb", "total", "reserved"})


@dataclasses.dataclass(frozen=True)
class ProviderRecord:
    """A child provider of a node (a physical GPU, an SR-IOV PF, ...)."""

    name: str
    traits: frozenset[str] = frozenset()
    inventories: Mapping[str, Inventory] = dataclasses.field(default_factory=dict)
    parent: str | None = None           # another child's name; None: the node's root
    uuid: str | None = None             # None: generated on first write, then kept


@dataclasses.dataclass(frozen=True)
class HostRecord:
    """One compute node as the fleet file (or a host's report) describes it."""

    host: str
    node: str
    vcpus: int
    memory_mb: int
    local_gb: int
    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    disk_allocation_ratio: float
    reserved_host_memory_mb: int = 0
    reserved_host_disk_mb: int = 0
    reserved_host_cpus: int = 0
    hypervisor_type: str | None = None
    hypervisor_version: int | None = None
    host_ip: str | None = None
    cpu_info: dict | None = None
    supported_instances: list | None = None
    stats: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    disabled: bool = False
    disabled_reason: str | None = None
    # The normalised topology primitive ({"cells": [...]}); None: no NUMA.
    numa_topology: dict | None = None
    # None means "not reported": an upsert leaves the node's devices alone.
    pci_devices: list[pci_device.PciDevice] | None = None
    # The ledger: the root provider's inventories (the fields above as classes,
    # with the fleet entry's ``inventories:`` over them) and traits, and the
    # node's child providers. Built by ``scheduler.fleet``.
    inventories: Mapping[str, Inventory] = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    providers: tuple[ProviderRecord, ...] = ()


@dataclasses.dataclass(frozen=True)
class AggregateRecord:
    name: str
    availability_zone: str | None = None
    hosts: tuple[str, ...] = ()
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Fleet:
    hosts: tuple[HostRecord, ...] = ()
    aggregates: tuple[AggregateRecord, ...] = ()
