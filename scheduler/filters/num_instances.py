"""NumInstancesFilter and AggregateNumInstancesFilter: cap instances per host."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.filters.count_limit import AggregateLimit, CountLimitFilter

num_instances_opts = [
    cfg.IntOpt("max_instances_per_host",
               default=50, min=1,
               help="Most instances a host may run (NumInstancesFilter). "
                    "AggregateNumInstancesFilter lets an aggregate's "
                    "max_instances_per_host metadata override it (the smallest when "
                    "several aggregates set it)."),
]

cfg.CONF.register_opts(num_instances_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", num_instances_opts)]


class NumInstancesFilter(CountLimitFilter):
    """Removes hosts already running ``max_instances_per_host`` instances."""

    column = "num_instances"
    option = "max_instances_per_host"
    reason = "max instances per host reached ({limit})"


class AggregateNumInstancesFilter(AggregateLimit, NumInstancesFilter):
    """NumInstancesFilter with the limit from ``max_instances_per_host`` aggregate
    metadata (the smallest valid value), else the configured one."""
