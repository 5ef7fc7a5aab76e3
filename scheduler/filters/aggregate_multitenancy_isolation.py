"""AggregateMultiTenancyIsolation: aggregates reserved for some projects.

A host whose aggregates set ``filter_tenant_id`` (or any key starting with it:
``filter_tenant_id_2``…, for more projects than one value holds; a value may
list several, separated by commas; empty values are ignored) takes instances
of those projects only.
Other hosts take every project; the projects listed may still go elsewhere.
A request without ``project_id`` is refused by reserved hosts.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter

KEY_PREFIX = "filter_tenant_id"


def allowed_projects(host) -> frozenset[str]:
    """The projects the host's aggregates reserve it for (empty: any project)."""
    out: set[str] = set()
    for agg in host.aggregates:
        for key, value in agg.metadata.items():
            if key.startswith(KEY_PREFIX):
                out.update(v.strip() for v in value.split(",") if v.strip())
    return frozenset(out)


class AggregateMultiTenancyIsolation(BaseHostFilter):
    """Removes hosts reserved (by aggregate metadata) for other projects; hosts in
    the same aggregates are asked once."""

    # A host's aggregates don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        return (request.spec.project_id,)

    def class_key(self, host):
        return host.aggregates

    def memo_key(self, state):
        return state

    def host_passes(self, host, state) -> str | None:
        if not host.aggregates:
            return None
        allowed = allowed_projects(host)
        if not allowed:
            return None
        project = state[0]
        if project is None:
            return "host is reserved for other projects: no project_id given"
        if project not in allowed:
            return f"host is reserved for other projects than {project}"
        return None
