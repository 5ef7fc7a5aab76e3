"""PciPassthroughFilter: the host has free devices for every PCI request."""
from __future__ import annotations

from scheduler.filters import BaseHostFilter


class PciPassthroughFilter(BaseHostFilter):
    """Passes hosts whose device pools can serve all the request's PCI requests
    together. NUMA affinity is checked by NUMATopologyFilter, which knows the
    cells the guest lands on; requests without a guest NUMA topology are not
    restricted. The reason names the alias and how many devices are free."""

    def host_passes(self, host, spec, ctx):
        if not spec.pci_requests:
            return None
        if not host.pci_pools:
            return "host has no free PCI devices"
        return host.pci_reason(spec)

    def is_noop(self, spec) -> bool:
        return not spec.pci_requests

    def prefilter_vector(self, cols, spec, ctx):
        """Hosts with fewer free devices than the request asks for in all."""
        if not spec.pci_requests:
            return None
        return cols.pci_free >= sum(r.count for r in spec.pci_requests)
