"""NUMATopologyFilter: the guest NUMA topology (pinning, pages, PCI affinity) fits."""
from __future__ import annotations

import numpy as np

from numa import topology as numa_topology
from scheduler import host_state
from scheduler.filters import SKIP, BaseHostFilter
from scheduler.host_state import isolate_on_smt_hosts

#: Page sizes with a free-memory column (``numa_free_kb_*``).
_PAGE_COLUMNS = {2048: "numa_free_kb_2m", 1048576: "numa_free_kb_1g",
                 numa_topology.PAGES_LARGE: "numa_free_kb_large"}


def _pinned_key(host) -> tuple:
    # A guest with only pinned vCPUs never reads the CPU ratio, and never
    # over-commits memory: of the RAM ratio only a value below 1 matters.
    topology = host.numa_topology
    return (topology, min(host.ram_allocation_ratio, 1.0),
            None if topology is None else isolate_on_smt_hosts(topology))


def _whole_pages(memory_kb: int, page_kb: np.ndarray) -> np.ndarray:
    """Where ``memory_kb`` is a whole number of pages of ``page_kb`` (whole
    numbers, at least 1): ``memory_kb % page_kb == 0``, without a float modulo
    per row. Below 2**53 the quotient of two whole numbers is exact when one
    divides the other, and otherwise at least ``1 / page_kb`` away from any whole
    number, further than its rounding error reaches: its floor tells them apart."""
    if memory_kb >= 2 ** 53:
        return np.mod(memory_kb, page_kb) == 0
    quotient = memory_kb / page_kb
    return quotient == np.floor(quotient)


