"""ComputeFilter: the host's compute service is enabled and heartbeating."""
from __future__ import annotations

import datetime

from oslo_config import cfg

from scheduler.filters import BaseHostFilter
from scheduler.host_columns import seconds

service_opts = [
    cfg.IntOpt("service_down_time",
               default=60, min=1,
               help="Seconds since a host's last heartbeat after which its compute "
                    "service is considered down; ComputeFilter removes such hosts."),
]

cfg.CONF.register_opts(service_opts)

LIST_OPTS = [("DEFAULT", service_opts)]


class ComputeFilter(BaseHostFilter):
    """Removes disabled hosts and hosts whose service is down. A host that never
    sent a heartbeat is statically managed (fleet file) and counts as up."""

    run_filter_once_per_request = True

    def prepare(self, request) -> float:
        """The oldest acceptable heartbeat, in epoch seconds."""
        down = datetime.timedelta(seconds=request.conf.service_down_time)
        return seconds(request.now - down)

    def refusals(self, cols, cutoff: float):
        # Never-heartbeating hosts hold +inf, so they are never older than the cutoff.
        return [("disabled", cols.disabled), ("service down", cols.heartbeat < cutoff)]
