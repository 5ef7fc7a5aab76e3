"""AvailabilityZoneFilter: the host is in the requested availability zone.

A host's zone comes from its aggregates' ``availability_zone`` metadata (a host
in several zoned aggregates is in each of them; a value may list zones
separated by commas), else the default zone. No zone requested: every host passes.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import BaseHostFilter, FilterContext


class AvailabilityZoneFilter(BaseHostFilter):
    """Removes hosts outside the requested availability zone."""

    uniform_reason = True

    # A host's zone does not change between the instances of one request.
    run_filter_once_per_request = True

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        zone = spec.availability_zone
        if not zone or host.availability_zone == zone:
            return None
        for agg in host.aggregates:
            value = agg.metadata.get("availability_zone")
            if value and zone in (z.strip() for z in value.split(",")):
                return None
        return f"not in {zone}"

    def is_noop(self, spec) -> bool:
        return not spec.availability_zone

    def filter_vector(self, cols, spec, ctx: FilterContext):
        mask = cols.az_code == cols.az(spec.availability_zone)
        # Hosts whose aggregates list further zones: ask host_passes.
        for i in np.flatnonzero(cols.az_extra & ~mask).tolist():
            mask[i] = self.host_passes(cols.hosts[i], spec, ctx) is None
        return mask
