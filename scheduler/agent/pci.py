"""Passthrough PCI devices: ``[pci] device_spec`` and ``/sys/bus/pci/devices``.

A device is reported when a device spec matches it (vendor and product ids and
the address are globs). Its type comes from the kernel: a ``physfn`` link makes
it a VF of that PF, a non-zero ``sriov_totalvfs`` makes it a PF, anything else
is ``type-PCI``. A VF is only meaningful with its PF, so a PF that no spec
matches but that has matched VFs is reported too, as ``unavailable``: the
relation is known to Berth, the PF itself is never handed out.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from typing import Any

from oslo_config import cfg

from pci.device import (
    TYPE_PCI,
    TYPE_PF,
    TYPE_VF,
    UNAVAILABLE,
    normalize_physical_network,
    normalize_tags,
)
from pci.errors import PciError
from scheduler import exception
from scheduler.agent.kernel import KernelTree

pci_agent_opts = [
    cfg.MultiStrOpt("device_spec", default=[],
                    help="Which host PCI devices berth-agent reports for passthrough, as "
                         "JSON: an object or a list of objects with vendor_id, product_id "
                         "and address (globs, e.g. \"0000:81:02.?\"), physical_network, and "
                         "any other key as a string tag, e.g. {\"vendor_id\": \"8086\", "
                         "\"product_id\": \"154c\", \"physical_network\": \"physnet1\", "
                         "\"trusted\": \"true\"}. Tags are reported with the device and "
                         "matched by PCI alias and request spec keys of the same name. "
                         "Repeat the option for several specs; the first that matches a "
                         "device wins. Devices no spec matches are not reported."),
]

cfg.CONF.register_opts(pci_agent_opts, group="pci")

LIST_OPTS = [("pci", pci_agent_opts)]

_HEX_GLOB = re.compile(r"^[0-9a-f*?]{1,4}$")
_ADDRESS_GLOB = re.compile(r"^[0-9a-f*?\[\]:.-]{1,32}$")
_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_MATCH_KEYS = ("vendor_id", "product_id", "address")


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One ``[pci] device_spec`` entry."""

    vendor_id: str = "*"
    product_id: str = "*"
    address: str = "*"
    physical_network: str | None = None
    tags: tuple[tuple[str, str], ...] = ()

    def matches(self, address: str, vendor_id: str, product_id: str) -> bool:
        return (fnmatch.fnmatchcase(vendor_id, self.vendor_id)
                and fnmatch.fnmatchcase(product_id, self.product_id)
                and fnmatch.fnmatchcase(address, self.address))


def _spec(data: Any, field: str) -> DeviceSpec:
    if not isinstance(data, dict) or not data:
        raise exception.InvalidRequest(field=field, reason="expected a non-empty JSON object")
    values: dict[str, Any] = {}
    tags = {}
    for key, value in data.items():
        where = f"{field}.{key}"
        if key in ("vendor_id", "product_id"):
            if not isinstance(value, str) or not _HEX_GLOB.match(value.lower()):
                raise exception.InvalidRequest(
                    field=where, reason=f"expected four hex digits or a glob, got {value!r}")
            values[key] = value.lower()
        elif key == "address":
            if not isinstance(value, str) or not _ADDRESS_GLOB.match(value.lower()):
                raise exception.InvalidRequest(
                    field=where,
                    reason=f"expected a PCI address or glob like 0000:81:*, got {value!r}")
            values[key] = value.lower()
        elif key == "physical_network":
            try:
                values[key] = normalize_physical_network(value, where)
            except PciError as e:
                raise exception.InvalidRequest(field=e.field, reason=e.reason) from None
        else:
            tags[key] = value
    try:
        return DeviceSpec(**values, tags=normalize_tags(tags, field))
    except PciError as e:
        raise exception.InvalidRequest(field=e.field, reason=e.reason) from None


