"""ResourcesFilter: what a request asks of the ledger — resource classes,
traits, request groups and aggregates — as Placement answers
``GET /allocation_candidates``.

It runs on every request, after the configured filters, whatever
``enabled_filters`` says: the claim writes the same amounts under the same rule
(``db.inventory``), so a host this filter passed is a host the claim takes. A
NoValidHost names it for the hosts no configured filter refused (a pinned
guest's hosts are explained by NUMATopologyFilter first, say). The classes an
enabled RamFilter, CoreFilter or DiskFilter check (and their ``Aggregate*``
forms) are left to them where the request asks them only in its unnumbered
group, so that their names and reasons stay what operators know.

Nodes without child providers, and any node when the request has neither
traits nor numbered groups, are answered over the columns: per class, some
provider of the tree takes the amount (``ResourceColumns.admits``). A node
with child providers and a request with traits or numbered groups is answered
by ``scheduler.provider_tree.assign``, once per distinct tree and usage.

Reasons name the class or trait: ``no VGPU inventory``, ``insufficient VCPU:
need 4``, ``VGPU 3 above max_unit``, ``lacks trait HW_CPU_X86_AVX512F``, ``has
forbidden trait HW_CPU_HYPERTHREADING``, ``not in aggregate(s) a, b``, ``in an
aggregate isolated to trait(s) CUSTOM_X``.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from oslo_config import cfg

from db import inventory
from scheduler import provider_tree
from scheduler.filters import SKIP, BaseHostFilter
from scheduler.resource_request import ResourceRequest

isolation_opts = [
    cfg.BoolOpt("enable_isolated_aggregate_filtering", default=False,
                help="Keep hosts in an aggregate whose metadata requires traits "
                     "(``trait:NAME=required``) for requests that require every one of "
                     "those traits (flavor or image), as Nova's option of the same name "
                     "does: other requests are not placed there."),
]
cfg.CONF.register_opts(isolation_opts, group="scheduler")

LIST_OPTS = [("scheduler", isolation_opts)]

#: Answers of ``assign`` remembered across requests: (request, tree, usage) -> result.
_ASSIGNED: collections.OrderedDict = collections.OrderedDict()
_MAX_ASSIGNED = 16384


def assigned(request: ResourceRequest, tree, usage) -> tuple:
    """``provider_tree.assign``, remembered by what it depends on."""
    key = (request, tree, usage)
    hit = _ASSIGNED.get(key)
    if hit is None:
        hit = _ASSIGNED[key] = provider_tree.assign(tree, usage, request)
        if len(_ASSIGNED) > _MAX_ASSIGNED:
            _ASSIGNED.popitem(last=False)
    return hit


@dataclasses.dataclass(frozen=True)
class _State:
    request: ResourceRequest
    skip: frozenset[str]                # unnumbered classes a view filter checks
    isolation: bool


class ResourcesFilter(BaseHostFilter):
    """Every resource class, trait and aggregate a request asks (a built-in step)."""

    def __init__(self, conf, views: Sequence[str] = ()) -> None:
        super().__init__(conf)
        #: Classes checked by enabled view filters (RamFilter: MEMORY_MB, ...).
        self.views = frozenset(views)

    def prepare(self, request):
        rr = request.spec.resources
        try:
            isolation = self.conf.scheduler.enable_isolated_aggregate_filtering
        except (cfg.NoSuchOptError, AttributeError):
            isolation = False
        if rr is None or not (rr.groups or rr.member_of or rr.forbidden_aggregates
                              or isolation):
            return SKIP
        numbered = {rc for g in rr.numbered for rc, _ in g.resources}
        if not (rr.numbered or rr.has_traits or rr.member_of or rr.forbidden_aggregates
                or isolation) and \
                all(rc in self.views for rc, _ in rr.unnumbered.resources):
            return SKIP         # the view filters check every class asked
        return _State(rr, frozenset(self.views - numbered), isolation)

    def refusals(self, cols, state: _State):
        rr = state.request
        out: list[tuple[str, np.ndarray]] = []
        out.extend(_aggregate_refusals(cols, rr, state.isolation))
        if not rr.groups:
            return out
        if rr.numbered or rr.has_traits:
            joint = cols.nested
            simple = ~joint
        else:
            joint = None
            simple = np.ones(cols.n, dtype=bool)
        if rr.numbered:
            out.extend(_root_refusals(cols, rr, state.skip, simple))
        else:
            out.extend(_tree_refusals(cols, rr, state.skip, simple))
        if joint is not None and joint.any():
            out.extend(_joint_refusals(cols, rr, joint))
        return out


def _aggregate_refusals(cols, rr: ResourceRequest, isolation: bool):
    """``member_of``, forbidden aggregates and trait-isolated aggregates."""
    if not (rr.member_of or rr.forbidden_aggregates or isolation):
        return []
    rows_of = collections.defaultdict(list)     # aggregate name and uuid -> rows
    isolated: dict[str, list[int]] = {}         # missing traits -> rows
    required = rr.required_traits()
    for agg, agg_rows in cols._aggregate_rows().values():
        rows_of[agg.name].extend(agg_rows)
        rows_of[agg.uuid].extend(agg_rows)
        if isolation:
            wanted = {k[len("trait:"):] for k, v in agg.metadata.items()
                      if k.startswith("trait:") and v == "required"}
            missing = wanted - required
            if missing:
                isolated.setdefault(", ".join(sorted(missing)), []).extend(agg_rows)
    out = []
    for names in rr.member_of:
        inside = np.zeros(cols.n, dtype=bool)
        for name in names:
            inside[rows_of.get(name, [])] = True
        out.append((f"not in aggregate(s) {', '.join(sorted(names))}", ~inside))
    for name in sorted(rr.forbidden_aggregates):
        inside = np.zeros(cols.n, dtype=bool)
        inside[rows_of.get(name, [])] = True
        out.append((f"in forbidden aggregate {name}", inside))
    for traits, rows in sorted(isolated.items()):
        inside = np.zeros(cols.n, dtype=bool)
        inside[rows] = True
        out.append((f"in an aggregate isolated to trait(s) {traits}", inside))
    return out


def _trait_refusals(cols, required, forbidden, rows: np.ndarray):
    out = []
    for trait in sorted(required):
        out.append((f"lacks trait {trait}", rows & ~cols.trait_rows(trait)))
    for trait in sorted(forbidden):
        out.append((f"has forbidden trait {trait}", rows & cols.trait_rows(trait)))
    return out


def _unit_refusals(res, rc: str, amount: int, rows: np.ndarray, root_only: bool = False):
    """Rows where every present slot (the root's only, with ``root_only``)
    breaks one unit limit."""
    return [(f"{rc} {amount} {text}", rows & broken)
            for text, broken in res.unit_breaks(amount, root_only)]


def _tree_refusals(cols, rr: ResourceRequest, skip: frozenset[str], rows: np.ndarray):
    """The unnumbered group alone: per class, some provider of the tree takes
    it (traits: on the root; such rows have no children)."""
    group = rr.unnumbered
    out = _trait_refusals(cols, group.required, group.forbidden, rows)
    for rc, amount in group.resources:
        if rc in skip:
            continue
        res = cols.resources(rc)
        out.append((f"no {rc} inventory", rows & res.lacking()))
        out.extend(_unit_refusals(res, rc, amount, rows))
        out.append((provider_tree.insufficient(rc, amount), rows & res.refused(amount)))
    return out


def _root_refusals(cols, rr: ResourceRequest, skip: frozenset[str], rows: np.ndarray):
    """Numbered groups on nodes without children: every group on the root."""
    numbered = rr.numbered
    if rr.group_policy == "isolate" and len(numbered) > 1:
        return [(f"group_policy isolate: {len(numbered)} numbered groups need as many "
                 f"providers", rows)]
    required: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()
    parts: dict[str, list[int]] = {}
    for g in rr.groups:
        required |= g.required
        forbidden |= g.forbidden
        for rc, amount in g.resources:
            parts.setdefault(rc, []).append(amount)
    out = _trait_refusals(cols, required, forbidden, rows)
    for rc, amounts in parts.items():
        if rc in skip:
            continue
        res = cols.resources(rc)
        total = sum(amounts)
        out.append((f"no {rc} inventory", rows & ~res.present[:, 0]))
        # each group's amount, and their sum: claimed as one allocation
        for amount in dict.fromkeys([*amounts, total]):
            out.extend(_unit_refusals(res, rc, amount, rows, root_only=True))
        out.append((provider_tree.insufficient(rc, total),
                    rows & ~inventory.fits(res.root("used"), total, res.root("total"),
                                           res.root("reserved"),
                                           res.root("allocation_ratio"))))
    return out


def _joint_refusals(cols, rr: ResourceRequest, rows: np.ndarray):
    """Nodes with child providers, for requests with traits or numbered groups:
    asked per distinct tree and usage."""
    by_reason: dict[str, list[int]] = {}
    hosts = cols.hosts
    seen: dict[tuple, str | None] = {}
    for r in np.flatnonzero(rows).tolist():
        hs = hosts[r]
        key = (hs.tree, hs.usage)
        if key not in seen:
            seen[key] = assigned(rr, hs.tree, hs.usage)[1]
        reason = seen[key]
        if reason is not None:
            by_reason.setdefault(reason, []).append(r)
    out = []
    for reason, refused in by_reason.items():
        mask = np.zeros(cols.n, dtype=bool)
        mask[refused] = True
        out.append((reason, mask))
    return out


# -- the classic filters, as views of the same check ----------------------------------------

class ResourceView(BaseHostFilter):
    """A filter that checks one class of the request's unnumbered group, with
    its own reason (RamFilter, CoreFilter, DiskFilter and their aggregate forms).
    ResourcesFilter leaves that class to it."""

    resource_class: str = ""

    def reason(self, amount: int) -> str:
        raise NotImplementedError

    def ratio(self, cols) -> np.ndarray | None:
        """The allocation ratio to use per row (None: each inventory's own)."""
        return None

    def prepare(self, request):
        rr = request.spec.resources
        group = rr.unnumbered if rr is not None else None
        amount = group.amount(self.resource_class) if group is not None else 0
        return amount or SKIP

    def refusals(self, cols, amount: int):
        res = cols.resources(self.resource_class)
        return [(self.reason(amount), res.refused(amount, self.ratio(cols)))]


def view_classes(filters: Sequence) -> list[str]:
    """The classes the enabled view filters check."""
    return [f.resource_class for f in filters if isinstance(f, ResourceView)]


def aggregate_ratio(cols, key: str, rc: str) -> np.ndarray:
    """Per row: the smallest valid ``key`` of the host's aggregates' metadata,
    else the root provider's own allocation ratio of ``rc``."""
    values, present = cols.aggregate_min(key)
    return np.where(present, values, cols.resources(rc).root("allocation_ratio"))


def amounts_text(amounts: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(amounts.items()))
