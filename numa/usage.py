"""Add a fitted guest topology to a host topology's usage, or take it away again.

Both return a new ``HostTopology``: ``cpu_usage`` (floating vCPUs), ``memory_usage``,
``pinned_cpus`` (pinned vCPUs, isolated emulator-thread CPUs and siblings left idle by
thread policy isolate) and the ``used`` count of the page size taken (for a guest that
asked no page size on a cell that lists pages, the small pages: the fit records their
size, so the small-page pool is charged and given back like any other).
``remove_usage(apply_usage(host, fitted), fitted) == host``.
"""
from __future__ import annotations

import dataclasses

from numa.errors import NumaError
from numa.topology import FittedCell, FittedTopology, HostCell, HostTopology


def apply_usage(host: HostTopology, fitted: FittedTopology) -> HostTopology:
    """``host`` with ``fitted`` added. Raises ``NumaError`` when the fit does not match
    the host (unknown cell or page size, a CPU outside pcpuset or already pinned): that
    is a fit computed against another state of the host, never to be applied."""
    cells = {cell.id: cell for cell in host.cells}
    for index, fitted_cell in enumerate(fitted.cells):
        field = f"numa.cells.{index}"
        cell = cells.get(fitted_cell.host_cell_id)
        if cell is None:
            raise NumaError(f"{field}.host_cell_id",
                            f"host has no cell {fitted_cell.host_cell_id}")
        cpus = fitted_cell.host_cpus
        if not cpus <= cell.pcpuset:
            raise NumaError(f"{field}.cpu_pinning",
                            f"host CPUs {_fmt(cpus - cell.pcpuset)} are not in the cell's pcpuset")
        if cpus & cell.pinned_cpus:
            raise NumaError(f"{field}.cpu_pinning",
                            f"host CPUs {_fmt(cpus & cell.pinned_cpus)} are already pinned")
        if fitted_cell.pagesize_kb is not None and cell.mempage(fitted_cell.pagesize_kb) is None:
            raise NumaError(f"{field}.pagesize_kb",
                            f"host cell has no {fitted_cell.pagesize_kb} KiB pages")
        cells[cell.id] = _change(cell, fitted_cell, +1)
    return HostTopology(cells=tuple(cells[cell.id] for cell in host.cells))


def remove_usage(host: HostTopology, fitted: FittedTopology) -> HostTopology:
    """``host`` with ``fitted`` taken away. Lenient by design so that a release never
    fails: counters stop at zero, and cells or pages the host no longer has are skipped."""
    cells = {cell.id: cell for cell in host.cells}
    for fitted_cell in fitted.cells:
        cell = cells.get(fitted_cell.host_cell_id)
        if cell is not None:
            cells[cell.id] = _change(cell, fitted_cell, -1)
    return HostTopology(cells=tuple(cells[cell.id] for cell in host.cells))


def _change(cell: HostCell, fitted: FittedCell, sign: int) -> HostCell:
    pinned = (cell.pinned_cpus | fitted.host_cpus if sign > 0
              else cell.pinned_cpus - fitted.host_cpus)
    mempages = cell.mempages
    if fitted.pagesize_kb is not None:
        pages = fitted.memory_mb * 1024 // fitted.pagesize_kb
        mempages = tuple(
            dataclasses.replace(page, used=max(0, page.used + sign * pages))
            if page.size_kb == fitted.pagesize_kb else page
            for page in cell.mempages)
    return dataclasses.replace(
        cell,
        cpu_usage=max(0, cell.cpu_usage + sign * fitted.shared_cpus),
        memory_usage=max(0, cell.memory_usage + sign * fitted.memory_mb),
        pinned_cpus=pinned,
        mempages=mempages,
    )


def _fmt(cpus) -> str:
    return ",".join(str(c) for c in sorted(cpus))