def parse_device_specs(values: list[str], field: str = "pci.device_spec") -> list[DeviceSpec]:
    """The specs of ``[pci] device_spec``; ``InvalidRequest`` names the bad entry."""
    specs: list[DeviceSpec] = []
    for i, text in enumerate(values):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise exception.InvalidRequest(field=f"{field}[{i}]",
                                           reason=f"not valid JSON: {e}") from None
        items = data if isinstance(data, list) else [data]
        for j, item in enumerate(items):
            specs.append(_spec(item, f"{field}[{i}]" + (f"[{j}]" if isinstance(data, list)
                                                         else "")))
    return specs


@dataclasses.dataclass(frozen=True)
class PciFact:
    """One host device as the kernel shows it, and what the agent makes of it."""

    address: str
    vendor_id: str
    product_id: str
    class_code: str
    numa_node: int | None
    dev_type: str
    parent_addr: str | None = None
    total_vfs: int = 0
    vfs: tuple[str, ...] = ()
    physical_network: str | None = None
    tags: tuple[tuple[str, str], ...] = ()
    status: str = "available"

    def to_report(self) -> dict:
        """The device in the report format (``pci.device.validate_device``)."""
        out = {"address": self.address, "vendor_id": self.vendor_id,
               "product_id": self.product_id, "dev_type": self.dev_type,
               "parent_addr": self.parent_addr, "numa_node": self.numa_node,
               "physical_network": self.physical_network}
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.status != "available":
            out["status"] = self.status
        return out


def _hex(tree: KernelTree, path: str, digits: int) -> str | None:
    text = tree.read(path)
    if not text:
        return None
    return text.lower().removeprefix("0x").zfill(digits)[-digits:]


def scan_devices(tree: KernelTree) -> list[PciFact]:
    """Every PCI function of the host, typed (PF, VF or plain PCI)."""
    base = tree.sys("bus", "pci", "devices")
    facts = []
    for address in tree.listdir(base):
        if not _ADDRESS.match(address):
            continue
        path = f"{base}/{address}"
        vendor = _hex(tree, f"{path}/vendor", 4)
        product = _hex(tree, f"{path}/device", 4)
        if vendor is None or product is None:
            continue
        numa = tree.read_int(f"{path}/numa_node")
        parent = tree.link_name(f"{path}/physfn")
        total_vfs = tree.read_int(f"{path}/sriov_totalvfs") or 0
        vfs = tuple(sorted(
            name for name in (tree.link_name(f"{path}/{entry}")
                              for entry in tree.listdir(path) if entry.startswith("virtfn"))
            if name))
        dev_type = TYPE_VF if parent else TYPE_PF if total_vfs > 0 else TYPE_PCI
        facts.append(PciFact(address=address, vendor_id=vendor, product_id=product,
                             class_code=_hex(tree, f"{path}/class", 6) or "",
                             numa_node=numa if numa is not None and numa >= 0 else None,
                             dev_type=dev_type, parent_addr=parent, total_vfs=total_vfs,
                             vfs=vfs))
    return facts


def passthrough_devices(facts: list[PciFact], specs: list[DeviceSpec]
                        ) -> tuple[list[PciFact], list[str]]:
    """The devices to report (by address) and warnings for the operator."""
    by_addr = {f.address: f for f in facts}
    chosen: dict[str, PciFact] = {}
    warnings: list[str] = []
    for fact in facts:
        spec = next((s for s in specs
                     if s.matches(fact.address, fact.vendor_id, fact.product_id)), None)
        if spec is not None:
            chosen[fact.address] = dataclasses.replace(
                fact, physical_network=spec.physical_network, tags=spec.tags)
    for fact in list(chosen.values()):
        if fact.dev_type != TYPE_VF or fact.parent_addr in chosen:
            continue
        parent = by_addr.get(fact.parent_addr)
        if parent is None:
            warnings.append(f"VF {fact.address}: its PF {fact.parent_addr} is not on the "
                            f"PCI bus; not reported")
            del chosen[fact.address]
            continue
        chosen[parent.address] = dataclasses.replace(parent, status=UNAVAILABLE)
    return [chosen[a] for a in sorted(chosen)], warnings
