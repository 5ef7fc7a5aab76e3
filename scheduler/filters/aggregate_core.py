"""AggregateCoreFilter: CoreFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``cpu_allocation_ratio`` (the smallest when
they disagree; invalid values are ignored), else the host's own ratio.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters.core import CoreFilter


class AggregateCoreFilter(CoreFilter):
    """CoreFilter honouring ``cpu_allocation_ratio`` aggregate metadata."""

    def vcpus_limit(self, host) -> float:
        ratio = host.cpu_allocation_ratio
        if host.aggregates:
            ratio = host.aggregate_min_float("cpu_allocation_ratio", ratio)
        return (host.vcpus - host.reserved_host_cpus) * ratio

    def vcpus_limit_vector(self, cols):
        values, present = cols.aggregate_min("cpu_allocation_ratio")
        return cols.vcpus_usable * np.where(present, values, cols.cpu_ratio)
