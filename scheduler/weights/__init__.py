"""Weighers: the plugin contract. One weigher per module, loaded by name through
stevedore (namespace ``berth.scheduler.weights``).

A weigher gives each candidate host a raw weight, in one of two forms:
``weigh_vector(cols, state)`` (a float64 array over the rows of a
:class:`scheduler.host_columns.HostColumns`, or one number when every host
weighs the same) or ``weigh(host, state)`` per host (simple, slower).
``prepare(request)`` (optional) builds the per-request state and returns
``SKIP`` when every host would weigh the same (such a weigher changes no
order and is not asked).

The scheduler min-max normalises each weigher's raw weights over the
candidates to [0, 1] (all equal -> all 0), multiplies them by the weigher's
multiplier — ``[filter_scheduler] <multiplier_option>``, or for hosts in an
aggregate whose metadata sets ``aggregate_multiplier_key``, the smallest valid
value there — and sums over weighers. The highest total wins.
"""
from __future__ import annotations

from typing import Any

from scheduler.plugins import SKIP, RequestContext, overrides

WEIGHER_NAMESPACE = "berth.scheduler.weights"

__all__ = ["SKIP", "WEIGHER_NAMESPACE", "BaseWeigher", "RequestContext"]


class BaseWeigher:
    """Base class of every weigher. Override ``weigh`` or ``weigh_vector``."""

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
        """The configured multiplier (1.0 without ``multiplier_option``)."""
        if self.multiplier_option is None:
            return 1.0
        # item access: the same lookup as attribute access, without the failed
        # attribute lookup (and its AttributeError) that precedes oslo.config's
        # __getattr__; read once per weigher per request
        return float(self.conf["filter_scheduler"][self.multiplier_option])

    def prepare(self, request: RequestContext) -> Any:
        """The per-request state the weigh method receives, or ``SKIP``."""
        return request

    def weigh(self, host, state) -> float:
        """Per-host form: the raw (un-normalised) weight of ``host``."""
        raise NotImplementedError

    def weigh_vector(self, cols, state):
        """Vector form: raw weights of every row of ``cols`` (float64 array; read,
        never written, so a column itself may be returned) or one number."""
        raise NotImplementedError

    @property
    def has_vector(self) -> bool:
        return overrides(self, BaseWeigher, "weigh_vector")
