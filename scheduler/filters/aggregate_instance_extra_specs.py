"""AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata.

Checked extra specs (Nova's rules): keys scoped ``aggregate_instance_extra_specs:``
(the scope is stripped) and unscoped keys (no ``:``); other scopes are ignored.
The host passes when, for every such key, one of its aggregates' values for it
satisfies the requirement (operators of :mod:`scheduler.filters.extra_specs_ops`).
A metadata value may list several values separated by commas. A host whose
aggregates lack the key fails.
"""
from __future__ import annotations

from scheduler.filters import BaseHostFilter, FilterContext
from scheduler.filters.extra_specs_ops import Predicate, compile_requirement

SCOPE = "aggregate_instance_extra_specs"


def parse_extra_specs(extra_specs) -> tuple[tuple[str, Predicate, str], ...]:
    """(metadata key, predicate, reason) per checked extra spec (once per request)."""
    out = []
    for key, req in extra_specs.items():
        scope, sep, rest = key.partition(":")
        if not sep:
            name = key
        elif scope == SCOPE and rest:
            name = rest
        else:
            continue
        out.append((name, compile_requirement(req),
                    f"aggregate metadata does not satisfy {key}='{req}'"))
    return tuple(out)


class AggregateInstanceExtraSpecsFilter(BaseHostFilter):
    """Removes hosts whose aggregates' metadata doesn't satisfy the flavor's extra specs."""

    # A host's aggregates don't change within a request.
    run_filter_once_per_request = True

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self._parsed: tuple = (None, ())

    def requirements(self, spec) -> tuple[tuple[str, Predicate, str], ...]:
        cached = self._parsed
        if cached[0] is not spec:
            cached = self._parsed = (spec, parse_extra_specs(spec.extra_specs))
        return cached[1]

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        requirements = self.requirements(spec)
        if not requirements:
            return None
        aggregates = host.aggregates
        for name, check, reason in requirements:
            if not any(check(value.strip())
                       for agg in aggregates if name in agg.metadata
                       for value in agg.metadata[name].split(",")):
                return reason
        return None
