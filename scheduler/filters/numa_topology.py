"""NUMATopologyFilter: the guest NUMA topology (pinning, pages, PCI affinity) fits."""
from __future__ import annotations

import numpy as np

from scheduler.filters import BaseHostFilter


class NUMATopologyFilter(BaseHostFilter):
    """Passes hosts where ``numa.fitting.fit_instance_to_host`` finds a fit.

    Requests without a NUMA topology pass everywhere. The consume step fits
    again under the host lock with the same function, so what it takes matches
    what this filter checked.
    """

    def host_passes(self, host, spec, ctx):
        if spec.numa_topology is None:
            return None
        result = host.fit_numa(spec)
        return None if result.fitted is not None else result.reason

    def is_noop(self, spec) -> bool:
        return spec.numa_topology is None

    def filter_vector(self, cols, spec, ctx):
        """Hosts without a NUMA topology fail; the others keep their answer
        per guest topology until they change (``HostColumns.memoised``)."""
        if spec.numa_topology is None:
            return None
        from scheduler.host_state import request_token

        return cols.memoised(("numa", request_token(spec)), np.flatnonzero(cols.has_numa),
                             lambda host: host.fit_numa(spec).fitted is not None)
