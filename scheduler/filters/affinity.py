"""SameHostFilter and DifferentHostFilter: placement relative to given instances.

The ``same_host`` / ``different_host`` scheduler hints list instance UUIDs; a
node's instances are the allocations Berth holds on it.
"""
from __future__ import annotations

import numpy as np

from scheduler.filters import SKIP, BaseHostFilter


def _nodes(request, uuids) -> tuple[int, ...] | None:
    if not uuids:
        return None
    return tuple(request.instance_nodes[u] for u in uuids if u in request.instance_nodes)


class SameHostFilter(BaseHostFilter):
    """Keeps only nodes running at least one of the ``same_host`` instances."""

    run_filter_once_per_request = True

    def prepare(self, request):
        nodes = _nodes(request, request.spec.scheduler_hints.same_host)
        return SKIP if nodes is None else nodes

    def refusals(self, cols, nodes):
        refused = np.ones(cols.n, dtype=bool)
        refused[cols.node_indexes(nodes)] = False
        return [("not on the same host as the same_host instances", refused)]


class DifferentHostFilter(BaseHostFilter):
    """Removes nodes running any of the ``different_host`` instances."""

    run_filter_once_per_request = True

    def prepare(self, request):
        nodes = _nodes(request, request.spec.scheduler_hints.different_host)
        return SKIP if not nodes else nodes

    def refusals(self, cols, nodes):
        refused = np.zeros(cols.n, dtype=bool)
        refused[cols.node_indexes(nodes)] = True
        return [("runs one of the different_host instances", refused)]
