"""vGPUs from the mdev bus: one child provider per physical GPU.

The kernel lists every device that can be split into mediated devices (mdevs)
under ``/sys/class/mdev_bus/<PCI address>``. Each type the device can create
is a directory ``mdev_supported_types/<type>/`` holding ``name`` (e.g. ``GRID
T4-2B``), ``available_instances`` (how many more it can create now),
``device_api`` (``vfio-pci`` for a GPU) and ``devices/`` (one entry per mdev
of that type already created on that device).

A GPU exposes one vGPU type, chosen by the operator (``[agent]
enabled_vgpu_types`` and ``[vgpu_<type>] device_addresses``, see
:func:`choose_types`). It is reported as a child provider of the node, named
``<node>_pci_<address>`` with ``:`` and ``.`` as ``_`` (as Nova names it),
holding a ``VGPU`` inventory of ``available_instances`` plus the mdevs already
created of that type on it (those hold guests, so they are capacity in use),
and the traits ``CUSTOM_VGPU_<TYPE>`` (the type's name in upper case, other
characters as ``_``) and ``[vgpu_<type>] traits``.
"""
from __future__ import annotations

import dataclasses
import re
import uuid as uuidlib
from collections.abc import Sequence

from oslo_config import cfg

from db import inventory
from scheduler import exception
from scheduler.agent.kernel import KernelTree

VGPU = "VGPU"
GROUP_PREFIX = "vgpu_"

vgpu_opts = [
    cfg.ListOpt("enabled_vgpu_types", default=[],
                help="The vGPU (mdev) types berth-agent reports, as the kernel names them "
                     "under /sys/class/mdev_bus/<GPU>/mdev_supported_types (e.g. nvidia-35, "
                     "i915-GVTg_V5_4), in order of preference. Each GPU on the mdev bus "
                     "exposes one type and becomes a child provider "
                     "<node>_pci_<address> with a VGPU inventory and the trait "
                     "CUSTOM_VGPU_<TYPE>. A section [vgpu_<type>] per type may set "
                     "'device_addresses' (the PCI addresses of the GPUs that expose "
                     "this type; an address may be listed under one type only) and "
                     "'traits' (more traits for those GPUs). A GPU listed by a type "
                     "exposes that type; any other GPU exposes the first type of this "
                     "list that it supports among those that list no device_addresses; "
                     "a GPU left with no type is not reported. Empty: no vGPUs."),
]

vgpu_type_opts = [
    cfg.ListOpt("device_addresses", default=[],
                help="PCI addresses of the GPUs that expose this vGPU type, e.g. "
                     "0000:84:00.0,0000:85:00.0. Unset: every GPU that supports the type "
                     "and that no other type lists (first type of enabled_vgpu_types "
                     "first)."),
    cfg.ListOpt("traits", default=[],
                help="Traits the GPUs exposing this type get besides CUSTOM_VGPU_<TYPE> "
                     "(standard trait names, or custom ones such as CUSTOM_FAST)."),
]

cfg.CONF.register_opts(vgpu_opts, group="agent")

LIST_OPTS = [("agent", vgpu_opts)]

_TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_MDEV_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: Child provider uuids are derived from their names in this namespace, so a
#: GPU keeps its uuid across reports, restarts and databases.
PROVIDER_NAMESPACE = uuidlib.UUID("0b6f5f3e-8a43-4c36-9d1a-6f2a8c0e5b17")


# -- what the kernel has ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MdevType:
    """One type a device can create mdevs of."""

    type: str
    name: str | None               # the driver's readable name, e.g. "GRID T4-2B"
    available: int                 # more it can create now
    device_api: str | None
    created: tuple[str, ...] = ()  # uuids of the mdevs of this type it holds

    @property
    def total(self) -> int:
        return self.available + len(self.created)


@dataclasses.dataclass(frozen=True)
class MdevParent:
    """A device on the mdev bus (a physical GPU, or a GPU's SR-IOV VF) and its types."""

    address: str
    types: tuple[MdevType, ...]

    def type(self, name: str) -> MdevType | None:
        return next((t for t in self.types if t.type == name), None)


def scan_mdev_bus(tree: KernelTree) -> tuple[MdevParent, ...]:
    """Every device of ``/sys/class/mdev_bus`` with the types it supports, by address."""
    bus = tree.sys("class", "mdev_bus")
    parents = []
    for address in tree.listdir(bus):
        if not _ADDRESS.match(address):
            continue
        types_dir = f"{bus}/{address}/mdev_supported_types"
        types = []
        for name in tree.listdir(types_dir):
            path = f"{types_dir}/{name}"
            created = tuple(e for e in tree.listdir(f"{path}/devices") if _MDEV_UUID.match(e))
            types.append(MdevType(type=name, name=tree.read(f"{path}/name") or None,
                                  available=max(0, tree.read_int(
                                      f"{path}/available_instances") or 0),
                                  device_api=tree.read(f"{path}/device_api") or None,
                                  created=created))
        parents.append(MdevParent(address=address, types=tuple(types)))
    return tuple(parents)


# -- what the operator enables ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class VgpuType:
    """One entry of ``[agent] enabled_vgpu_types`` with its ``[vgpu_<type>]`` section."""

    type: str
    addresses: tuple[str, ...] = ()    # empty: any GPU that supports it and no type lists
    traits: frozenset[str] = frozenset()

    @property
    def trait(self) -> str:
        return type_trait(self.type)


