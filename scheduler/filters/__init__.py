"""Host filters: the plugin contract. One filter per module, loaded by name
through stevedore (namespace ``berth.scheduler.filters``).

A filter answers *why not*. It has one rule, written in one of two forms:

* **per host** — ``host_passes(host, state)`` returns ``None`` when the host can
  take the request, or a short non-empty reason. This is the simple form and
  works everywhere. A filter whose answer depends only on some attributes of
  the host adds ``class_key(host)``: hosts with equal keys form one class and
  are asked once per request (Nomad's computed node classes), so identical
  hosts cost one check. With ``memo_key(state)`` as well, a class's answer is
  remembered across requests that have the same memo key.
* **vector** — ``refusals(cols, state)`` returns ``[(reason, refused), ...]``
  over the rows of a :class:`scheduler.host_columns.HostColumns` (``refused``
  a bool array, or one bool for every row); a host refused by several entries
  gets the first reason. The per-host answer is derived from it, so there is
  nothing to keep in step.

A per-host filter may add ``screen(cols, state)``: a bool mask of rows that
certainly fail (a necessary condition in vector form, e.g. "fewer free pCPUs
than the guest pins"). Screened rows are not asked when only the passing hosts
are needed; they are asked for their reason when a request is explained. A
screen may miss failing hosts, never refuse a passing one. Likewise
``sure_passes(cols, state)``: a mask of rows that certainly pass (a sufficient
condition), which are never asked. ``scheduler.testing.check_filter`` checks
both against the per-host answers.

``prepare(request)`` (optional) turns the :class:`scheduler.plugins.RequestContext`
into the filter's per-request state, which the check receives; it returns
``SKIP`` when every host passes (e.g. no zone requested). Without it the
check receives the request context itself.

Hosts failing for the same cause must get the same text (NoValidHost groups
reasons by text), so put request values in the text, not host values:
``"insufficient RAM: need 8192 MB"``. A reason that is not a non-empty string
is a plugin error (the request fails with ``PluginError`` naming the filter),
the same on every path.

A new filter is a few lines::

    class GoldOnlyFilter(BaseHostFilter):
        def host_passes(self, host, request):
            if host.stats.get("tier") != "gold":
                return "not a gold host"
            return None

        def class_key(self, host):          # optional: one check per tier
            return host.stats.get("tier")

registered under ``berth.scheduler.filters`` in its package's entry points.
``scheduler.testing.check_filter`` checks a filter's answers (and, when it has
both forms, that they agree) on random fleets.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from scheduler.plugins import SKIP, RequestContext, overrides

FILTER_NAMESPACE = "berth.scheduler.filters"

__all__ = ["FILTER_NAMESPACE", "SKIP", "BaseHostFilter", "RequestContext"]


class BaseHostFilter:
    """Base class of every filter. Override ``host_passes`` or ``refusals``."""

    #: The answer does not depend on instances placed earlier in the same
    #: multi-instance request: the first instance's answers are reused.
    run_filter_once_per_request = False

    def __init__(self, conf) -> None:
        self.conf = conf

    @property
    def name(self) -> str:
        return type(self).__name__

    def prepare(self, request: RequestContext) -> Any:
        """The per-request state the check receives, or ``SKIP`` when every host
        passes. Called once per instance of a request (once per request for
        ``run_filter_once_per_request`` filters)."""
        return request

    def host_passes(self, host, state) -> str | None:
        """Per-host form: ``None`` if ``host`` (a HostState) can take the request,
        otherwise a short non-empty reason."""
        raise NotImplementedError

    def refusals(self, cols, state) -> Sequence[tuple[str, Any]]:
        """Vector form: ``[(reason, refused_rows_mask_or_bool), ...]`` over the rows
        of ``cols``; empty when every row passes."""
        raise NotImplementedError

    def screen(self, cols, state) -> Any:
        """Optional, per-host form only: a bool mask over the rows of ``cols``
        of hosts that certainly fail (their reason is asked only to explain)."""
        raise NotImplementedError

    def sure_passes(self, cols, state) -> Any:
        """Optional, per-host form only: a bool mask over the rows of ``cols``
        of hosts that certainly pass (they are not asked)."""
        raise NotImplementedError

    def class_key(self, host) -> Hashable:
        """Optional, per-host form only: hosts with equal keys get the same answer
        for the same state. Computed when a host changes, never per request."""
        raise NotImplementedError

    def class_keys(self) -> Mapping[str, Callable[[Any], Hashable]]:
        """Optional: several named class keys, for filters whose rule reads more
        of the host for some requests than for others (``class_for`` picks one
        per request). Default: ``class_key`` under the name ``""``."""
        return {"": self.class_key}

    def class_for(self, state) -> str | None:
        """Which of ``class_keys`` answers for this request; ``None`` when this
        request reads more than any key covers (then every host is asked)."""
        return ""

    def memo_key(self, state) -> Hashable | None:
        """Optional, with classes: what the answer depends on in ``state``; class
        answers are remembered across requests with equal memo keys. ``None``:
        remember within the request only."""
        return None

    # -- what the framework asks ----------------------------------------------
    @property
    def has_vector(self) -> bool:
        return overrides(self, BaseHostFilter, "refusals")

    @property
    def has_per_host(self) -> bool:
        return overrides(self, BaseHostFilter, "host_passes")

    @property
    def has_screen(self) -> bool:
        return overrides(self, BaseHostFilter, "screen")

    @property
    def has_sure_passes(self) -> bool:
        return overrides(self, BaseHostFilter, "sure_passes")

    @property
    def has_classes(self) -> bool:
        return overrides(self, BaseHostFilter, "class_key") or \
            overrides(self, BaseHostFilter, "class_keys")

    def class_column(self, which: str) -> str:
        """The name of the host-columns class column for ``class_keys()[which]``."""
        return self.name if which == "" else f"{self.name}:{which}"

    def class_columns(self) -> dict[str, Callable[[Any], Hashable]]:
        """Class column name -> key function, for every key of this filter."""
        return {self.class_column(k): fn for k, fn in self.class_keys().items()}
