"""NUMATopologyFilter: the guest NUMA topology (pinning, pages, PCI affinity) fits."""
from __future__ import annotations

from numa import topology as numa_topology
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
            wanted = len(cell.pcpuset) + (reserve if index == 0 else 0)
            pinned_total += wanted
            if wanted:
                column = {numa_topology.ISOLATE: cols.numa_free_cores,
                          numa_topology.REQUIRE: cols.numa_free_pair_cpus}.get(
                              cell.cpu_thread_policy, cols.numa_free_pcpus)
                refused |= column < wanted
            if cell.cpuset:
                refused |= cols.numa_shared_room < len(cell.cpuset)
            page_column = _PAGE_COLUMNS.get(cell.pagesize)
            if page_column is not None:
                refused |= getattr(cols, page_column) < cell.memory_mb * 1024
        if pinned_total:
            refused |= cols.numa_free_pcpus_total < pinned_total
        return refused

    def host_passes(self, host, spec) -> str | None:
        return host.numa_reason(spec)
