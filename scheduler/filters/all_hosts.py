"""AllHostsFilter: passes every host (a no-op, for testing and tiny fleets)."""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter


class AllHostsFilter(BaseHostFilter):
    """Every host passes."""

    run_filter_once_per_request = True

    def prepare(self, request):
        return SKIP

    def refusals(self, cols, state):
        return []
