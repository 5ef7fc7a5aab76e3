"""NumInstancesWeigher: weigh hosts by how many instances they run (off by default)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

num_instances_weight_opts = [
    cfg.FloatOpt("num_instances_weight_multiplier",
                 default=0.0,
                 help="Multiplier of NumInstancesWeigher (instances on the host). 0.0 "
                      "(default) ignores the count; positive packs instances onto the "
                      "fullest hosts; negative spreads them. An aggregate's "
                      "num_instances_weight_multiplier metadata overrides it for its "
                      "hosts."),
]

cfg.CONF.register_opts(num_instances_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", num_instances_weight_opts)]


class NumInstancesWeigher(BaseWeigher):
    """Raw weight: the number of instances on the host."""

    multiplier_option = "num_instances_weight_multiplier"
    aggregate_multiplier_key = "num_instances_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.num_instances
