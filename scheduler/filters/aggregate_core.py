"""AggregateCoreFilter: CoreFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``cpu_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

from scheduler.filters.core import CoreFilter
from scheduler.filters.resources import aggregate_ratio


class AggregateCoreFilter(CoreFilter):
    """CoreFilter honouring ``cpu_allocation_ratio`` aggregate metadata."""

    def ratio(self, cols):
        return aggregate_ratio(cols, "cpu_allocation_ratio", self.resource_class)
