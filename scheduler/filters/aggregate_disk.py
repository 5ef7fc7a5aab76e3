"""AggregateDiskFilter: DiskFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``disk_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters.disk import DiskFilter


class AggregateDiskFilter(DiskFilter):
    """DiskFilter honouring ``disk_allocation_ratio`` aggregate metadata."""

    def disk_limit(self, cols):
        values, present = cols.aggregate_min("disk_allocation_ratio")
        return cols.disk_usable * np.where(present, values, cols.disk_ratio)
