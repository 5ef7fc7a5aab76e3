"""PciPassthroughFilter: the host has free devices for every PCI request."""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter


class PciPassthroughFilter(BaseHostFilter):
    """Passes hosts whose device pools can serve all the request's PCI requests
    together. NUMA affinity is checked by NUMATopologyFilter, which knows the
    cells the guest lands on; requests without a guest NUMA topology are not
    restricted. The reason names the alias and how many devices are free.
    Hosts with the same pools (and cell sockets) are asked once."""

    def prepare(self, request):
        spec = request.spec
        return SKIP if not spec.pci_requests else spec

    def class_key(self, host):
        socket_of = host.socket_of()
        return (host.pci_pools, None if socket_of is None else tuple(sorted(socket_of.items())))

    def memo_key(self, spec):
        return spec.fit_key[1]

    def host_passes(self, host, spec) -> str | None:
        if not host.pci_pools:
            return "host has no free PCI devices"
        return host.pci_reason(spec)
