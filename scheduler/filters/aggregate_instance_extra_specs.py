"""AggregateInstanceExtraSpecsFilter: flavor extra specs against aggregate metadata.

Checked extra specs (Nova's rules): keys scoped ``aggregate_instance_extra_specs:``
(the scope is stripped) and unscoped keys (no ``:``); other scopes are ignored.
The host passes when, for every such key, one of its aggregates' values for it
satisfies the requirement (operators of :mod:`scheduler.filters.extra_specs_ops`).
A metadata value may list several values separated by commas. A host whose
aggregates lack the key fails (so does every host for a scoped key with an
empty name, ``aggregate_instance_extra_specs:``).
"""
from __future__ import annotations

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.filters.extra_specs_ops import Predicate, compile_requirement

SCOPE = "aggregate_instance_extra_specs"


def _checked(key: str) -> str | None:
    """The metadata key an extra spec is checked against, or None (not checked)."""
    scope, sep, rest = key.partition(":")
    if not sep:
        return key
    if scope == SCOPE:
        return rest          # may be empty: no aggregate has that key, every host fails
    return None


def parse_extra_specs(extra_specs) -> tuple[tuple[str, Predicate, str], ...]:
    """(metadata key, predicate, reason) per checked extra spec (once per request)."""
    out = []
    for key, req in extra_specs.items():
        name = _checked(key)
        if name is None:
            continue
        out.append((name, compile_requirement(req),
                    f"aggregate metadata does not satisfy {key}='{req}'"))
    return tuple(out)


class AggregateInstanceExtraSpecsFilter(BaseHostFilter):
    """Removes hosts whose aggregates' metadata doesn't satisfy the flavor's extra
    specs; hosts in the same aggregates are asked once."""

    # A host's aggregates don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        specs = request.spec.extra_specs
        requirements = parse_extra_specs(specs)
        if not requirements:
            return SKIP
        key = tuple(sorted((k, v) for k, v in specs.items() if _checked(k) is not None))
        return (key, requirements)

    def class_key(self, host):
        return host.aggregates

    def memo_key(self, state):
        return state[0]

    def host_passes(self, host, state) -> str | None:
        for name, check, reason in state[1]:
            for agg in host.aggregates:
                raw = agg.metadata.get(name)
                if raw is not None and any(check(v.strip()) for v in raw.split(",")):
                    break
            else:
                return reason
        return None
