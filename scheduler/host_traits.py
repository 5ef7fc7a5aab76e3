"""The traits a node has by what it is: its CPU flags and its SMT siblings.

Every fleet entry and host report gets these besides the traits it lists:
``cpu_info.features`` as ``HW_CPU_X86_*`` (``HW_CPU_AARCH64_*`` on aarch64)
where ``os-traits`` has a trait of that name (or of the name the table below
gives a flag spelled otherwise by Linux's ``/proc/cpuinfo`` or by libvirt),
and ``HW_CPU_HYPERTHREADING`` when a NUMA cell lists SMT siblings
(``hw:cpu_thread_policy`` asks for or against it). A flag with no standard
trait gives none.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from db import inventory

HYPERTHREADING = "HW_CPU_HYPERTHREADING"
#: x86 flags whose trait has another name: Linux ``/proc/cpuinfo`` and libvirt
#: spellings -> the trait names after ``HW_CPU_X86_`` (vmx and svm give the
#: vendor-specific trait too, as Nova reports them).
_X86_FLAG_TRAITS = {
    "aes": ("AESNI",), "pni": ("SSE3",), "pclmulqdq": ("CLMUL",), "pclmuldq": ("CLMUL",),
    "fma": ("FMA3",), "bmi1": ("BMI",), "sha_ni": ("SHA",), "sha-ni": ("SHA",),
    "vaes": ("AVX512VAES",), "gfni": ("AVX512GFNI",),
    "vpclmulqdq": ("AVX512VPCLMULQDQ",), "vmx": ("VMX", "INTEL_VMX"),
    "svm": ("SVM", "AMD_SVM"),
}
_ARCH_PREFIX = {"x86_64": "HW_CPU_X86_", "i686": "HW_CPU_X86_", "i386": "HW_CPU_X86_",
                "amd64": "HW_CPU_X86_", "aarch64": "HW_CPU_AARCH64_"}


def cpu_flag_traits(arch: str | None, features: Iterable[Any]) -> set[str]:
    """The standard traits of CPU flags (``avx512f`` -> HW_CPU_X86_AVX512F,
    ``sse4.2``/``sse4_2`` -> HW_CPU_X86_SSE42)."""
    prefix = _ARCH_PREFIX.get(str(arch or "x86_64").lower())
    if prefix is None:
        return set()
    known = inventory.standard_traits()
    out = set()
    for flag in features:
        if not isinstance(flag, str):
            continue
        if prefix == "HW_CPU_X86_" and flag.strip().lower() in _X86_FLAG_TRAITS:
            out.update(prefix + t for t in _X86_FLAG_TRAITS[flag.strip().lower()]
                       if prefix + t in known)
            continue
        name = flag.strip().upper().replace("-", "_").replace(".", "_")
        for candidate in (prefix + name, prefix + name.replace("_", "")):
            if candidate in known:
                out.add(candidate)
                break
    return out


def has_smt(numa_topology: Mapping | None) -> bool:
    """Whether a topology primitive lists a core of two or more threads."""
    for cell in (numa_topology or {}).get("cells") or ():
        if any(len(core) > 1 for core in cell.get("siblings") or ()):
            return True
    return False


def derived(cpu_info: Mapping | None, numa_topology: Mapping | None) -> set[str]:
    """The traits a node has by its ``cpu_info`` and NUMA topology."""
    info = cpu_info or {}
    features = info.get("features") or ()
    out = cpu_flag_traits(info.get("arch"), features if isinstance(features, list) else ())
    if has_smt(numa_topology):
        out.add(HYPERTHREADING)
    return out
