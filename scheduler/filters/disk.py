"""DiskFilter: the request's DISK_GB fits some provider of the node (the
ledger's rule: used + asked <= (total - reserved) x ratio, within min/max unit).

A request's disk is ``root_gb + ephemeral_gb`` and its swap rounded up to whole
GB (``resources:DISK_GB`` overrides it). One instance may not over-commit
against itself: a node's DISK_GB ``max_unit`` is its ``local_gb``.
"""
from __future__ import annotations

from db.inventory import DISK_GB
from scheduler.filters.resources import ResourceView


class DiskFilter(ResourceView):
    """Removes hosts without enough local disk, counting the host's allocation ratio."""

    resource_class = DISK_GB

    def reason(self, amount: int) -> str:
        return f"insufficient disk: need {amount} GB"
