"""PCI devices of a compute node, and the parent/child (PF/VF) claim rules.

A device may carry ``tags``: short string key/value pairs an operator sets in
``[pci] device_spec`` (``trusted``, ``remote_managed``, any name of their own),
which request specs match (``pci.request``). They are kept as a sorted tuple of
pairs, stored as canonical JSON text (``tags_text``) so that pools can be a
``GROUP BY`` over them.

A physical function (``type-PF``) and its virtual functions (``type-VF``, linked
by ``parent_addr``) share hardware: a guest that owns the PF owns every VF, and a
PF cannot be handed out while one of its VFs is in a guest. The helpers here say
which statuses change when devices are claimed or released; the database layer
applies them in one transaction.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pci.errors import PciClaimConflict, PciError

TYPE_PCI = "type-PCI"
TYPE_PF = "type-PF"
TYPE_VF = "type-VF"
DEVICE_TYPES = (TYPE_PCI, TYPE_PF, TYPE_VF)
#: Highest NUMA node id a device may name (the CPU ids of a topology share the bound).
MAX_NUMA_NODE = 65535

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

Tags = tuple[tuple[str, str], ...]  # sorted (key, value) pairs
# A tag name: a short identifier. The whole set, as canonical JSON text, must fit
# the indexed ``pci_devices.tags`` column (``MAX_TAGS_TEXT`` characters).
_TAG_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
MAX_TAG_KEY_LEN = 64
MAX_TAG_VALUE_LEN = 255
MAX_TAGS_TEXT = 255
# Names that are device fields (or request spec keys for them), never tags.
RESERVED_TAG_KEYS = frozenset({"address", "vendor_id", "product_id", "dev_type",
                               "device_type", "parent_addr", "numa_node",
                               "physical_network", "status", "tags", "instance_uuid",
                               "request_id"})


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
    tags: Tags = ()

    @property
    def in_use(self) -> bool:
        """True when a guest holds the device (claimed or allocated)."""
        return self.status in IN_USE

    def hardware(self) -> tuple:
        """The fields the host reports (everything but the claim state)."""
        return (self.vendor_id, self.product_id, self.dev_type, self.parent_addr,
                self.numa_node, self.physical_network, self.tags)


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


def is_tag_key(key: Any) -> bool:
    """Whether ``key`` may name a tag (a short identifier that is no device field)."""
    return isinstance(key, str) and _TAG_KEY_RE.match(key) is not None \
        and key not in RESERVED_TAG_KEYS


def normalize_tag_key(key: Any, field: str) -> str:
    if not is_tag_key(key):
        if isinstance(key, str) and key in RESERVED_TAG_KEYS:
            raise PciError(field, f"{key!r} is a device field, not a tag")
        raise PciError(field, f"expected a tag name of 1 to {MAX_TAG_KEY_LEN} letters, "
                              f"digits or '_.:-' (starting with a letter or digit), "
                              f"got {key!r}")
    return key


def normalize_tag_value(value: Any, field: str) -> str:
    """A tag value as text: a string (``true``/``false`` for booleans, numbers as
    written) of 1 to ``MAX_TAG_VALUE_LEN`` printable characters."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        value = str(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TAG_VALUE_LEN \
            or not value.isprintable():
        raise PciError(field, f"expected a tag value: a non-empty string of at most "
                              f"{MAX_TAG_VALUE_LEN} printable characters, got {value!r}")
    return value


def tags_text(tags: Tags) -> str | None:
    """The stored form: canonical JSON (sorted keys, no spaces), None when untagged."""
    if not tags:
        return None
    return json.dumps(dict(tags), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=4096)
def tags_from_text(text: str | None) -> Tags:
    """Tags back from their stored form (a device row, a pool row)."""
    if not text:
        return ()
    return tuple(sorted(json.loads(text).items()))


def normalize_tags(value: Any, field: str) -> Tags:
    """A tag mapping checked (errors name ``{field}.{key}``) as sorted pairs."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise PciError(field, f"expected a mapping of tag name to value, "
                              f"got {type(value).__name__}")
    tags = tuple(sorted((normalize_tag_key(k, f"{field}.{k}"),
                         normalize_tag_value(v, f"{field}.{k}")) for k, v in value.items()))
    text = tags_text(tags)
    if text is not None and len(text) > MAX_TAGS_TEXT:
        raise PciError(field, f"tags take {len(text)} characters as JSON; at most "
                              f"{MAX_TAGS_TEXT}")
    return tags


_DEVICE_FIELDS = ("address", "vendor_id", "product_id", "dev_type", "parent_addr",
                  "numa_node", "physical_network", "status", "tags")


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
    if numa_node is not None and (type(numa_node) is not int
                                  or not 0 <= numa_node <= MAX_NUMA_NODE):
        shown = numa_node if type(numa_node) is not int or numa_node < 2 ** 64 \
            else f"an integer of {numa_node.bit_length()} bits"
        raise PciError(f"{field_prefix}.numa_node",
                       f"expected a NUMA node id (integer >= 0 and <= {MAX_NUMA_NODE}), "
                       f"got {shown!r}")
    physical_network = normalize_physical_network(data.get("physical_network"),
                                                  f"{field_prefix}.physical_network")
    status = data.get("status", AVAILABLE)
    if status not in REPORTABLE_STATUSES:
        raise PciError(f"{field_prefix}.status",
                       f"expected one of {', '.join(REPORTABLE_STATUSES)}, got {status!r}")
    tags = normalize_tags(data.get("tags"), f"{field_prefix}.tags")
    return PciDevice(address=address, vendor_id=vendor_id, product_id=product_id,
                     dev_type=dev_type, parent_addr=parent_addr, numa_node=numa_node,
                     physical_network=physical_network, status=status, tags=tags)


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
