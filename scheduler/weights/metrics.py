"""MetricsWeigher: weigh hosts by the metrics they report (``metrics`` in the
fleet file or ``report_compute_node``: name -> number).

``[metrics] weight_setting`` lists ``name=ratio`` pairs; a host's raw weight is
the sum of ``value × ratio`` over them. A host lacking one of the metrics
weighs ``[metrics] weight_of_unavailable`` when ``[metrics] required`` is
false; when it is true (the default, as in Nova) such a host fails the
request with ``PluginError`` naming the host and the metric — enable
MetricsFilter before it to remove those hosts instead. The multiplier is
``[metrics] weight_multiplier``, overridden per host by the
``metrics_weight_multiplier`` metadata of its aggregates.
"""
from __future__ import annotations

import math

from oslo_config import cfg

from scheduler import exception
from scheduler.weights import SKIP, BaseWeigher

metrics_weight_opts = [
    cfg.FloatOpt("weight_multiplier",
                 default=1.0,
                 help="Multiplier of MetricsWeigher. Positive prefers hosts with a larger "
                      "weighted sum of weight_setting metrics, negative a smaller one. An "
                      "aggregate's metrics_weight_multiplier metadata overrides it for its "
                      "hosts."),
    cfg.ListOpt("weight_setting",
                default=[],
                help="Metrics MetricsWeigher weighs, and MetricsFilter requires, as "
                     "name=ratio pairs, e.g. 'cpu.frequency=1.0, cpu.percent=-2.0'. A "
                     "host's raw weight is the sum of value * ratio."),
    cfg.BoolOpt("required",
                default=True,
                help="Whether a candidate host lacking a weight_setting metric fails the "
                     "request (an error naming the host and the metric; put MetricsFilter "
                     "before the weighers to avoid it) rather than weighing "
                     "weight_of_unavailable."),
    cfg.FloatOpt("weight_of_unavailable",
                 default=-10000.0,
                 help="Raw weight of a host lacking a weight_setting metric when "
                      "required is false."),
]

cfg.CONF.register_opts(metrics_weight_opts, group="metrics")

LIST_OPTS = [("metrics", metrics_weight_opts)]


def parse_weight_setting(entries, field: str = "metrics.weight_setting"
                         ) -> tuple[tuple[str, float], ...]:
    """``["name=ratio", ...]`` -> ((name, ratio), ...); raises InvalidRequest
    naming the option (``field``) for a malformed entry or a repeated name."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for entry in entries or ():
        name, sep, ratio = entry.partition("=")
        name = name.strip()
        if not sep or not name:
            raise exception.InvalidRequest(field=field,
                                           reason=f"expected name=ratio, got {entry!r}")
        try:
            value = float(ratio)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise exception.InvalidRequest(
                field=field,
                reason=f"ratio of {name} is not a finite number: {ratio.strip()!r}")
        if name in seen:
            raise exception.InvalidRequest(field=field,
                                           reason=f"{name} is listed twice")
        seen.add(name)
        out.append((name, value))
    return tuple(out)


class _Setting:
    """The parsed ``[metrics]`` options of one request."""

    __slots__ = ("pairs", "required", "unavailable")

    def __init__(self, pairs, required: bool, unavailable: float) -> None:
        self.pairs = pairs
        self.required = required
        self.unavailable = unavailable


def metric_value(host, name: str) -> float | None:
    """The host's value of metric ``name``, or None when it lacks it."""
    value = host.metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


class MetricsWeigher(BaseWeigher):
    """Raw weight: the sum of metric value × ratio over ``[metrics] weight_setting``."""

    aggregate_multiplier_key = "metrics_weight_multiplier"

    def __init__(self, conf) -> None:
        super().__init__(conf)
        parse_weight_setting(conf.metrics.weight_setting)      # fail at start-up

    def base_multiplier(self) -> float:
        return float(self.conf.metrics.weight_multiplier)

    def prepare(self, request):
        m = request.conf.metrics
        pairs = parse_weight_setting(m.weight_setting)
        if not pairs:
            return SKIP
        return _Setting(pairs, m.required, float(m.weight_of_unavailable))

    def weigh(self, host, setting: _Setting) -> float:
        total = 0.0
        for name, ratio in setting.pairs:
            value = metric_value(host, name)
            if value is None:
                if setting.required:
                    raise exception.PluginError(
                        plugin=self.name,
                        reason=f"host {host.host} does not report metric {name} "
                               f"([metrics] required is true; enable MetricsFilter to "
                               f"remove such hosts first)")
                return setting.unavailable
            total += value * ratio
        return total
