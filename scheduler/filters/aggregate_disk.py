"""AggregateDiskFilter: DiskFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``disk_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

from scheduler.filters.disk import DiskFilter
from scheduler.filters.resources import aggregate_ratio


class AggregateDiskFilter(DiskFilter):
    """DiskFilter honouring ``disk_allocation_ratio`` aggregate metadata."""

    def ratio(self, cols):
        return aggregate_ratio(cols, "disk_allocation_ratio", self.resource_class)
