"""NUMATopologyFilter: the guest NUMA topology (pinning, pages, PCI affinity) fits."""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter


class NUMATopologyFilter(BaseHostFilter):
    """Passes hosts where ``numa.fitting.fit_instance_to_host`` finds a fit
    (``HostState.fit``), PCI devices on the chosen cells included.

    Requests without a guest NUMA topology pass everywhere. Hosts in the same
    NUMA state (topology with its usage, ratios, PCI pools: ``fit_signature``)
    are fitted once, and the claim step reuses that very fit.
    """

    def prepare(self, request):
        spec = request.spec
        return SKIP if spec.numa_topology is None else spec

    def class_key(self, host):
        return host.fit_signature()

    def memo_key(self, spec):
        return spec.fit_key

    def host_passes(self, host, spec) -> str | None:
        return host.fit(spec).reason
