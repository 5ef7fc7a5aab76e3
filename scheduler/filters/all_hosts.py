"""AllHostsFilter: passes every host (a no-op, for testing and tiny fleets)."""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext


class AllHostsFilter(BaseHostFilter):
    """Every host passes."""

    run_filter_once_per_request = True

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        return None

    def is_noop(self, spec) -> bool:
        return True

    def filter_all(self, hosts: list, spec, ctx: FilterContext):
        return list(hosts), []
