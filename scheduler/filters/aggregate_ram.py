"""AggregateRamFilter: RamFilter with the ratio from aggregate metadata.

The ratio is the host's aggregates' ``ram_allocation_ratio`` (the smallest when
they disagree; values that are not finite numbers are ignored), else the host's
own ratio.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters.ram import RamFilter


class AggregateRamFilter(RamFilter):
    """RamFilter honouring ``ram_allocation_ratio`` aggregate metadata."""

    def memory_limit(self, cols):
        values, present = cols.aggregate_min("ram_allocation_ratio")
        return cols.memory_usable * np.where(present, values, cols.ram_ratio)
