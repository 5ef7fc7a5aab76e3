"""NUMATopologyFilter: the guest NUMA topology (pinning, pages, PCI affinity) fits."""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.host_state import isolate_on_smt_hosts


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

    def host_passes(self, host, spec) -> str | None:
        return host.numa_reason(spec)
