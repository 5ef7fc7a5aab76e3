"""PCI devices of a compute node, and the parent/child (PF/VF) claim rules.

A physical function (``type-PF``) and its virtual functions (``type-VF``, linked
by ``parent_addr``) share hardware: a guest that owns the PF owns every VF, and a
PF cannot be handed out while one of its VFs is in a guest. The helpers here say
which statuses change when devices are claimed or released; the database layer
applies them in one transaction.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pci.errors import PciClaimConflict, PciError

TYPE_PCI = "type-PCI"
TYPE_PF = "type-PF"
TYPE_VF = "type-VF"
DEVICE_TYPES = (TYPE_PCI, TYPE_PF, TYPE_VF)

AVAILABLE = "available"
CLAIMED = "claimed"
ALLOCATED = "allocated"
UNCLAIMABLE = "unclaimable"  # free, but a parent or child is in a guest
UNAVAILABLE = "unavailable"  # the host says it cannot be used
REMOVED = "removed"  # no longer reported by the host
STATUSES = (AVAILABLE, CLAIMED, ALLOCATED, UNCLAIMABLE, UNAVAILABLE, REMOVED)
IN_USE = frozenset((CLAIMED, ALLOCATED))
# Statuses a host may report for a device; the others are Berth's own.
REPORTABLE_STATUSES = (AVAILABLE, UNAVAILABLE)

_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")
_HEX_ID_RE = re.compile(r"^[0-9a-f]{4}$")
MAX_PHYSNET_LEN = 255


@dataclasses.dataclass(frozen=True)
class PciDevice:
    """One device row: identity, type, NUMA placement and claim state."""

    address: str
    vendor_id: str
    product_id: str
    dev_type: str = TYPE_PCI
    parent_addr: str | None = None
    numa_node: int | None = None
    physical_network: str | None = None
    status: str = AVAILABLE
    instance_uuid: str | None = None
    request_id: str | None = None

    @property
    def in_use(self) -> bool:
        """True when a guest holds the device (claimed or allocated)."""
        return self.status in IN_USE

    def hardware(self) -> tuple:
        """The fields the host reports (everything but the claim state)."""
        return (self.vendor_id, self.product_id, self.dev_type, self.parent_addr,
                self.numa_node, self.physical_network)


def normalize_address(value: Any, field: str) -> str:
    """A PCI address ``DDDD:BB:SS.F`` in lower case, or ``PciError``."""
    if not isinstance(value, str) or not _ADDRESS_RE.match(value.strip().lower()):
        raise PciError(field, f"expected a PCI address like 0000:81:00.1, got {value!r}")
    return value.strip().lower()


def normalize_hex_id(value: Any, field: str) -> str:
    """A vendor or product id: four hex digits, lower case, or ``PciError``."""
    if not isinstance(value, str) or not _HEX_ID_RE.match(value.strip().lower()):
        raise PciError(field, f"expected four hex digits like '8086', got {value!r}")
    return value.strip().lower()


def normalize_dev_type(value: Any, field: str) -> str:
    if value not in DEVICE_TYPES:
        raise PciError(field, f"expected one of {', '.join(DEVICE_TYPES)}, got {value!r}")
    return value


def normalize_physical_network(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PHYSNET_LEN:
        raise PciError(field, f"expected a non-empty name of at most {MAX_PHYSNET_LEN} "
                              f"characters, got {value!r}")
    return value


_DEVICE_FIELDS = ("address", "vendor_id", "product_id", "dev_type", "parent_addr",
                  "numa_node", "physical_network", "status")


def validate_device(data: Mapping[str, Any], field_prefix: str) -> PciDevice:
    """Check one device description (fleet file, host report) and build the device.

    Errors name the field as ``{field_prefix}.{key}``. Only ``available`` and
    ``unavailable`` may be given as status; claims are Berth's own business.
    """
    if not isinstance(data, Mapping):
        raise PciError(field_prefix, f"expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_DEVICE_FIELDS))
    if unknown:
        raise PciError(f"{field_prefix}.{unknown[0]}",
                       f"unknown key; expected one of {', '.join(_DEVICE_FIELDS)}")
    for key in ("address", "vendor_id", "product_id"):
        if key not in data:
            raise PciError(f"{field_prefix}.{key}", "required")
    address = normalize_address(data["address"], f"{field_prefix}.address")
    vendor_id = normalize_hex_id(data["vendor_id"], f"{field_prefix}.vendor_id")
    product_id = normalize_hex_id(data["product_id"], f"{field_prefix}.product_id")
    dev_type = normalize_dev_type(data.get("dev_type", TYPE_PCI), f"{field_prefix}.dev_type")

    parent_addr = data.get("parent_addr")
    if dev_type == TYPE_VF:
        if parent_addr is None:
            raise PciError(f"{field_prefix}.parent_addr",
                           "required for a type-VF device (the address of its PF)")
        parent_addr = normalize_address(parent_addr, f"{field_prefix}.parent_addr")
        if parent_addr == address:
            raise PciError(f"{field_prefix}.parent_addr", "a VF cannot be its own parent")
    elif parent_addr is not None:
        raise PciError(f"{field_prefix}.parent_addr", "only a type-VF device has a parent")

    numa_node = data.get("numa_node")
    if numa_node is not None and (type(numa_node) is not int or numa_node < 0):
        raise PciError(f"{field_prefix}.numa_node",
                       f"expected a NUMA node id (integer >= 0), got {numa_node!r}")
    physical_network = normalize_physical_network(data.get("physical_network"),
                                                  f"{field_prefix}.physical_network")
    status = data.get("status", AVAILABLE)
    if status not in REPORTABLE_STATUSES:
        raise PciError(f"{field_prefix}.status",
                       f"expected one of {', '.join(REPORTABLE_STATUSES)}, got {status!r}")
    return PciDevice(address=address, vendor_id=vendor_id, product_id=product_id,
                     dev_type=dev_type, parent_addr=parent_addr, numa_node=numa_node,
                     physical_network=physical_network, status=status)


def _children(devices: Iterable[PciDevice]) -> dict[str, list[PciDevice]]:
    """VFs by the address of their parent PF."""
    children: dict[str, list[PciDevice]] = {}
    for dev in devices:
        if dev.parent_addr is not None:
            children.setdefault(dev.parent_addr, []).append(dev)
    return children


def claim_plan(devices_of_node: Iterable[PciDevice],
               chosen_addresses: Iterable[str]) -> dict[str, str]:
    """Status changes for claiming ``chosen_addresses`` on one node.

    Chosen devices become ``claimed``. A claimed PF makes its free VFs
    ``unclaimable``; a claimed VF makes its free parent PF ``unclaimable``.
    Raises ``PciClaimConflict`` if a chosen device is not available or a chosen
    PF has a VF in use (or chosen in the same claim).
    """
    devices = list(devices_of_node)
    by_addr = {d.address: d for d in devices}
    children = _children(devices)
    chosen = list(dict.fromkeys(chosen_addresses))
    chosen_set = set(chosen)
    plan: dict[str, str] = {}
    for addr in chosen:
        dev = by_addr.get(addr)
        if dev is None or dev.status != AVAILABLE:
            state = "unknown" if dev is None else dev.status
            raise PciClaimConflict(f"device {addr} is {state}, not available", (addr,))
        plan[addr] = CLAIMED
    for addr in chosen:
        dev = by_addr[addr]
        if dev.dev_type == TYPE_PF:
            for vf in children.get(addr, ()):
                if vf.in_use or vf.address in chosen_set:
                    raise PciClaimConflict(
                        f"PF {addr} has VF {vf.address} in use", (addr, vf.address))
                if vf.status == AVAILABLE:
                    plan[vf.address] = UNCLAIMABLE
        elif dev.parent_addr is not None:
            parent = by_addr.get(dev.parent_addr)
            if parent is not None and parent.address not in chosen_set \
                    and parent.status == AVAILABLE:
                plan[parent.address] = UNCLAIMABLE
    return plan


def release_plan(devices_of_node: Iterable[PciDevice], instance_uuid: str) -> dict[str, str]:
    """Status changes for freeing the devices ``instance_uuid`` holds on one node.

    Its devices become ``available``; a PF or VF made ``unclaimable`` by them
    becomes ``available`` again once no relative is still in use.
    """
    devices = list(devices_of_node)
    by_addr = {d.address: d for d in devices}
    children = _children(devices)
    released = {d.address for d in devices
                if d.instance_uuid == instance_uuid and d.status in IN_USE}
    plan = {addr: AVAILABLE for addr in sorted(released)}

    def still_used(dev: PciDevice) -> bool:
        return dev.in_use and dev.address not in released

    for addr in sorted(released):
        dev = by_addr[addr]
        if dev.dev_type == TYPE_PF:
            for vf in children.get(addr, ()):
                if vf.status == UNCLAIMABLE:
                    plan[vf.address] = AVAILABLE
        elif dev.parent_addr is not None:
            parent = by_addr.get(dev.parent_addr)
            if parent is not None and parent.status == UNCLAIMABLE and not any(
                    still_used(vf) for vf in children.get(parent.address, ())):
                plan[parent.address] = AVAILABLE
    return plan


def cascade_status(devices: Iterable[PciDevice]) -> dict[str, str]:
    """Statuses that restore the PF/VF rule on a node's device list.

    A free device (``available`` or ``unclaimable``) is ``unclaimable`` exactly
    when its parent or one of its children is in use. Returns only the devices
    whose status must change; used when a host report adds or moves devices.
    """
    devices = list(devices)
    by_addr = {d.address: d for d in devices}
    children = _children(devices)
    changes: dict[str, str] = {}
    for dev in devices:
        if dev.status not in (AVAILABLE, UNCLAIMABLE):
            continue
        parent = by_addr.get(dev.parent_addr) if dev.parent_addr else None
        blocked = (parent is not None and parent.in_use) or any(
            vf.in_use for vf in children.get(dev.address, ()))
        want = UNCLAIMABLE if blocked else AVAILABLE
        if want != dev.status:
            changes[dev.address] = want
    return changes
