"""Selection: one answer of ``select_destinations`` for one instance."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Selection:
    """A chosen host (or an alternate) for one instance, with what was claimed.

    ``resources``: {class: amount} the instance holds on the node (asks, for an
    alternate); ``allocations``: {provider uuid: {class: amount}} of the node's
    providers (empty for an alternate); ``allocation``: the same as vcpus (VCPU
    and PCPU), memory_mb and disk_mb (DISK_GB in MB), for callers of the API
    before resource classes."""

    instance_uuid: str
    host: str
    node: str
    node_uuid: str
    weight: float
    allocation: Mapping[str, int]
    numa_cells: Any = None
    pci_devices: tuple[str, ...] = ()
    alternate: bool = False
    resources: Mapping[str, int] = dataclasses.field(default_factory=dict)
    allocations: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    #: A move's id (``move_instance``): confirm or revert the move with it.
    migration_uuid: str | None = None
    #: The instances preempted to make room (API 1.3: ``allow_preemption``):
    #: {instance_uuid, host, node, priority, project_id}; the caller deletes
    #: them, then releases them.
    preempted: tuple = ()

    def to_primitive(self) -> dict:
        return {"instance_uuid": self.instance_uuid, "host": self.host, "node": self.node,
                "node_uuid": self.node_uuid, "weight": self.weight,
                "allocation": dict(self.allocation), "resources": dict(self.resources),
                "allocations": {p: dict(a) for p, a in self.allocations.items()},
                "numa_cells": self.numa_cells,
                "pci_devices": list(self.pci_devices), "alternate": self.alternate,
                **({"migration_uuid": self.migration_uuid} if self.migration_uuid else {}),
                **({"preempted": [dict(v) for v in self.preempted]} if self.preempted
                   else {})}

    @classmethod
    def from_primitive(cls, data: Mapping) -> Selection:
        return cls(instance_uuid=data["instance_uuid"], host=data["host"], node=data["node"],
                   node_uuid=data["node_uuid"], weight=data["weight"],
                   allocation=dict(data["allocation"]), numa_cells=data.get("numa_cells"),
                   pci_devices=tuple(data.get("pci_devices") or ()),
                   alternate=bool(data.get("alternate")),
                   resources=dict(data.get("resources") or {}),
                   allocations={p: dict(a) for p, a in (data.get("allocations") or {}).items()},
                   migration_uuid=data.get("migration_uuid"),
                   preempted=tuple(dict(v) for v in data.get("preempted") or ()))
