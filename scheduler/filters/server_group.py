"""ServerGroupAffinityFilter and ServerGroupAntiAffinityFilter (hard policies).

Both read ``request.group_hosts`` (host -> members of the request's server group
there, including instances placed earlier in the same request); they pass
every host for requests without a group or with another policy. The claim
transaction enforces the same policies again in the database, so schedulers
with stale caches cannot break them either.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import SKIP, BaseHostFilter


class ServerGroupAffinityFilter(BaseHostFilter):
    """Policy ``affinity``: once the group has members, only their hosts pass."""

    def prepare(self, request):
        group = request.spec.instance_group
        if group is None or group.policy != "affinity":
            return SKIP
        members = [h for h, n in request.group_hosts.items() if n]
        if not members:
            return SKIP
        return (group.uuid, tuple(members))

    def refusals(self, cols, state):
        group_uuid, members = state
        refused = np.ones(cols.n, dtype=bool)
        refused[cols.host_indexes(members)] = False
        return [(f"not a host of affinity group {group_uuid}", refused)]


class ServerGroupAntiAffinityFilter(BaseHostFilter):
    """Policy ``anti-affinity``: at most ``max_server_per_host`` members (default 1)
    of the group per host."""

    def prepare(self, request):
        group = request.spec.instance_group
        if group is None or group.policy != "anti-affinity":
            return SKIP
        limit = group.max_server_per_host or 1
        full = [h for h, n in request.group_hosts.items() if n >= limit]
        if not full:
            return SKIP
        return (group.uuid, limit, tuple(full))

    def refusals(self, cols, state):
        group_uuid, limit, full = state
        refused = np.zeros(cols.n, dtype=bool)
        refused[cols.host_indexes(full)] = True
        return [(f"anti-affinity group {group_uuid}: max {limit} member(s) per host",
                 refused)]
