"""DiskWeigher: prefer hosts with more free local disk (spread), or less with a
negative multiplier (stack)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

disk_weight_opts = [
    cfg.FloatOpt("disk_weight_multiplier",
                 default=1.0,
                 help="Multiplier of DiskWeigher (free local disk). Positive spreads "
                      "instances over the hosts with the most free disk; negative stacks "
                      "them. An aggregate's disk_weight_multiplier metadata overrides it "
                      "for its hosts."),
]

cfg.CONF.register_opts(disk_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", disk_weight_opts)]


class DiskWeigher(BaseWeigher):
    """Raw weight: the host's free local disk in MB (total less reserved and allocated)."""

    multiplier_option = "disk_weight_multiplier"
    aggregate_multiplier_key = "disk_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.free_disk
