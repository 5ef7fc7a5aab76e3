"""ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher.

For the soft policies, the weight counts the request's group members already on
the host (``ctx.group_hosts``, earlier instances of the same request included):
soft-affinity prefers hosts with more members, soft-anti-affinity fewer. Other
requests weigh 0 everywhere (so these weighers don't change their order).
"""
from __future__ import annotations

import numpy as np
from oslo_config import cfg

from scheduler.weights import BaseWeigher

soft_affinity_weight_opts = [
    cfg.FloatOpt("soft_affinity_weight_multiplier",
                 default=1.0, min=0.0,
                 help="Multiplier of ServerGroupSoftAffinityWeigher (members of a "
                      "soft-affinity group on the host). Must be >= 0. An aggregate's "
                      "soft_affinity_weight_multiplier metadata overrides it for its "
                      "hosts."),
    cfg.FloatOpt("soft_anti_affinity_weight_multiplier",
                 default=1.0, min=0.0,
                 help="Multiplier of ServerGroupSoftAntiAffinityWeigher (minus the "
                      "members of a soft-anti-affinity group on the host). Must be >= 0. "
                      "An aggregate's soft_anti_affinity_weight_multiplier metadata "
                      "overrides it for its hosts."),
]

cfg.CONF.register_opts(soft_affinity_weight_opts, group="filter_scheduler")

LIST_OPTS = [("filter_scheduler", soft_affinity_weight_opts)]


def _members_on_host(host, spec, ctx, policy: str) -> int:
    group = spec.instance_group
    if group is None or group.policy != policy:
        return 0
    return ctx.group_hosts.get(host.host, 0)


def _members_vector(cols, spec, ctx, policy: str, sign: float):
    """``sign`` × the members of the request's ``policy`` group on each row's host."""
    group = spec.instance_group
    if group is None or group.policy != policy:
        return 0.0                      # 0 everywhere
    out = np.zeros(cols.n, dtype=np.float64)
    for host, members in ctx.group_hosts.items():
        if members:
            out[cols.index_by_host.get(host, [])] = sign * members
    return out


class ServerGroupSoftAffinityWeigher(BaseWeigher):
    """Raw weight: members of the request's soft-affinity group on the host."""

    multiplier_option = "soft_affinity_weight_multiplier"
    aggregate_multiplier_key = "soft_affinity_weight_multiplier"

    def weigh(self, host, spec, ctx) -> float:
        return _members_on_host(host, spec, ctx, "soft-affinity")

    def weigh_vector(self, cols, spec, ctx):
        return _members_vector(cols, spec, ctx, "soft-affinity", 1.0)


class ServerGroupSoftAntiAffinityWeigher(BaseWeigher):
    """Raw weight: minus the members of the request's soft-anti-affinity group on the host."""

    multiplier_option = "soft_anti_affinity_weight_multiplier"
    aggregate_multiplier_key = "soft_anti_affinity_weight_multiplier"

    def weigh(self, host, spec, ctx) -> float:
        return -_members_on_host(host, spec, ctx, "soft-anti-affinity")

    def weigh_vector(self, cols, spec, ctx):
        return _members_vector(cols, spec, ctx, "soft-anti-affinity", -1.0)
