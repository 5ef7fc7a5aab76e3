"""AggregateCoreFilter: CoreFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``cpu_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters.core import CoreFilter


class AggregateCoreFilter(CoreFilter):
    """CoreFilter honouring ``cpu_allocation_ratio`` aggregate metadata."""

    def vcpus_limit(self, cols):
        values, present = cols.aggregate_min("cpu_allocation_ratio")
        return cols.vcpus_usable * np.where(present, values, cols.cpu_ratio)
