"""PCI device pools: counts of free, interchangeable devices of a host.

Pools are never stored (a stored summary drifts from the device rows): the
database derives them with one
``GROUP BY`` over the available device rows, and ``pools_from_devices`` is the
same grouping done in Python. A host's pools are a ``tuple[PciPool, ...]``
sorted by key, so two derivations of the same devices compare equal.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from pci.device import AVAILABLE, PciDevice, Tags


@dataclasses.dataclass(frozen=True)
class PoolKey:
    """What makes devices interchangeable for a request: a request spec may ask for
    any of these, tags included, so devices that differ in one are in two pools."""

    vendor_id: str
    product_id: str
    dev_type: str
    numa_node: int | None
    physical_network: str | None
    tags: Tags = ()

    def __post_init__(self) -> None:
        # Keys are looked up per host per request (matching memo): hash once.
        object.__setattr__(self, "_hash", hash((self.vendor_id, self.product_id, self.dev_type,
                                                self.numa_node, self.physical_network,
                                                self.tags)))
        # Tag values as matching compares them (case-insensitively, as Nova does).
        object.__setattr__(self, "tag_values",
                           {k: v.casefold() for k, v in self.tags} if self.tags else _NO_TAGS)

    def __hash__(self) -> int:
        return self._hash

    def sort_key(self) -> tuple:
        """Total order over keys (``None`` sorts first, untagged before tagged)."""
        return (self.vendor_id, self.product_id, self.dev_type,
                self.numa_node is not None, self.numa_node or 0,
                self.physical_network is not None, self.physical_network or "", self.tags)


_NO_TAGS: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class PciPool:
    """``count`` free devices sharing ``key``."""

    key: PoolKey
    count: int


def pool_key_of(device: PciDevice) -> PoolKey:
    return PoolKey(device.vendor_id, device.product_id, device.dev_type,
                   device.numa_node, device.physical_network, device.tags)


def sort_pools(pools: Iterable[PciPool]) -> tuple[PciPool, ...]:
    """Pools in the canonical order (by key)."""
    return tuple(sorted(pools, key=lambda p: p.key.sort_key()))


def pools_from_devices(devices: Iterable[PciDevice]) -> tuple[PciPool, ...]:
    """The pools of one host's devices: available devices counted by key."""
    counts = Counter(pool_key_of(d) for d in devices if d.status == AVAILABLE)
    return sort_pools(PciPool(key, n) for key, n in counts.items())


def free_count(pools: Iterable[PciPool]) -> int:
    """Free devices over all pools."""
    return sum(p.count for p in pools)
