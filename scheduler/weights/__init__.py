"""Weighers: one per module, loaded by name through stevedore.

Each weigher returns a raw weight per host; the scheduler min-max normalises
the raw weights over the current candidates to [0, 1] (all equal -> all 0),
multiplies by the weigher's multiplier (overridable per aggregate through the
metadata key named by ``aggregate_multiplier_key``) and sums over weighers.
The highest total wins. Weighers keep no state between requests.
"""
from __future__ import annotations

WEIGHER_NAMESPACE = "berth.scheduler.weights"


class BaseWeigher:
    """Base class of every weigher."""

    #: Option in [filter_scheduler] holding the multiplier (e.g. ram_weight_multiplier).
    multiplier_option: str | None = None
    #: Aggregate metadata key that overrides the multiplier for hosts in it.
    aggregate_multiplier_key: str | None = None

    def __init__(self, conf) -> None:
        self.conf = conf

    @property
    def name(self) -> str:
        return type(self).__name__

    def base_multiplier(self) -> float:
        if self.multiplier_option is None:
            return 1.0
        return float(getattr(self.conf.filter_scheduler, self.multiplier_option))

    def weight_multiplier(self, host) -> float:
        """The multiplier for ``host``: the aggregate override if any (the
        smallest when several aggregates set it), else the configured one."""
        base = self.base_multiplier()
        if self.aggregate_multiplier_key and host.aggregates:
            return host.aggregate_min_float(self.aggregate_multiplier_key, base)
        return base

    def weigh(self, host, spec, ctx) -> float:
        """The raw (un-normalised) weight of ``host`` for ``spec``."""
        raise NotImplementedError

    def weigh_vector(self, cols, spec, ctx):
        """Optional fast path: raw weights of every ``cols`` row as a float64
        numpy array (equal to ``weigh`` per host; read, never written, by the
        caller, so a column itself may be returned), a number when every
        host weighs the same (such a weigher changes no order and is skipped),
        or None to call ``weigh`` per host."""
        return None


def normalize(values: list[float]) -> list[float]:
    """Min-max normalise to [0, 1]; all equal gives all 0."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi == lo:
        return [0.0] * len(values)
    span = hi - lo
    return [(v - lo) / span for v in values]
