"""CoreFilter: used vCPUs + the request fits within (total - reserved) × cpu ratio.

As in Nova, one instance may not over-commit against itself: a guest with more
vCPUs than the host has physical CPUs never fits, whatever the ratio.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter


class CoreFilter(BaseHostFilter):
    """Removes hosts without enough vCPUs, counting the host's allocation ratio."""

    def vcpus_limit(self, cols):
        """Usable vCPUs per row (over-commit included)."""
        return cols.vcpus_limit

    def refusals(self, cols, request):
        need = request.spec.vcpus
        return [(f"insufficient vCPUs: need {need}",
                 (need > cols.vcpus) | (cols.vcpus_used + need > self.vcpus_limit(cols)))]
