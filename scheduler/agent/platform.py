"""Disk, CPU model and hypervisor: the non-topology parts of a host's report.

``cpu_info`` comes from ``/proc/cpuinfo`` (first processor: vendor, model,
flags), the disk from ``statvfs`` of the instances path, the hypervisor from
configuration (Berth does not run guests, so it does not probe libvirt).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from scheduler.agent.kernel import KernelTree, KernelTreeError

GiB = 1024 ** 3

_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon",
            "CentaurHauls": "Centaur"}
_ARM_IMPLEMENTERS = {"0x41": "ARM", "0x48": "HiSilicon", "0x50": "Ampere", "0x51": "Qualcomm",
                     "0xc0": "Ampere", "0x61": "Apple", "0x46": "Fujitsu", "0x4e": "NVIDIA"}


@dataclasses.dataclass(frozen=True)
class CpuModel:
    arch: str
    vendor: str | None
    model: str | None
    features: tuple[str, ...]


def _first_processor(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def discover_cpu_model(tree: KernelTree, machine: str | None = None) -> CpuModel:
    """Arch, vendor, model name and feature flags of the host's CPUs.

    The architecture is read from the flags where ``cpuinfo`` shows it (``lm``:
    x86_64; ``CPU architecture: 8``: aarch64), else ``machine`` (``uname -m``).
    """
    path = tree.proc("cpuinfo")
    text = tree.read(path)
    if text is None:
        raise KernelTreeError(f"{path}: missing")
    first = _first_processor(text)
    flags = tuple(sorted(set((first.get("flags") or first.get("Features") or "").split())))
    if "vendor_id" in first:
        arch = "x86_64" if "lm" in flags else "i686"
        vendor = _VENDORS.get(first["vendor_id"], first["vendor_id"])
    elif first.get("CPU architecture") == "8":
        arch = "aarch64"
        vendor = _ARM_IMPLEMENTERS.get(first.get("CPU implementer", "").lower(),
                                       first.get("CPU implementer"))
    else:
        arch = machine or os.uname().machine
        vendor = None
    return CpuModel(arch=arch, vendor=vendor, model=first.get("model name"), features=flags)


@dataclasses.dataclass(frozen=True)
class DiskFacts:
    path: str
    total_gb: int
    free_gb: int


def discover_disk(path: str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs
                  ) -> DiskFacts:
    """Size of the file system holding the instances path, in whole GiB."""
    try:
        st = statvfs(path)
    except OSError as e:
        raise KernelTreeError(f"{path}: cannot statvfs the instances path: "
                              f"{e.strerror}") from None
    return DiskFacts(path=path, total_gb=st.f_blocks * st.f_frsize // GiB,
                     free_gb=st.f_bavail * st.f_frsize // GiB)
