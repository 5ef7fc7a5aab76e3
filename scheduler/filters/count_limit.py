"""Shared shape of the filters that cap a per-host count (instances, I/O ops).

A subclass names the count (``host_attr`` on HostState, ``column`` on
HostColumns), the ``[filter_scheduler]`` option holding the limit and the
reason text; ``AggregateLimit`` lets aggregate metadata (the key named like the
option, smallest valid value) override the limit per host.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import BaseHostFilter, FilterContext


class CountLimitFilter(BaseHostFilter):
    """Removes hosts whose ``host_attr`` count has reached the limit."""

    host_attr: str = ""
    column: str = ""
    option: str = ""
    reason: str = ""        # e.g. "max instances per host reached ({limit})"

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self._limit: tuple = (None, 0)

    def configured_limit(self, ctx: FilterContext) -> int:
        """The ``[filter_scheduler]`` limit (read once per context)."""
        cached = self._limit
        if cached[0] is not ctx:
            cached = self._limit = (ctx, getattr(self.conf.filter_scheduler, self.option))
        return cached[1]

    def host_limit(self, host, ctx: FilterContext) -> int:
        return self.configured_limit(ctx)

    def host_limit_vector(self, cols, ctx: FilterContext):
        """``host_limit`` of every ``cols`` row (an array or one number for all), or
        None when some row can only be answered by ``host_limit``."""
        return self.configured_limit(ctx)

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        limit = self.host_limit(host, ctx)
        if getattr(host, self.host_attr) >= limit:
            return self.reason.format(limit=limit)
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        limit = self.host_limit_vector(cols, ctx)
        if limit is None:
            return None
        return ~(getattr(cols, self.column) >= limit)


class AggregateLimit:
    """Mixin: the limit from aggregate metadata named like the option (the
    smallest valid value), else the configured one."""

    def host_limit(self, host, ctx: FilterContext) -> int:
        limit = self.configured_limit(ctx)
        if host.aggregates:
            limit = int(host.aggregate_min_float(self.option, limit))
        return limit

    def host_limit_vector(self, cols, ctx: FilterContext):
        limit = self.configured_limit(ctx)
        values, present = cols.aggregate_min(self.option)
        if not present.any():
            return limit
        if not np.isfinite(values[present]).all():
            return None     # int() of it raises in host_limit: keep that behaviour
        return np.where(present, np.trunc(values), limit)
