"""IoOpsFilter and AggregateIoOpsFilter: cap concurrent I/O-heavy operations per host.

A host's I/O operations count builds, resizes, snapshots… in progress
(``num_io_ops``, the compute node's current workload).
"""
from __future__ import annotations

from oslo_config import cfg

from scheduler.filters.count_limit import AggregateLimit, CountLimitFilter

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


class IoOpsFilter(CountLimitFilter):
    """Removes hosts with ``max_io_ops_per_host`` or more I/O operations in progress."""

    column = "num_io_ops"
    option = "max_io_ops_per_host"
    reason = "max I/O operations per host reached ({limit})"


class AggregateIoOpsFilter(AggregateLimit, IoOpsFilter):
    """IoOpsFilter with the limit from ``max_io_ops_per_host`` aggregate metadata
    (the smallest valid value), else the configured one."""
