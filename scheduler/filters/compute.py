"""ComputeFilter: the host's compute service is enabled and heartbeating."""
from __future__ import annotations

import datetime

from oslo_config import cfg

from scheduler.filters import BaseHostFilter, FilterContext
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
    """Removes disabled hosts and hosts whose service is down."""

    run_filter_once_per_request = True

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self._cutoff: tuple = (None, None)

    def _heartbeat_cutoff(self, ctx: FilterContext) -> datetime.datetime:
        """The oldest acceptable heartbeat for this request (computed once per context)."""
        cached = self._cutoff
        if cached[0] is not ctx:
            down = datetime.timedelta(seconds=self.conf.service_down_time)
            cached = self._cutoff = (ctx, ctx.now - down)
        return cached[1]

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        if host.disabled:
            return "disabled"
        heartbeat = host.last_heartbeat
        # No heartbeat at all: a statically managed host (fleet file) is up.
        if heartbeat is not None and heartbeat < self._heartbeat_cutoff(ctx):
            return "service down"
        return None

    def filter_vector(self, cols, spec, ctx: FilterContext):
        # Never-heartbeating hosts hold +inf, so they are never older than the cutoff.
        cutoff = seconds(self._heartbeat_cutoff(ctx))
        return ~(cols.disabled | (cols.heartbeat < cutoff))
