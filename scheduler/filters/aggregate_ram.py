"""AggregateRamFilter: RamFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``ram_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

from scheduler.filters.ram import RamFilter
from scheduler.filters.resources import aggregate_ratio


class AggregateRamFilter(RamFilter):
    """RamFilter honouring ``ram_allocation_ratio`` aggregate metadata."""

    def ratio(self, cols):
        return aggregate_ratio(cols, "ram_allocation_ratio", self.resource_class)
