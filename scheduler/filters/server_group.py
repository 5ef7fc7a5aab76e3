"""ServerGroupAffinityFilter and ServerGroupAntiAffinityFilter (hard policies).

Both read ``ctx.group_hosts`` (host -> members of the request's server group
there, including instances placed earlier in the same request); they do
nothing for requests without a group or with another policy.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import BaseHostFilter, FilterContext


class ServerGroupAffinityFilter(BaseHostFilter):
    """Policy ``affinity``: once the group has members, only their hosts pass."""

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        group = spec.instance_group
        if group is None or group.policy != "affinity":
            return None
        members = ctx.group_hosts
        if not members or members.get(host.host):
            return None
        if not any(members.values()):
            return None
        return f"not a host of affinity group {group.uuid}"

    def is_noop(self, spec) -> bool:
        group = spec.instance_group
        return group is None or group.policy != "affinity"

    def filter_vector(self, cols, spec, ctx: FilterContext):
        members = ctx.group_hosts
        if not members or not any(members.values()):
            return np.ones(cols.n, dtype=bool)
        mask = np.zeros(cols.n, dtype=bool)
        mask[cols.host_indexes([h for h, n in members.items() if n])] = True
        return mask


class ServerGroupAntiAffinityFilter(BaseHostFilter):
    """Policy ``anti-affinity``: at most ``max_server_per_host`` members (default 1)
    of the group per host."""

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        group = spec.instance_group
        if group is None or group.policy != "anti-affinity":
            return None
        limit = group.max_server_per_host or 1
        if ctx.group_hosts.get(host.host, 0) >= limit:
            return f"anti-affinity group {group.uuid}: max {limit} member(s) per host"
        return None

    def is_noop(self, spec) -> bool:
        group = spec.instance_group
        return group is None or group.policy != "anti-affinity"

    def filter_vector(self, cols, spec, ctx: FilterContext):
        limit = spec.instance_group.max_server_per_host or 1
        mask = np.ones(cols.n, dtype=bool)
        mask[cols.host_indexes([h for h, n in ctx.group_hosts.items() if n >= limit])] = False
        return mask