def type_trait(mdev_type: str) -> str:
    """``nvidia-35`` -> ``CUSTOM_VGPU_NVIDIA_35``."""
    return "CUSTOM_VGPU_" + re.sub(r"[^A-Z0-9]", "_", mdev_type.upper())


def provider_name(node: str, address: str) -> str:
    """The child provider of the GPU at ``address``: ``<node>_pci_0000_3b_00_0``."""
    return f"{node}_pci_{address.replace(':', '_').replace('.', '_')}"


def provider_uuid(name: str) -> str:
    return str(uuidlib.uuid5(PROVIDER_NAMESPACE, name))


def _invalid(field: str, reason: str) -> exception.InvalidRequest:
    return exception.InvalidRequest(field=field, reason=reason)


def vgpu_types_from_conf(conf: cfg.ConfigOpts) -> tuple[VgpuType, ...]:
    """``[agent] enabled_vgpu_types`` and their ``[vgpu_<type>]`` sections, checked
    (registers those sections' options on ``conf``); InvalidRequest names the bad
    option."""
    out: list[VgpuType] = []
    listed_by: dict[str, str] = {}
    for i, name in enumerate(conf.agent.enabled_vgpu_types):
        field = f"agent.enabled_vgpu_types[{i}]"
        if not _TYPE_NAME.match(name):
            raise _invalid(field, f"not an mdev type name: {name!r} (letters, digits, _ . "
                                  f"and -, as under mdev_supported_types)")
        if any(t.type == name for t in out):
            raise _invalid(field, f"{name} is listed twice")
        group = GROUP_PREFIX + name
        conf.register_opts(vgpu_type_opts, group=group)
        section = conf[group]
        addresses = []
        for j, address in enumerate(section.device_addresses):
            where = f"{group}.device_addresses[{j}]"
            address = address.strip().lower()
            if not _ADDRESS.match(address):
                raise _invalid(where, f"not a PCI address: {address!r} (e.g. 0000:84:00.0)")
            if address in listed_by:
                raise _invalid(where, f"{address} is also listed by [{listed_by[address]}]: "
                                      f"a GPU exposes one vGPU type")
            listed_by[address] = group
            addresses.append(address)
        traits = set()
        for j, trait in enumerate(section.traits):
            try:
                traits.add(inventory.check_trait(trait, f"{group}.traits[{j}]"))
            except inventory.InventoryError as e:
                raise _invalid(e.field, e.reason) from None
        out.append(VgpuType(type=name, addresses=tuple(addresses), traits=frozenset(traits)))
    return tuple(out)


def unused_sections(conf: cfg.ConfigOpts, types: Sequence[VgpuType]) -> list[str]:
    """``[vgpu_<type>]`` sections of the config files for types not enabled."""
    enabled = {GROUP_PREFIX + t.type for t in types}
    return sorted(s for s in conf.list_all_sections()
                  if s.startswith(GROUP_PREFIX) and s not in enabled)


# -- which GPU exposes which type ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU reported as a child provider, exposing one vGPU type."""

    address: str
    mdev_type: MdevType
    provider: str
    traits: frozenset[str]

    def to_report(self) -> dict:
        """The child provider in the fleet format (no inventory when it has none)."""
        out = {"name": self.provider, "uuid": provider_uuid(self.provider),
               "traits": sorted(self.traits)}
        total = self.mdev_type.total
        if total:
            out["inventories"] = {VGPU: {"total": total}}
        return out


def choose_types(node: str, parents: Sequence[MdevParent], types: Sequence[VgpuType]
                 ) -> tuple[list[Gpu], list[str]]:
    """The GPUs to report, each with the type it exposes, and warnings.

    A GPU listed in a type's ``device_addresses`` exposes that type; any other
    exposes the first enabled type it supports among those that list no
    addresses; a GPU left without a type is not reported.
    """
    warnings: list[str] = []
    by_address = {p.address: p for p in parents}
    chosen: dict[str, VgpuType] = {}
    for vgpu in types:
        for address in vgpu.addresses:
            parent = by_address.get(address)
            if parent is None:
                warnings.append(f"[{GROUP_PREFIX}{vgpu.type}] device_addresses: {address} is "
                                f"not on the mdev bus; not reported")
            elif parent.type(vgpu.type) is None:
                supported = ", ".join(t.type for t in parent.types) or "none"
                warnings.append(f"GPU {address} does not support vGPU type {vgpu.type} "
                                f"(it supports: {supported}); not reported")
            else:
                chosen[address] = vgpu
    anywhere = [t for t in types if not t.addresses]
    for parent in parents:
        if parent.address in chosen or any(parent.address in t.addresses for t in types):
            continue
        vgpu = next((t for t in anywhere if parent.type(t.type) is not None), None)
        if vgpu is not None:
            chosen[parent.address] = vgpu
    gpus = []
    for address in sorted(chosen):
        vgpu, parent = chosen[address], by_address[address]
        exposed = parent.type(vgpu.type)
        for other in parent.types:
            if other.type != vgpu.type and other.created:
                warnings.append(f"GPU {address} holds {len(other.created)} mdev(s) of type "
                                f"{other.type} but exposes {vgpu.type}: their guests are not "
                                f"counted")
        gpus.append(Gpu(address=address, mdev_type=exposed,
                        provider=provider_name(node, address),
                        traits=frozenset({vgpu.trait}) | vgpu.traits))
    exposed_types = {g.mdev_type.type for g in gpus}
    for vgpu in types:
        if vgpu.type not in exposed_types and not vgpu.addresses:
            warnings.append(f"vGPU type {vgpu.type}: no GPU on the mdev bus exposes it")
    return gpus, warnings
