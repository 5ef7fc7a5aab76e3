"""Disk, CPU model and hypervisor: the non-topology parts of a host's report.

``cpu_info`` comes from ``/proc/cpuinfo`` (first processor: vendor, model,
flags), the disk from ``statvfs`` of the instances path. The hypervisor version
is QEMU's, as libvirt reports it to Nova (``major * 1000000 + minor * 1000 +
micro``): ``qemu-system-<arch> --version`` (or ``qemu-kvm``) when the host has
one, else ``[agent] hypervisor_version`` (Berth does not run guests, so it does
not talk to libvirt).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence

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


# -- hypervisor version -------------------------------------------------------------------

_QEMU_VERSION = re.compile(r"\bversion\s+(\d+)\.(\d+)(?:\.(\d+))?")
VERSION_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class HypervisorVersion:
    """A detected version and where it came from (for the operator)."""

    version: int | None
    source: str
    warning: str | None = None


def parse_qemu_version(text: str) -> int | None:
    """``QEMU emulator version 8.2.2 (Debian ...)`` as 8002002, or None."""
    m = _QEMU_VERSION.search(text)
    if m is None:
        return None
    major, minor, micro = (int(g or 0) for g in m.groups())
    if minor > 999 or micro > 999:
        return None
    return major * 1_000_000 + minor * 1_000 + micro


def qemu_candidates(arch: str) -> tuple[str, ...]:
    """Where QEMU lives: the system emulator of the host's arch, or RHEL's qemu-kvm."""
    return (f"qemu-system-{arch}", "qemu-kvm", "/usr/libexec/qemu-kvm")


def detect_hypervisor_version(candidates: Sequence[str],
                              run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                              which: Callable[[str], str | None] = shutil.which,
                              ) -> HypervisorVersion:
    """The version printed by the first candidate binary that exists.

    ``HypervisorVersion(None, ...)`` when none exists, or with a ``warning``
    when one exists but fails or prints no version (the caller falls back to
    configuration).
    """
    for name in candidates:
        path = which(name)
        if path is None:
            continue
        try:
            done = run([path, "--version"], capture_output=True, text=True,
                       timeout=VERSION_TIMEOUT, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return HypervisorVersion(None, f"{path} --version",
                                     f"{path} --version failed: {e}")
        version = parse_qemu_version(done.stdout or "") if done.returncode == 0 else None
        if version is None:
            first = (done.stdout or done.stderr or "").strip().splitlines()[:1]
            return HypervisorVersion(None, f"{path} --version",
                                     f"{path} --version printed no version "
                                     f"(exit {done.returncode}: {first[0][:80] if first else ''})")
        return HypervisorVersion(version, f"{path} --version")
    return HypervisorVersion(None, "not found: " + ", ".join(candidates))