def _sure_memory(col, ram_ratio, cell):
    """Per host cell (``col(name)``: a cell column): certainly room for the guest
    cell's memory (None: unknown for this page size request)."""
    memory_kb = cell.memory_mb * 1024
    small = col("cell_small_kb")
    has_pages = small > 0
    whole_small = _whole_pages(memory_kb, np.where(has_pages, small, 1))
    ratio = ram_ratio
    if cell.pcpuset:
        ratio = np.minimum(ratio, 1.0)
    memory_mb, usage = col("cell_memory_mb"), col("cell_memory_usage")
    plain = cell.memory_mb <= np.minimum(memory_mb * ratio - usage, memory_mb)
    request = cell.pagesize
    if request is None:
        pages_kb = col("cell_small_free_kb" if cell.pcpuset else "cell_small_total_kb")
        return plain & (~has_pages | (whole_small & (pages_kb / 1024 >= cell.memory_mb)))

    def fits(free_pages, size):
        return (free_pages >= 0) & (memory_kb % size == 0) & (memory_kb // size <= free_pages)

    # a whole number of small pages fits in the free ones when its memory is at
    # most theirs (both are multiples of the page size)
    fit_small = has_pages & whole_small & (memory_kb <= col("cell_small_free_kb"))
    fit_2m = fits(col("cell_free_2m_pages"), 2048)
    fit_1g = fits(col("cell_free_1g_pages"), 1048576)
    if request == numa_topology.PAGES_SMALL:
        paged = fit_small
    elif request == numa_topology.PAGES_ANY:
        paged = fit_small | fit_2m | fit_1g
    elif request == numa_topology.PAGES_LARGE:
        paged = has_pages & ((fit_2m & (small != 2048)) | (fit_1g & (small != 1048576)))
    elif request == 2048:
        paged = fit_2m
    elif request == 1048576:
        paged = fit_1g
    else:
        return None
    if cell.cpuset:
        # shared vCPUs stay within the RAM ratio in pages too
        paged = paged & (usage + cell.memory_mb <= memory_mb * ram_ratio)
    if request in (numa_topology.PAGES_SMALL, numa_topology.PAGES_ANY):
        return (~has_pages & plain) | (has_pages & paged)
    return paged


def _sure_cells(cols, cell, reserve: int):
    """Per host cell (the first ``cols.cell_columns``): certainly room for guest
    ``cell`` (``reserve``: the emulator threads' pCPU it brings), i.e. the
    pinned CPUs its thread policy needs, room for its shared CPUs, and its
    memory — in small pages (free ones for pinned vCPUs, in all for shared)
    within the cell's memory and RAM ratio (at most 1 for pinned vCPUs) when it
    asks no page size, or in free pages of a size it allows. None: unknown."""
    policy = cell.cpu_thread_policy
    wanted = len(cell.pcpuset) + reserve
    if policy == numa_topology.ISOLATE and wanted \
            and host_state.isolate_on_smt_hosts() == "refuse":
        return None
    k = cols.cell_columns          # only the cell columns some host uses

    def col(name):
        return getattr(cols, name)[:, :k]
    memory = _sure_memory(col, cols.ram_ratio[:, None], cell)
    if memory is None:
        return None
    ok = (col("cell_memory_mb") >= 0) & memory
    if wanted:
        ok &= col("cell_free_pcpus") >= wanted
        if policy == numa_topology.ISOLATE:
            ok &= col("cell_free_cores") >= wanted
        elif policy == numa_topology.REQUIRE:
            ok &= col("cell_free_pair_cpus") >= wanted - reserve
    if cell.cpuset:
        ok &= col("cell_shared_room") >= len(cell.cpuset)
    return ok


class NUMATopologyFilter(BaseHostFilter):
    """Passes hosts where ``numa.fitting`` finds a fit (``HostState.numa_reason``),
    PCI devices on the chosen cells included.

    Requests without a guest NUMA topology pass everywhere. Hosts in the same
    NUMA state are checked once per request shape: the same topology with its
    usage, plus what this guest reads besides — the allocation ratios (not for
    a guest with only pinned vCPUs) and the PCI pools (only when it asks for
    devices).
    """

    def prepare(self, request):
        spec = request.spec
        return SKIP if spec.numa_topology is None else spec

    def class_keys(self):
        return {"": lambda host: host.numa_signature(),
                "pci": lambda host: host.fit_signature(),
                "pinned": _pinned_key,
                "pinned-pci": lambda host: _pinned_key(host) + (host.pci_pools,)}

    def class_for(self, spec) -> str:
        pinned = all(not cell.cpuset for cell in spec.numa_topology.cells)
        which = "pinned" if pinned else ""
        if spec.pci_requests:
            which = f"{which}-pci" if which else "pci"
        return which

    def memo_key(self, spec):
        return spec.fit_key

    def screen(self, cols, spec):
        """Hosts no guest cell can go on, from the ``numa_*`` columns: every guest
        cell needs a host cell of its own with enough free pCPUs (whole cores
        for ``isolate``, sibling pairs for ``require``), shared CPU room and free
        pages of an explicit large size; PCI and plain memory are left to the
        check."""
        guest = spec.numa_topology
        refused = ~cols.has_numa | (cols.numa_cells < len(guest.cells))
        reserve = 1 if guest.emulator_threads_isolated else 0
        pinned_total = 0
        for index, cell in enumerate(guest.cells):
            cell_reserve = reserve if index == 0 else 0
            wanted = len(cell.pcpuset) + cell_reserve
            pinned_total += wanted
            if wanted:
                refused |= cols.numa_free_pcpus < wanted
                if cell.cpu_thread_policy == numa_topology.ISOLATE:
                    refused |= cols.numa_free_cores < wanted
                elif cell.cpu_thread_policy == numa_topology.REQUIRE:
                    # the vCPUs on sibling pairs; the emulator threads' CPU anywhere
                    refused |= cols.numa_free_pair_cpus < wanted - cell_reserve
            if cell.cpuset:
                refused |= cols.numa_shared_room < len(cell.cpuset)
            page_column = _PAGE_COLUMNS.get(cell.pagesize)
            if page_column is not None:
                refused |= getattr(cols, page_column) < cell.memory_mb * 1024
        if pinned_total:
            refused |= cols.numa_free_pcpus_total < pinned_total
        return refused

    def sure_passes(self, cols, spec):
        """Hosts that certainly take a guest without PCI devices: as many host
        cells (of the first ``MAX_CELLS``) as the guest has cells, each certainly
        taking every guest cell (``_sure_cells``), so that the guest cells go on
        distinct ones whatever the pairing (one guest cell: some such host cell)."""
        guest = spec.numa_topology
        if spec.pci_requests or not cols.cell_columns:
            return False
        reserve = 1 if guest.emulator_threads_isolated else 0
        every = None
        for index, cell in enumerate(guest.cells):
            ok = _sure_cells(cols, cell, reserve if index == 0 else 0)
            if ok is None:
                return False
            every = ok if every is None else np.logical_and(every, ok, out=every)
        if len(guest.cells) == 1:
            return cols.has_numa & every.any(axis=1)
        return cols.has_numa & (np.count_nonzero(every, axis=1) >= len(guest.cells))

    def host_passes(self, host, spec) -> str | None:
        return host.numa_reason(spec)
