"""RamFilter: used RAM + the request fits within (total - reserved) × ram ratio."""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext


class RamFilter(BaseHostFilter):
    """Removes hosts without enough RAM, counting the host's allocation ratio."""

    uniform_reason = True

    def memory_limit(self, host) -> float:
        """Usable RAM in MB (overcommit included)."""
        return host.memory_mb_limit

    def memory_limit_vector(self, cols):
        """``memory_limit`` of every ``cols`` row."""
        return cols.memory_limit

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        if host.memory_mb_used + spec.memory_mb > self.memory_limit(host):
            return f"insufficient RAM: need {spec.memory_mb} MB"
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        return ~(cols.memory_used + spec.memory_mb > self.memory_limit_vector(cols))
