"""HypervisorVersionWeigher: prefer hosts with newer hypervisors (by default)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

hypervisor_version_weight_opts = [
    cfg.FloatOpt("hypervisor_version_weight_multiplier",
                 default=1.0,
                 help="Multiplier of HypervisorVersionWeigher. Positive (default) "
                      "prefers hosts with newer hypervisors; negative older ones. An "
                      "aggregate's hypervisor_version_weight_multiplier metadata "
                      "overrides it for its hosts."),
]

cfg.CONF.register_opts(hypervisor_version_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", hypervisor_version_weight_opts)]


class HypervisorVersionWeigher(BaseWeigher):
    """Raw weight: the host's encoded hypervisor version (0 when not reported)."""

    multiplier_option = "hypervisor_version_weight_multiplier"
    aggregate_multiplier_key = "hypervisor_version_weight_multiplier"

    def weigh_vector(self, cols, request):
        return cols.hypervisor_version
