"""How victim sets are compared when a request preempts (``[preemption] victim_cost``).

A cost plugin turns a set of victims into a sortable key; the search takes the
set with the smallest key among those that make the request fit, and among
sets of the fewest victims first (the search goes by number of victims: a
plugin orders sets of one size). Plugins are entry points in the
``berth.scheduler.preemption_costs`` namespace, like filters and weighers.
"""
from __future__ import annotations

from collections.abc import Sequence

COST_NAMESPACE = "berth.scheduler.preemption_costs"


class BaseVictimCost:
    """Base class of victim cost plugins."""

    def __init__(self, conf) -> None:
        self.conf = conf

    def cost(self, victims: Sequence) -> tuple:
        """A sortable key of ``victims`` (``db.preemption.Candidate``s of one
        host): the smallest is preempted."""
        raise NotImplementedError

    #: Whether one victim's cost orders as (priority, newest first): then the
    #: database can list the cheapest single victims directly.
    single_by_priority_then_newest = False

    #: Whether ``bound`` stays a bound when ``newest`` is the creation time of
    #: the host's ``size``-th newest candidate (no set of ``size`` of them has
    #: an oldest member newer than that): then the search passes that, a
    #: tighter bound for plugins that count the oldest victim.
    bound_uses_kth_newest = False

    def bound(self, size: int, min_priority: int, newest) -> tuple | None:
        """A key no set of ``size`` victims of a host can beat, given the lowest
        priority and the newest creation time among its candidates (None: no
        bound; then every host is searched)."""
        return None

    @staticmethod
    def order(candidate) -> tuple:
        """Which candidates of a host are tried first when it has more than
        ``[preemption] exact_search_limit`` of them (cheapest first)."""
        return (candidate.priority, -candidate.created_at.timestamp())


class LeastDisruptionCost(BaseVictimCost):
    """The lowest priorities (the highest victim's first, then their sum), then
    the most recently created (the work lost is the least)."""

    single_by_priority_then_newest = True
    #: the third part of ``cost`` is the oldest victim's creation
    bound_uses_kth_newest = True

    def cost(self, victims: Sequence) -> tuple:
        return (max(v.priority for v in victims), sum(v.priority for v in victims),
                -min(v.created_at.timestamp() for v in victims))

    def bound(self, size: int, min_priority: int, newest) -> tuple | None:
        # each part is a lower bound of the same part of ``cost``
        return (min_priority, size * min_priority,
                -newest.timestamp() if newest is not None else float("-inf"))


def load(name: str, conf) -> BaseVictimCost:
    """The cost plugin named ``name``; an unknown name stops the scheduler."""
    from stevedore import driver

    from scheduler import exception

    try:
        return driver.DriverManager(COST_NAMESPACE, name, invoke_on_load=True,
                                    invoke_args=(conf,)).driver
    except Exception as e:
        raise exception.InvalidRequest(field="preemption.victim_cost",
                                       reason=f"cannot load {name!r}: {e}") from None
