"""DiskFilter: used disk + the request fits within (total - reserved) × disk ratio.

One instance may not over-commit against itself: its disk (root + ephemeral +
swap) never exceeds the host's physical ``local_gb``, whatever the ratio.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext


class DiskFilter(BaseHostFilter):
    """Removes hosts without enough local disk, counting the host's allocation ratio."""

    uniform_reason = True

    def disk_limit(self, host) -> float:
        """Usable disk in MB (overcommit included)."""
        return host.disk_mb_limit

    def disk_limit_vector(self, cols):
        """``disk_limit`` of every ``cols`` row."""
        return cols.disk_limit

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        disk_mb = spec.disk_mb
        if disk_mb > host.local_gb * 1024 or host.disk_mb_used + disk_mb > self.disk_limit(host):
            return f"insufficient disk: need {disk_mb} MB"
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        disk_mb = spec.disk_mb
        return ~((disk_mb > cols.disk_total)
                 | (cols.disk_used + disk_mb > self.disk_limit_vector(cols)))
