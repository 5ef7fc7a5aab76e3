"""Inventories and the capacity rule of every resource class, in one place.

An inventory is what one resource provider (a compute node, or a child of it
such as a physical GPU) has of one resource class: ``total``, ``reserved``,
``min_unit``, ``max_unit``, ``step_size`` and ``allocation_ratio``, as in
Placement. Its usage is the sum of the allocations held against it.

The rule, for an allocation of ``amount`` against an inventory already holding
``used``::

    unit_ok:  min_unit <= amount <= max_unit  and  amount % step_size == 0
    fits:     used + amount <= (total - reserved) * allocation_ratio

The functions below take plain numbers, numpy arrays or SQLAlchemy column
expressions alike and return the matching boolean form, so the vector check of
the host columns, the per-host check and its explanation, the SQL guard of a
claim and capacity counting are all this code, never a copy of it.

Class and trait names: the standard ones of ``os-resource-classes`` and
``os-traits`` (the libraries OpenStack itself uses), or ``CUSTOM_`` followed by
upper-case letters, digits and underscores.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from typing import Any

#: The standard classes a compute node's classic fields stand for.
VCPU, PCPU, MEMORY_MB, DISK_GB = "VCPU", "PCPU", "MEMORY_MB", "DISK_GB"

MAX_NAME = 255
#: Largest inventory figure (Placement's limit: a signed 32-bit integer).
MAX_AMOUNT = 2 ** 31 - 1
MAX_RATIO = 1e6
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]+$")


class InventoryError(ValueError):
    """A bad inventory, class or trait: ``field`` names it, ``reason`` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# -- the rule --------------------------------------------------------------------------------

def usable(total: Any, reserved: Any, ratio: Any) -> Any:
    """What allocations may add up to: (total - reserved) x allocation ratio."""
    return (total - reserved) * ratio


def fits(used: Any, amount: Any, total: Any, reserved: Any, ratio: Any) -> Any:
    """Whether ``amount`` more stays within what may be allocated."""
    return within(used, amount, usable(total, reserved, ratio))


def within(used: Any, amount: Any, limit: Any) -> Any:
    """``fits`` given the inventory's ``usable`` (for callers that keep it)."""
    return used + amount <= limit


def unit_ok(amount: Any, min_unit: Any, max_unit: Any, step_size: Any) -> Any:
    """Whether one allocation of ``amount`` is allowed by the unit limits."""
    return (amount >= min_unit) & (amount <= max_unit) & (amount % step_size == 0)


def admits(used: Any, amount: Any, inv: Any) -> Any:
    """``unit_ok`` and ``fits`` together, for anything with the inventory's
    fields as attributes (an :class:`Inventory`, a row of columns, a table)."""
    return unit_ok(amount, inv.min_unit, inv.max_unit, inv.step_size) & \
        fits(used, amount, inv.total, inv.reserved, inv.allocation_ratio)


