"""SameHostFilter and DifferentHostFilter: placement relative to given instances.

The ``same_host`` / ``different_host`` scheduler hints list instance UUIDs; a
host's instances are the allocations Berth holds on it.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext


class SameHostFilter(BaseHostFilter):
    """Keeps only hosts running at least one of the ``same_host`` instances."""

    run_filter_once_per_request = True

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        wanted = spec.scheduler_hints.same_host
        if not wanted:
            return None
        instances = host.instances
        for uuid in wanted:
            if uuid in instances:
                return None
        return "not on the same host as the same_host instances"

    def is_noop(self, spec) -> bool:
        return not spec.scheduler_hints.same_host


class DifferentHostFilter(BaseHostFilter):
    """Removes hosts running any of the ``different_host`` instances."""

    run_filter_once_per_request = True

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        avoided = spec.scheduler_hints.different_host
        if not avoided:
            return None
        instances = host.instances
        for uuid in avoided:
            if uuid in instances:
                return "runs one of the different_host instances"
        return None

    def is_noop(self, spec) -> bool:
        return not spec.scheduler_hints.different_host
