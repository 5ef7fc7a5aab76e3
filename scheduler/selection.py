"""Selection: one answer of ``select_destinations`` for one instance."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Selection:
    """A chosen host (or an alternate) for one instance, with what was claimed."""

    instance_uuid: str
    host: str
    node: str
    node_uuid: str
    weight: float
    allocation: Mapping[str, int]
    numa_cells: Any = None
    pci_devices: tuple[str, ...] = ()
    alternate: bool = False

    def to_primitive(self) -> dict:
        return {"instance_uuid": self.instance_uuid, "host": self.host, "node": self.node,
                "node_uuid": self.node_uuid, "weight": self.weight,
                "allocation": dict(self.allocation), "numa_cells": self.numa_cells,
                "pci_devices": list(self.pci_devices), "alternate": self.alternate}

    @classmethod
    def from_primitive(cls, data: Mapping) -> Selection:
        return cls(instance_uuid=data["instance_uuid"], host=data["host"], node=data["node"],
                   node_uuid=data["node_uuid"], weight=data["weight"],
                   allocation=dict(data["allocation"]), numa_cells=data.get("numa_cells"),
                   pci_devices=tuple(data.get("pci_devices") or ()),
                   alternate=bool(data.get("alternate")))
