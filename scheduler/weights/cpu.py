"""CPUWeigher: prefer hosts with more free vCPUs (spread), or fewer with a negative
multiplier (stack)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

cpu_weight_opts = [
    cfg.FloatOpt("cpu_weight_multiplier",
                 default=1.0,
                 help="Multiplier of CPUWeigher (free vCPUs, allocation ratio included). "
                      "Positive spreads instances over the hosts with the most free "
                      "vCPUs; negative stacks them. An aggregate's cpu_weight_multiplier "
                      "metadata overrides it for its hosts."),
]

cfg.CONF.register_opts(cpu_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", cpu_weight_opts)]


class CPUWeigher(BaseWeigher):
    """Raw weight: free vCPUs within the host's limit ((total - reserved) × ratio - used)."""

    multiplier_option = "cpu_weight_multiplier"
    aggregate_multiplier_key = "cpu_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.vcpus_limit - cols.vcpus_used
