"""MetricsFilter: the host reports every metric MetricsWeigher weighs.

Reads ``[metrics] weight_setting`` (``name=ratio`` pairs; see
:mod:`scheduler.weights.metrics`) and the host's ``metrics`` (name -> number).
A host lacking one of the named metrics (or reporting it as something other
than a number) fails. Without a weight setting every host passes.
"""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.weights.metrics import metric_value, parse_weight_setting


class MetricsFilter(BaseHostFilter):
    """Removes hosts that don't report every ``[metrics] weight_setting`` metric;
    hosts reporting the same metric names are asked once."""

    # A host's metrics don't change within a request.
    run_filter_once_per_request = True

    def __init__(self, conf) -> None:
        super().__init__(conf)
        parse_weight_setting(conf.metrics.weight_setting)      # fail at start-up

    def prepare(self, request):
        names = tuple(name for name, _ in parse_weight_setting(
            request.conf.metrics.weight_setting))
        return names or SKIP

    def class_key(self, host):
        return frozenset(name for name in host.metrics if metric_value(host, name) is not None)

    def memo_key(self, names):
        return names

    def host_passes(self, host, names) -> str | None:
        for name in names:
            if metric_value(host, name) is None:
                return f"does not report the metrics of [metrics] weight_setting: " \
                       f"{', '.join(names)}"
        return None
