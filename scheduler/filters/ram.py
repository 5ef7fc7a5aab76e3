"""RamFilter: used RAM + the request fits within (total - reserved) × ram ratio."""
from __future__ import annotations

from scheduler.filters import BaseHostFilter


class RamFilter(BaseHostFilter):
    """Removes hosts without enough RAM, counting the host's allocation ratio."""

    def memory_limit(self, cols):
        """Usable RAM in MB per row (over-commit included)."""
        return cols.memory_limit

    def refusals(self, cols, request):
        need = request.spec.memory_mb
        return [(f"insufficient RAM: need {need} MB",
                 cols.memory_used + need > self.memory_limit(cols))]
