"""ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher.

For the soft policies, the weight counts the request's group members already on
the host (``request.group_hosts``, earlier instances of the same request
included): soft-affinity prefers hosts with more members, soft-anti-affinity
fewer. Other requests (and groups without members yet) weigh the same
everywhere, so these weighers are skipped for them.
"""
from __future__ import annotations

import numpy as np
from oslo_config import cfg

from scheduler.weights import SKIP, BaseWeigher

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


def _members(request, policy: str):
    """The request's group members per host when its group has ``policy`` and
    members somewhere; else ``SKIP`` (every host weighs 0)."""
    group = request.spec.instance_group
    if group is None or group.policy != policy:
        return SKIP
    members = {h: n for h, n in request.group_hosts.items() if n}
    return members or SKIP


def _members_vector(cols, members, sign: float):
    """``sign`` × the group's members on each row's host."""
    out = np.zeros(cols.n, dtype=np.float64)
    for host, count in members.items():
        out[cols.index_by_host.get(host, [])] = sign * count
    return out


class ServerGroupSoftAffinityWeigher(BaseWeigher):
    """Raw weight: members of the request's soft-affinity group on the host."""

    multiplier_option = "soft_affinity_weight_multiplier"
    aggregate_multiplier_key = "soft_affinity_weight_multiplier"

    def prepare(self, request):
        return _members(request, "soft-affinity")

    def weigh_vector(self, cols, members):
        return _members_vector(cols, members, 1.0)


class ServerGroupSoftAntiAffinityWeigher(BaseWeigher):
    """Raw weight: minus the members of the request's soft-anti-affinity group on the host."""

    multiplier_option = "soft_anti_affinity_weight_multiplier"
    aggregate_multiplier_key = "soft_anti_affinity_weight_multiplier"

    def prepare(self, request):
        return _members(request, "soft-anti-affinity")

    def weigh_vector(self, cols, members):
        return _members_vector(cols, members, -1.0)
