"""BuildFailureWeigher: avoid hosts where builds failed recently (``failed_builds``,
counted by reschedules away from the host)."""
from __future__ import annotations

from oslo_config import cfg

from scheduler.weights import BaseWeigher

build_failure_weight_opts = [
    cfg.FloatOpt("build_failure_weight_multiplier",
                 default=1000000.0,
                 help="Multiplier of BuildFailureWeigher (minus the host's recent build "
                      "failures). Large by default so that a failing host loses to "
                      "every healthy one whatever the other weighers say; 0.0 turns it "
                      "off. An aggregate's build_failure_weight_multiplier metadata "
                      "overrides it for its hosts."),
]

cfg.CONF.register_opts(build_failure_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", build_failure_weight_opts)]


class BuildFailureWeigher(BaseWeigher):
    """Raw weight: minus the host's recent build failures."""

    multiplier_option = "build_failure_weight_multiplier"
    aggregate_multiplier_key = "build_failure_weight_multiplier"

    def weigh_vector(self, cols, request):
        failed = cols.failed_builds
        if not failed.any():
            return 0.0          # no host failed a build: the same weight everywhere
        return -failed
