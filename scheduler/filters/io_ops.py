"""IoOpsFilter and AggregateIoOpsFilter: cap concurrent I/O-heavy operations per host.

A host's I/O operations count builds, resizes, snapshots… in progress
(``num_io_ops``, the compute node's current workload).
"""
from __future__ import annotations

import numpy as np
from oslo_config import cfg

from scheduler.filters import BaseHostFilter, FilterContext

io_ops_opts = [
    cfg.IntOpt("max_io_ops_per_host",
               default=8, min=0,
               help="Most concurrent I/O-heavy operations (builds, resizes, snapshots…) "
                    "a host may have and still receive instances (IoOpsFilter). "
                    "AggregateIoOpsFilter lets an aggregate's max_io_ops_per_host "
                    "metadata override it (the smallest when several aggregates set it)."),
]

cfg.CONF.register_opts(io_ops_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", io_ops_opts)]


class IoOpsFilter(BaseHostFilter):
    """Removes hosts with ``max_io_ops_per_host`` or more I/O operations in progress."""

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self._limit: tuple = (None, 0)

    def configured_limit(self, ctx: FilterContext) -> int:
        """``[filter_scheduler] max_io_ops_per_host`` (read once per context)."""
        cached = self._limit
        if cached[0] is not ctx:
            cached = self._limit = (ctx, self.conf.filter_scheduler.max_io_ops_per_host)
        return cached[1]

    def host_limit(self, host, ctx: FilterContext) -> int:
        return self.configured_limit(ctx)

    def host_limit_vector(self, cols, ctx: FilterContext):
        """``host_limit`` of every ``cols`` row (an array or one number for all), or
        None when some row can only be answered by ``host_limit``."""
        return self.configured_limit(ctx)

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        limit = self.host_limit(host, ctx)
        if host.num_io_ops >= limit:
            return f"max I/O operations per host reached ({limit})"
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        limit = self.host_limit_vector(cols, ctx)
        if limit is None:
            return None
        return ~(cols.num_io_ops >= limit)


class AggregateIoOpsFilter(IoOpsFilter):
    """IoOpsFilter with the limit from ``max_io_ops_per_host`` aggregate metadata
    (the smallest valid value), else the configured one."""

    def host_limit(self, host, ctx: FilterContext) -> int:
        limit = self.configured_limit(ctx)
        if host.aggregates:
            limit = int(host.aggregate_min_float("max_io_ops_per_host", limit))
        return limit

    def host_limit_vector(self, cols, ctx: FilterContext):
        limit = self.configured_limit(ctx)
        values, present = cols.aggregate_min("max_io_ops_per_host")
        if not present.any():
            return limit
        if not np.isfinite(values[present]).all():
            return None     # int() of it raises in host_limit: keep that behaviour
        return np.where(present, np.trunc(values), limit)
