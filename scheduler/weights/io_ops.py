"""IoOpsWeigher: prefer hosts with fewer I/O operations in progress (by default)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

io_ops_weight_opts = [
    cfg.FloatOpt("io_ops_weight_multiplier",
                 default=-1.0,
                 help="Multiplier of IoOpsWeigher (I/O operations in progress on the "
                      "host). Negative (default) prefers the least busy hosts; positive "
                      "the busiest. An aggregate's io_ops_weight_multiplier metadata "
                      "overrides it for its hosts."),
]

cfg.CONF.register_opts(io_ops_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", io_ops_weight_opts)]


class IoOpsWeigher(BaseWeigher):
    """Raw weight: the host's I/O operations in progress."""

    multiplier_option = "io_ops_weight_multiplier"
    aggregate_multiplier_key = "io_ops_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.num_io_ops
