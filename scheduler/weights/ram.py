"""RAMWeigher: prefer hosts with more free RAM (spread), or less with a negative
multiplier (stack)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

ram_weight_opts = [
    cfg.FloatOpt("ram_weight_multiplier",
                 default=1.0,
                 help="Multiplier of RAMWeigher (free RAM). Positive spreads instances "
                      "over the hosts with the most free RAM; negative stacks them. "
                      "An aggregate's ram_weight_multiplier metadata overrides it for "
                      "its hosts."),
]

cfg.CONF.register_opts(ram_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", ram_weight_opts)]


class RAMWeigher(BaseWeigher):
    """Raw weight: the host's free RAM in MB (total less reserved and allocated)."""

    multiplier_option = "ram_weight_multiplier"
    aggregate_multiplier_key = "ram_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.free_ram
