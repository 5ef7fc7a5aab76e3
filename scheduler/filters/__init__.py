"""Host filters: one per module, loaded by name through stevedore.

A filter answers *why not*: ``host_passes`` returns ``None`` when the host can
take the request, or a short reason. Hosts failing for the same cause must get
the same text (NoValidHost groups reasons by text), so put request values in
the text, not host values: ``"insufficient RAM: need 8192 MB"``.

A new filter is a dozen lines::

    class GoldOnlyFilter(BaseHostFilter):
        def host_passes(self, host, spec, ctx):
            if host.stats.get("tier") != "gold":
                return "not a gold host"
            return None

registered under ``berth.scheduler.filters`` in its package's entry points.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

FILTER_NAMESPACE = "berth.scheduler.filters"


@dataclasses.dataclass
class FilterContext:
    """Per-request values shared by filters and weighers (computed once).

    ``group_hosts`` counts, per host name, the members of the request's server
    group placed there (including instances placed earlier in this request).
    """

    now: datetime.datetime
    conf: object
    group_hosts: Mapping[str, int] = dataclasses.field(default_factory=dict)


class BaseHostFilter:
    """Base class of every filter."""

    #: The answer depends only on the request, not on instances placed earlier
    #: in the same multi-instance request: evaluate once per request.
    run_filter_once_per_request = False

    #: Every host this filter removes for a given request gets the same reason
    #: text (e.g. "insufficient RAM: need 8192 MB"), so explaining a NoValidHost
    #: needs the text of one of them, not of each.
    uniform_reason = False

    def __init__(self, conf) -> None:
        self.conf = conf

    @property
    def name(self) -> str:
        return type(self).__name__

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        """``None`` if ``host`` can take ``spec``; otherwise a short reason."""
        raise NotImplementedError

    def is_noop(self, spec) -> bool:
        """True when this filter passes every host for ``spec`` (e.g. a NUMA
        filter for a request without a NUMA topology): the fast path skips it."""
        return False

    def filter_vector(self, cols, spec, ctx: FilterContext):
        """Optional fast path: a numpy bool mask over ``cols`` (HostColumns) rows,
        True where ``host_passes`` would return None; or None when this filter
        (or this request) has no vector form, and ``host_passes`` runs per host.
        A test checks every vector form against ``host_passes``."""
        return None

    def filter_all(self, hosts: list, spec, ctx: FilterContext):
        """Split ``hosts`` into (passed, [(host, reason), ...])."""
        passed, failed = [], []
        check = self.host_passes
        for host in hosts:
            reason = check(host, spec, ctx)
            if reason is None:
                passed.append(host)
            else:
                failed.append((host, reason))
        return passed, failed
