"""RamFilter: the request's MEMORY_MB fits some provider of the node (the
ledger's rule: used + asked <= (total - reserved) x ratio, within min/max unit)."""
from __future__ import annotations

from db.inventory import MEMORY_MB
from scheduler.filters.resources import ResourceView


class RamFilter(ResourceView):
    """Removes hosts without enough RAM, counting the host's allocation ratio."""

    resource_class = MEMORY_MB

    def reason(self, amount: int) -> str:
        return f"insufficient RAM: need {amount} MB"
