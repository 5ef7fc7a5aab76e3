"""What changes when a host reports its PCI devices.

The host's report is the truth about hardware (which devices exist, their ids,
type, parent, NUMA node, network, and whether the host can use them); Berth's
own state is the claims. A device a guest holds is never dropped because the
host stopped reporting it: that is a warning for the operator instead.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from pci.device import (
    AVAILABLE,
    REMOVED,
    UNAVAILABLE,
    UNCLAIMABLE,
    PciDevice,
    cascade_status,
)
from pci.errors import PciError


@dataclasses.dataclass(frozen=True)
class ReportPlan:
    """Rows to insert, rows to rewrite (full new values), addresses to mark removed."""

    add: tuple[PciDevice, ...] = ()
    update: tuple[PciDevice, ...] = ()
    remove: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.add or self.update or self.remove)


def _reported_status(old: PciDevice, new: PciDevice) -> str:
    """The status of a device still present: claims and cascades are kept."""
    if old.in_use:
        return old.status
    if new.status == UNAVAILABLE:
        return UNAVAILABLE
    if old.status == UNCLAIMABLE:
        return UNCLAIMABLE  # recomputed from relatives below
    return AVAILABLE


def plan_report(existing: Iterable[PciDevice], reported: Iterable[PciDevice],
                field: str = "devices") -> ReportPlan:
    """Diff a node's stored devices against the host's report.

    New addresses are added; present ones get the reported hardware fields
    (``removed`` ones come back); vanished free devices become ``removed``;
    vanished claimed or allocated devices are kept, with a warning. Free
    devices are then made ``available`` or ``unclaimable`` by the PF/VF rule.
    Raises ``PciError`` if an address is reported twice.
    """
    old = {d.address: d for d in existing}
    new: dict[str, PciDevice] = {}
    for i, dev in enumerate(reported):
        if dev.address in new:
            raise PciError(f"{field}[{i}].address", f"device {dev.address} reported twice")
        new[dev.address] = dev

    warnings: list[str] = []
    final: dict[str, PciDevice] = {}
    for addr, dev in new.items():
        prev = old.get(addr)
        if prev is None:
            status = UNAVAILABLE if dev.status == UNAVAILABLE else AVAILABLE
            final[addr] = dataclasses.replace(dev, status=status, instance_uuid=None,
                                              request_id=None)
            continue
        if prev.in_use and (prev.vendor_id, prev.product_id, prev.dev_type) != (
                dev.vendor_id, dev.product_id, dev.dev_type):
            warnings.append(f"device {addr} is {prev.status} by instance "
                            f"{prev.instance_uuid} but now reported as "
                            f"{dev.vendor_id}:{dev.product_id} {dev.dev_type}")
        final[addr] = dataclasses.replace(dev, status=_reported_status(prev, dev),
                                          instance_uuid=prev.instance_uuid,
                                          request_id=prev.request_id)
    remove = []
    for addr, prev in old.items():
        if addr in new:
            continue
        if prev.in_use:
            warnings.append(f"device {addr} is no longer reported but is {prev.status} "
                            f"by instance {prev.instance_uuid}; kept")
        elif prev.status != REMOVED:
            remove.append(addr)
        final[addr] = prev if prev.in_use or prev.status == REMOVED else \
            dataclasses.replace(prev, status=REMOVED)

    for addr, status in cascade_status(final.values()).items():
        final[addr] = dataclasses.replace(final[addr], status=status)

    add = tuple(final[a] for a in sorted(new) if a not in old)
    update = tuple(final[a] for a in sorted(final)
                   if a in old and a not in remove and final[a] != old[a])
    return ReportPlan(add=add, update=update, remove=tuple(sorted(remove)),
                      warnings=tuple(warnings))
