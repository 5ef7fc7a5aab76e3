"""CoreFilter: the request's VCPU fits some provider of the node (the ledger's
rule: used + asked <= (total - reserved) x ratio, within min/max unit).

As in Nova, one instance may not over-commit against itself: a node's VCPU
``max_unit`` is its total, so a guest with more vCPUs than the node has shared
CPUs never fits, whatever the ratio. A guest with dedicated CPUs asks PCPU
instead (checked with every other class by ResourcesFilter).
"""
from __future__ import annotations

from db.inventory import VCPU
from scheduler.filters.resources import ResourceView


class CoreFilter(ResourceView):
    """Removes hosts without enough vCPUs, counting the host's allocation ratio."""

    resource_class = VCPU

    def reason(self, amount: int) -> str:
        return f"insufficient vCPUs: need {amount}"
