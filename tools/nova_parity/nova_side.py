"""The same cases through Nova 34's own objects and ``nova.virt.hardware``.

Three answers per case, all from Nova's code:

- ``nova_fits``: ``numa_fit_instance_to_host`` as Nova calls it (one set of guest
  cell objects for every permutation of host cells);
- ``fresh_fits``: Nova's per-cell check ``_numa_fit_instance_cell`` on fresh copies of
  the guest cells for each permutation (what ``numa_fit_instance_to_host`` would say
  if it did not reuse cells it has mutated: a resolved page size, a changed cell id);
- ``usage``: Nova's ``numa_usage_from_instance_numa`` applied with Berth's fit, to
  check that Berth's pinning is valid for Nova and that both count the same usage.
"""
from __future__ import annotations

import itertools
import logging

from nova import exception, objects
from nova.virt import hardware

objects.register_all()
logging.getLogger("nova").setLevel(logging.CRITICAL)

_PAGE_REQUEST = {"small": hardware.MEMPAGES_SMALL, "large": hardware.MEMPAGES_LARGE,
                 "any": hardware.MEMPAGES_ANY}


def host_topology(host: dict) -> objects.NUMATopology:
    cells = []
    for cell in host["cells"]:
        cells.append(objects.NUMACell(
            id=cell["id"], socket=cell.get("socket"),
            cpuset=set(cell["cpuset"]), pcpuset=set(cell["pcpuset"]),
            memory=cell["memory_mb"], cpu_usage=cell.get("cpu_usage", 0),
            memory_usage=cell.get("memory_usage", 0),
            pinned_cpus=set(cell.get("pinned_cpus", ())),
            siblings=[set(s) for s in cell.get("siblings", ())],
            mempages=[objects.NUMAPagesTopology(size_kb=p["size_kb"], total=p["total"],
                                                used=p.get("used", 0),
                                                reserved=p.get("reserved", 0))
                      for p in cell.get("mempages", ())]))
    return objects.NUMATopology(cells=cells)


def instance_topology(instance: dict) -> objects.InstanceNUMATopology:
    cells = []
    for cell in instance["cells"]:
        pagesize = cell.get("pagesize")
        cells.append(objects.InstanceNUMACell(
            id=cell["id"], cpuset=set(cell.get("cpuset", ())),
            pcpuset=set(cell.get("pcpuset", ())), memory=cell["memory_mb"],
            pagesize=_PAGE_REQUEST.get(pagesize, pagesize),
            cpu_policy=cell.get("cpu_policy") or "shared",
            cpu_thread_policy=cell.get("cpu_thread_policy")))
    return objects.InstanceNUMATopology(
        cells=cells, emulator_threads_policy=instance.get("emulator_threads_policy"))


def limits_of(limits: dict | None) -> objects.NUMATopologyLimits | None:
    if limits is None:
        return None
    return objects.NUMATopologyLimits(
        cpu_allocation_ratio=limits.get("cpu_allocation_ratio", 1.0),
        ram_allocation_ratio=limits.get("ram_allocation_ratio", 1.0))


def nova_fits(case: dict) -> bool:
    fitted = hardware.numa_fit_instance_to_host(
        host_topology(case["host"]), instance_topology(case["instance"]), None,
        limits=limits_of(case["limits"]))
    return fitted is not None


def fresh_fits(case: dict) -> bool:
    host = host_topology(case["host"])
    guest = instance_topology(case["instance"])
    limits = limits_of(case["limits"])
    isolated = guest.emulator_threads_isolated
    for cells in itertools.permutations(host.cells, len(guest.cells)):
        for index, (host_cell, guest_cell) in enumerate(zip(cells, guest.cells, strict=True)):
            try:
                got = hardware._numa_fit_instance_cell(
                    host_cell, guest_cell.obj_clone(), limits,
                    1 if isolated and index == 0 else 0)
            except exception.MemoryPageSizeNotSupported:
                got = None
            if got is None:
                break
        else:
            return True
    return False


def usage_after(case: dict, answer: dict) -> dict:
    """Nova's usage of the host after Berth's fit (``answer`` from ``numa fit``), as
    ``{cell id: (cpu_usage, memory_usage, pinned, {page size: used})}``; raises when
    Nova finds the pinning invalid (a CPU outside pcpuset or already pinned)."""
    host = host_topology(case["host"])
    guest = instance_topology(case["instance"])
    for cell, placed in zip(guest.cells, answer["cells"], strict=True):
        cell.id = placed["host_cell_id"]
        cell.pin_vcpus(*((int(v), p) for v, p in placed["cpu_pinning"].items()))
        cell.cpuset_reserved = set(placed["cpuset_reserved"]) or None
        if cell.pagesize:
            cell.pagesize = placed["pagesize_kb"]
    used = hardware.numa_usage_from_instance_numa(host, guest)
    return {cell.id: (cell.cpu_usage, cell.memory_usage, frozenset(cell.pinned_cpus),
                      {p.size_kb: int(p.used) for p in cell.mempages})
            for cell in used.cells}
