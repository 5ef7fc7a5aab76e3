"""CoreFilter: used vCPUs + the request fits within (total - reserved) × cpu ratio.

As in Nova, one instance may not over-commit against itself: a guest with more
vCPUs than the host has physical CPUs never fits, whatever the ratio.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext


class CoreFilter(BaseHostFilter):
    """Removes hosts without enough vCPUs, counting the host's allocation ratio."""

    uniform_reason = True

    def vcpus_limit(self, host) -> float:
        """Usable vCPUs (overcommit included)."""
        return host.vcpus_limit

    def vcpus_limit_vector(self, cols):
        """``vcpus_limit`` of every ``cols`` row."""
        return cols.vcpus_limit

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        vcpus = spec.vcpus
        if vcpus > host.vcpus or host.vcpus_used + vcpus > self.vcpus_limit(host):
            return f"insufficient vCPUs: need {vcpus}"
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        vcpus = spec.vcpus
        return ~((vcpus > cols.vcpus)
                 | (cols.vcpus_used + vcpus > self.vcpus_limit_vector(cols)))
