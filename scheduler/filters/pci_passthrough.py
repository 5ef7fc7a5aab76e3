"""PciPassthroughFilter: the host has free devices for every PCI request."""
from __future__ import annotations

import numpy as np

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

    def filter_vector(self, cols, spec, ctx):
        """Hosts with fewer free devices than the request asks for in all fail;
        the others keep their answer until they change (``HostColumns.memoised``)."""
        if not spec.pci_requests:
            return None
        from scheduler.host_state import request_token

        enough = cols.pci_free >= sum(r.count for r in spec.pci_requests)
        return cols.memoised(("pci", request_token(spec)), np.flatnonzero(enough),
                             lambda host: self.host_passes(host, spec, ctx) is None)
