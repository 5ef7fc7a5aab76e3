"""AggregateTypeAffinityFilter: aggregates reserved for some flavors.

A host whose aggregates set ``instance_type`` metadata (a flavor name, or
several separated by commas; several aggregates add up) takes only flavors of
those names. Hosts without it take every flavor. A flavor without a name is
refused by such hosts.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter

KEY = "instance_type"


def allowed_flavors(host) -> frozenset[str]:
    """The flavor names the host's aggregates allow (empty: any flavor)."""
    out: set[str] = set()
    for value in host.aggregate_values(KEY):
        out.update(v.strip() for v in value.split(",") if v.strip())
    return frozenset(out)


class AggregateTypeAffinityFilter(BaseHostFilter):
    """Removes hosts whose aggregates' ``instance_type`` does not name the
    request's flavor; hosts in the same aggregates are asked once."""

    # A host's aggregates don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        return (request.spec.flavor.name,)

    def class_key(self, host):
        return host.aggregates

    def memo_key(self, state):
        return state

    def host_passes(self, host, state) -> str | None:
        if not host.aggregates or not host.aggregate_values(KEY):
            return None
        name = state[0]
        if name is None:
            return "host is reserved for other flavors: the flavor has no name"
        if name not in allowed_flavors(host):
            return f"host is reserved for other flavors than {name}"
        return None