# -- one inventory ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class Inventory:
    """One provider's inventory of one class (immutable; equal values hash alike)."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = MAX_AMOUNT
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> float:
        """(total - reserved) x allocation ratio."""
        return usable(self.total, self.reserved, self.allocation_ratio)

    def admits(self, used: int, amount: int) -> bool:
        return bool(admits(used, amount, self))

    def broken_unit(self, amount: int) -> str | None:
        """Which unit limit one allocation of ``amount`` breaks (``below
        min_unit``, ``above max_unit``, ``not a multiple of step_size``), or
        None: the explanation of ``unit_ok``, for reasons to word."""
        if amount < self.min_unit:
            return "below min_unit"
        if amount > self.max_unit:
            return "above max_unit"
        if amount % self.step_size:
            return "not a multiple of step_size"
        return None

    @classmethod
    def from_primitive(cls, data: Any, field: str, defaults: Inventory | None = None
                       ) -> Inventory:
        """An inventory from its fleet-file form (``{total: N, ...}``, or a bare
        number for ``total``); fields left out come from ``defaults`` (max_unit:
        total). Raises InventoryError naming the field."""
        if isinstance(data, int) and not isinstance(data, bool):
            data = {"total": data}
        if not isinstance(data, Mapping):
            raise InventoryError(field, f"expected a mapping or a number, got {_show(data)}")
        unknown = sorted(str(k) for k in data if k not in _FIELDS)
        if unknown:
            raise InventoryError(f"{field}.{unknown[0]}", "unknown key")
        base = defaults or cls(total=0)
        if "total" not in data and defaults is None:
            raise InventoryError(f"{field}.total", "required")
        total = _amount(data.get("total", base.total), f"{field}.total", 0)
        # max_unit defaults to the total; an emptied class (total 0, which
        # removes it from the host) still gets the smallest legal unit.
        max_default = (max(total, 1) if defaults is None or "total" in data
                       else base.max_unit)
        inv = cls(
            total=total,
            reserved=_amount(data.get("reserved", base.reserved), f"{field}.reserved", 0),
            min_unit=_amount(data.get("min_unit", base.min_unit), f"{field}.min_unit", 1),
            max_unit=_amount(data.get("max_unit", max_default), f"{field}.max_unit", 1),
            step_size=_amount(data.get("step_size", base.step_size), f"{field}.step_size", 1),
            allocation_ratio=_ratio(data.get("allocation_ratio", base.allocation_ratio),
                                    f"{field}.allocation_ratio"),
        )
        if inv.reserved > inv.total:
            raise InventoryError(f"{field}.reserved",
                                 f"{inv.reserved} is more than total {inv.total}")
        if inv.min_unit > inv.max_unit:
            raise InventoryError(f"{field}.min_unit",
                                 f"{inv.min_unit} is more than max_unit {inv.max_unit}")
        return inv

    def to_primitive(self) -> dict:
        return {"total": self.total, "reserved": self.reserved, "min_unit": self.min_unit,
                "max_unit": self.max_unit, "step_size": self.step_size,
                "allocation_ratio": self.allocation_ratio}


_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _amount(value: Any, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InventoryError(field, f"expected an integer, got {_show(value)}")
    if not minimum <= value <= MAX_AMOUNT:
        raise InventoryError(field, f"must be between {minimum} and {MAX_AMOUNT}, got "
                                    f"{_show(value)}")
    return value


def _ratio(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InventoryError(field, f"expected a number, got {_show(value)}")
    value = float(value)
    if not (math.isfinite(value) and 0 < value <= MAX_RATIO):
        raise InventoryError(field, f"must be above 0 and at most {MAX_RATIO:g}, got "
                                    f"{_show(value)}")
    return value


# -- names -----------------------------------------------------------------------------------

@functools.cache
def standard_classes() -> frozenset[str]:
    import os_resource_classes

    return frozenset(os_resource_classes.STANDARDS)


@functools.cache
def standard_traits() -> frozenset[str]:
    import os_traits

    return frozenset(os_traits.get_traits())


def is_custom(name: str) -> bool:
    return len(name) <= MAX_NAME and _CUSTOM.match(name) is not None


def _check_name(name: Any, field: str, known: frozenset, what: str, example: str) -> str:
    if isinstance(name, str) and (name in known or is_custom(name)):
        return name
    raise InventoryError(field, f"not a {what}: {_show(name)} (a standard {what} such as "
                                f"{example}, or CUSTOM_ and upper-case letters, digits "
                                f"and underscores)")


def check_class(name: Any, field: str) -> str:
    """``name`` if it is a standard resource class or a CUSTOM_ one."""
    return _check_name(name, field, standard_classes(), "resource class", "VCPU or VGPU")


def check_trait(name: Any, field: str) -> str:
    """``name`` if it is a standard trait or a CUSTOM_ one."""
    return _check_name(name, field, standard_traits(), "trait", "HW_CPU_X86_AVX2")


# -- a compute node's classic fields ---------------------------------------------------------

def disk_gb(megabytes: int) -> int:
    """Megabytes as whole gigabytes, rounded up (swap, reserved disk)."""
    return -(-megabytes // 1024)


def node_inventories(*, vcpus: int, memory_mb: int, local_gb: int,
                     cpu_allocation_ratio: float, ram_allocation_ratio: float,
                     disk_allocation_ratio: float, reserved_host_cpus: int = 0,
                     reserved_host_memory_mb: int = 0, reserved_host_disk_mb: int = 0,
                     dedicated_cpus: int = 0) -> dict[str, Inventory]:
    """The inventories a node's classic fields stand for.

    ``vcpus`` counts every guest CPU of the host; those its NUMA topology
    dedicates to pinned guests (``dedicated_cpus``, the cells' pcpusets) are
    ``PCPU`` (ratio 1), the rest ``VCPU`` with ``reserved_host_cpus`` and the
    CPU ratio. ``memory_mb`` is ``MEMORY_MB``, ``local_gb`` is ``DISK_GB``
    (reserved disk rounded up to whole GB). ``max_unit`` is the total: one
    instance never over-commits against itself. A class whose total would be
    0 is left out (nothing of it can be allocated).
    """
    out: dict[str, Inventory] = {}
    shared = max(0, vcpus - dedicated_cpus)

    def put(rc: str, total: int, reserved: int, ratio: float) -> None:
        if total > 0:
            out[rc] = Inventory(total=total, reserved=min(reserved, total), max_unit=total,
                                allocation_ratio=ratio)

    put(VCPU, shared, reserved_host_cpus, cpu_allocation_ratio)
    put(PCPU, min(dedicated_cpus, vcpus), 0, 1.0)
    put(MEMORY_MB, memory_mb, reserved_host_memory_mb, ram_allocation_ratio)
    put(DISK_GB, local_gb, disk_gb(reserved_host_disk_mb), disk_allocation_ratio)
    return out
