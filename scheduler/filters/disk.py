"""DiskFilter: used disk + the request fits within (total - reserved) × disk ratio.

One instance may not over-commit against itself: its disk (root + ephemeral +
swap) never exceeds the host's physical ``local_gb``, whatever the ratio.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter


class DiskFilter(BaseHostFilter):
    """Removes hosts without enough local disk, counting the host's allocation ratio."""

    def disk_limit(self, cols):
        """Usable disk in MB per row (over-commit included)."""
        return cols.disk_limit

    def refusals(self, cols, request):
        need = request.spec.disk_mb
        return [(f"insufficient disk: need {need} MB",
                 (need > cols.disk_total) | (cols.disk_used + need > self.disk_limit(cols)))]
