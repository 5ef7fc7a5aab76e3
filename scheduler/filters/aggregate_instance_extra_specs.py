"""AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata.

Checked extra specs (Nova's rules): keys scoped ``aggregate_instance_extra_specs:``
(the scope is stripped) and unscoped keys (no ``:``); other scopes are ignored.
The host passes when, for every such key, one of its aggregates' values for it
satisfies the requirement (operators of :mod:`scheduler.filters.extra_specs_ops`).
A metadata value may list several values separated by commas. A host whose
aggregates lack the key fails.
"""
from __future__ import annotations

import numpy as np

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
        # (spec, parsed requirements, {id(aggregate): (aggregate, satisfied flags)})
        self._request: tuple = (None, (), {})

    def _for_request(self, spec) -> tuple:
        cached = self._request
        if cached[0] is not spec:
            cached = self._request = (spec, parse_extra_specs(spec.extra_specs), {})
        return cached

    def requirements(self, spec) -> tuple[tuple[str, Predicate, str], ...]:
        return self._for_request(spec)[1]

    @staticmethod
    def _satisfied_by(agg, requirements) -> tuple[bool, ...]:
        """Per requirement: whether this one aggregate's metadata satisfies it."""
        metadata = agg.metadata
        flags = []
        for name, check, _ in requirements:
            raw = metadata.get(name)
            flags.append(raw is not None
                         and any(check(value.strip()) for value in raw.split(",")))
        return tuple(flags)

    def host_passes(self, host, spec, ctx: FilterContext) -> str | None:
        _, requirements, per_aggregate = self._for_request(spec)
        if not requirements:
            return None
        flags = []
        for agg in host.aggregates:
            entry = per_aggregate.get(id(agg))
            if entry is None or entry[0] is not agg:
                entry = per_aggregate[id(agg)] = (agg, self._satisfied_by(agg, requirements))
            flags.append(entry[1])
        for i, (_, _, reason) in enumerate(requirements):
            for satisfied in flags:
                if satisfied[i]:
                    break
            else:
                return reason
        return None

    def is_noop(self, spec) -> bool:
        return not self.requirements(spec)

    def filter_vector(self, cols, spec, ctx: FilterContext):
        # A host without aggregates lacks every key; otherwise ask host_passes
        # (on the survivors of the other filters).
        if cols.has_aggregates.any():
            return None
        return np.zeros(cols.n, dtype=bool)
