"""Preemption: where a request that fits nowhere would fit if instances of lower
priority gave their room (doc/source/admin/preemption.rst).

The search reads the ledger once for the nodes where eligible instances hold
anything (``db.preemption.freeable_by_node``: one GROUP BY) and prunes them
with the request's resources as if every eligible instance were gone; the
survivors' instances are read (one query), and each survivor is checked with
every filter on a what-if copy of its state with all of them gone (a shallow
copy with the victims' usage, NUMA cells, devices and group membership taken
off: ``what_if``). Then victim sets are tried by size, one victim first: the
sets of that size on every host whose resources fit are ordered by the cost
plugin (``scheduler.victim_costs``) and checked with every filter and the NUMA
and PCI fit, cheapest first; the first that passes is the answer. The claim
that follows preempts the victims in its own transaction
(``db.claims.claim`` with ``victims``).
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Mapping, Sequence

from oslo_log import log as logging

from db import preemption as db_preemption
from scheduler import priority as priorities
from scheduler.host_state import Consumed, HostState
from scheduler.provider_tree import assign

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Found:
    """A host and the victims that make the request fit there."""

    host: HostState                  # the cached host
    what_if: HostState               # its state with the victims gone
    victims: tuple[db_preemption.Candidate, ...]
    consumed: Consumed               # where the request goes on ``what_if``
    seen_generation: int
    request: object                  # the RequestContext the victims were checked with


@dataclasses.dataclass
class Outcome:
    """What a search found, or why it found nothing (for the NoValidHost reason)."""

    found: Found | None = None
    #: With ``spread``: the cheapest sets on different hosts, cheapest first
    #: (``found`` is one of them, picked at random).
    others: list = dataclasses.field(default_factory=list)
    considered: int = 0              # hosts with instances the request may preempt
    reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def summary_entry(self) -> dict:
        reasons = dict(self.reasons.most_common()) or {
            "no instance of lower priority may be preempted": 1}
        return {"filter": "preemption",
                "removed": max(self.considered, sum(self.reasons.values())),
                "reasons": reasons}


def what_if(host: HostState, victims: Sequence[db_preemption.Candidate],
            fitted: Mapping[str, object]) -> HostState:
    """A copy of ``host`` with ``victims`` gone: their amounts, instances, NUMA
    usage and devices given back (``fitted``: each victim's parsed cells)."""
    other = host.copy()
    index = {pid: i for i, (pid, _uuid, _name) in enumerate(host.providers)}
    usage = list(host.usage)
    for v in victims:
        for provider_id, rc, amount in v.amounts:
            slot = host.tree.slot_of.get((index.get(provider_id, -1), rc))
            if slot is not None:
                usage[slot] = max(0, usage[slot] - amount)
        other.instances.pop(v.uuid, None)
        other.instance_images.pop(v.uuid, None)
    other.usage = tuple(usage)
    other.num_instances = max(0, host.num_instances - len(victims))
    other.num_io_ops = max(0, host.num_io_ops - len(victims))
    cells = [fitted[v.uuid] for v in victims if fitted.get(v.uuid) is not None]
    if cells and host.numa_topology is not None:
        from numa import usage as numa_usage

        topology = host.numa_topology
        for one in cells:
            topology = numa_usage.remove_usage(topology, one)
        other.numa_topology = topology
    freed = [p for v in victims for p in v.pci_pools]
    if freed:
        from pci.pools import PciPool, sort_pools

        counts = collections.Counter({p.key: p.count for p in host.pci_pools})
        for key, n in freed:
            counts[key] += n
        other.pci_pools = sort_pools(PciPool(k, n) for k, n in counts.items() if n)
    return other


def _freed_usage(host: HostState, freeable: Mapping[tuple[int, str], int]) -> tuple:
    """``host``'s usage with ``freeable`` ({(provider id, class): amount}) taken off."""
    index = {pid: i for i, (pid, _uuid, _name) in enumerate(host.providers)}
    usage = list(host.usage)
    for (provider_id, rc), amount in freeable.items():
        slot = host.tree.slot_of.get((index.get(provider_id, -1), rc))
        if slot is not None:
            usage[slot] = max(0, usage[slot] - amount)
    return tuple(usage)


class PreemptionSearch:
    """Finds the host and the cheapest victims for one request (``find``), with
    the scheduler's filters (``recheck``) and fit (``fit``)."""

    def __init__(self, db, host_manager, conf, fit, cost) -> None:
        self.db = db
        self.host_manager = host_manager
        self.conf = conf
        self._fit = fit            # FilterScheduler._fit: (Consumed | None, reason)
        self.cost = cost           # a scheduler.victim_costs plugin

    def find(self, spec, priority: int, cycle, request, group: str | None = None, *,
             exclude: frozenset[str] = frozenset(),
             skip_nodes: frozenset[int] = frozenset(), spread: int = 1,
             rng=None) -> Outcome:
        """The cheapest (host, victims) for ``spec`` at ``priority`` over the
        cycle's hosts (``request``: the RequestContext; ``group``: the key its
        group's members are counted under); ``exclude``: instances not to
        preempt (a dry run's earlier choices); ``skip_nodes``: nodes not to
        preempt on (their budget is used up); ``spread`` > 1: pick at random
        (``rng``) among the cheapest sets of the fewest victims on that many
        different hosts (after a lost race: concurrent requests that all took
        the one cheapest set would conflict again).

        Nodes are read in chunks, cheapest bound first (the cost plugin's
        ``bound``): a chunk whose bound is no better than the best set found
        is not read, nor any after it."""
        opts = self.conf.preemption
        any_preemptible = opts.preempt_non_preemptible
        out = Outcome()
        cols = cycle.cols
        asked = spec.resources.amounts() if spec.resources is not None else {}
        if getattr(self.cost, "single_by_priority_then_newest", False):
            if self._single(spec, priority, cycle, request, group, any_preemptible, asked,
                            exclude, skip_nodes, spread, rng, out):
                return out
        summaries = db_preemption.node_summaries(self.db, priority, any_preemptible)
        nodes: list[tuple[int, HostState, db_preemption.NodeSummary]] = []
        for node_id, summary in summaries.items():
            row = cols.row_of_node.get(node_id)
            if row is None or node_id in skip_nodes:
                continue
            host = cols.hosts[row]
            out.considered += 1
            _, reason = assign(host.tree, _freed_usage(host, summary.freeable), spec.resources)
            if reason:
                out.reasons[f"not enough room even without every instance of lower "
                            f"priority ({reason})"] += 1
                continue
            least = _fewest_victims(host, summary, asked)
            if least > opts.max_victims:
                out.reasons[_TOO_MANY.format(opts.max_victims)] += 1
                continue
            nodes.append((least, host, summary))
        if not nodes:
            return out
        fitted: dict[str, object] = {}
        prepared: dict[int, list | None] = {}
        for size in range(1, opts.max_victims + 1):
            ready = [(self.cost.bound(size, s.min_priority, s.newest), h)
                     for least, h, s in nodes if least <= size]
            ready.sort(key=lambda n: (n[0] is None, n[0] or (), n[1].node_id))
            fits: list[tuple[tuple, Found]] = []
            for start in range(0, len(ready), SEARCH_CHUNK):
                chunk = ready[start:start + SEARCH_CHUNK]
                if spread == 1 and fits and chunk[0][0] is not None \
                        and fits[0][0] <= chunk[0][0]:
                    break       # nothing further can be cheaper
                self._prepare(spec, cycle, request, group, priority, any_preemptible,
                              [h for _b, h in chunk if h.node_id not in prepared],
                              prepared, fitted, exclude, out)
                sets = []
                for _bound, host in chunk:
                    eligible = prepared.get(host.node_id)
                    if not eligible or size > len(eligible):
                        continue
                    for combo in itertools.combinations(eligible, size):
                        _, why = assign(host.tree, _freed_usage(host, _amounts(combo)),
                                        spec.resources)
                        if not why:
                            sets.append((self.cost.cost(combo), host.node_id, combo, host))
                    cycle.deadline.pace()
                sets.sort(key=lambda s: (s[0], s[1]))
                for key, node_id, combo, host in sets:
                    if spread == 1 and fits and fits[0][0] <= key:
                        break
                    if any(f.host.node_id == node_id for _k, f in fits):
                        continue
                    cycle.deadline.pace()
                    consumed, reason, shown, context = self._check(
                        spec, cycle, request, group, host, list(combo), fitted)
                    if consumed is None:
                        continue
                    fits.append((key, Found(host=host, what_if=shown, victims=tuple(combo),
                                            consumed=consumed,
                                            seen_generation=host.generation,
                                            request=context)))
                    fits.sort(key=lambda f: (f[0], f[1].host.node_id))
                    if spread == 1 or len(fits) >= spread:
                        break
                if spread > 1 and len(fits) >= spread:
                    break
            if fits:
                if spread == 1 or rng is None:
                    out.found = fits[0][1]
                else:
                    out.found = rng.choice(fits[:spread])[1]
                out.others = [f for _k, f in fits[:spread] if f is not out.found]
                return out
        out.reasons[_TOO_MANY.format(opts.max_victims)] += 1
        return out

    def _single(self, spec, priority, cycle, request, group, any_preemptible, asked,
                exclude, skip_nodes, spread, rng, out) -> bool:
        """The fast path of the cost plugins that order single victims by
        priority then newest: the database lists the cheapest instances that
        could make room alone (each holds at least what the request asks minus
        the most any host has free, per class), and the first (or, with
        ``spread``, up to that many on different hosts) that makes the request
        fit is the answer: one victim is the fewest, and no cheaper one fits.
        False when none of them does (the full search then runs)."""
        cols = cycle.cols
        at_least: dict[str, int] = {}
        for rc, amount in asked.items():
            most_free = 0.0
            for host in cols.hosts:
                usable = host.tree._inventories
                free = sum(usable[i].capacity - host.usage[i]
                           for i in host.tree.by_class.get(rc, ()))
                most_free = max(most_free, free)
            if amount - most_free > 0:
                at_least[rc] = int(amount - most_free)
        rows = db_preemption.cheapest_singles(self.db, priority, any_preemptible, at_least,
                                              skip_nodes, limit=SINGLES)
        rows = [(u, n) for u, n in rows if u not in exclude and n in cols.row_of_node]
        if not rows:
            return False
        by_uuid: dict[str, db_preemption.Candidate] = {}
        fitted: dict[str, object] = {}
        fits: list[Found] = []
        for index, (uuid, node_id) in enumerate(rows):
            if index % SINGLES_READ == 0:     # read them a few at a time
                found = db_preemption.candidates(
                    self.db, priority, (), any_preemptible,
                    uuids=[u for u, _n in rows[index:index + SINGLES_READ]])
                by_uuid.update((c.uuid, c) for cands in found.values() for c in cands)
            victim = by_uuid.get(uuid)
            host = cols.hosts[cols.row_of_node[node_id]]
            if victim is None or uuid not in host.instances or \
                    any(f.host.node_id == node_id for f in fits):
                continue
            cycle.deadline.pace()
            fitted[uuid] = db_preemption.numa_cells_json(victim.numa_cells)
            _, why = assign(host.tree, _freed_usage(host, _amounts([victim])), spec.resources)
            if why:
                continue
            consumed, _reason, shown, context = self._check(
                spec, cycle, request, group, host, [victim], fitted)
            if consumed is None:
                continue
            fits.append(Found(host=host, what_if=shown, victims=(victim,), consumed=consumed,
                              seen_generation=host.generation, request=context))
            if len(fits) >= spread:
                break
        if not fits:
            return False
        out.found = fits[0] if spread == 1 or rng is None else rng.choice(fits)
        out.others = [f for f in fits if f is not out.found]
        out.considered = len({n for _u, n in rows})
        return True

    def _prepare(self, spec, cycle, request, group, priority, any_preemptible, hosts,
                 prepared, fitted, exclude, out) -> None:
        """Read the candidates of ``hosts`` (one query) and keep, per node, the
        cheapest ``exact_search_limit`` of them, or None when the request does
        not fit there even without all of them."""
        if not hosts:
            return
        found = db_preemption.candidates(self.db, priority, [h.node_id for h in hosts],
                                         any_preemptible)
        limit = self.conf.preemption.exact_search_limit
        for host in hosts:
            cycle.deadline.pace()
            eligible = [c for c in found.get(host.node_id, ()) if c.uuid not in exclude
                        and c.uuid in host.instances]
            prepared[host.node_id] = None
            if not eligible:
                out.reasons["its instances of lower priority changed meanwhile"] += 1
                continue
            for c in eligible:
                if c.uuid not in fitted:
                    fitted[c.uuid] = db_preemption.numa_cells_json(c.numa_cells)
            eligible.sort(key=self.cost.order)
            eligible = eligible[:limit]
            reason = self._check(spec, cycle, request, group, host, eligible, fitted)[1]
            if reason:
                out.reasons[f"does not fit even without its instances of lower priority "
                            f"({reason})"] += 1
                continue
            prepared[host.node_id] = eligible

    @staticmethod
    def _context(request, group: str | None, host: HostState, victims: Sequence):
        """The request as the instance sees it with ``victims`` gone: members of
        its own server group among them no longer count on their host."""
        gone = sum(1 for v in victims if group is not None and v.instance_group == group)
        if not gone:
            return request
        counts = dict(request.group_hosts)
        counts[host.host] = max(0, counts.get(host.host, 0) - gone)
        return dataclasses.replace(request, group_hosts=counts)

    def _check(self, spec, cycle, request, group, host: HostState, victims: list, fitted):
        """Every filter and the fit on ``host`` with ``victims`` gone:
        (Consumed | None, reason, the what-if state, the request it was asked with)."""
        shown = what_if(host, victims, fitted)
        context = self._context(request, group, host, victims)
        reason = cycle.recheck(context, shown)
        if reason:
            return None, reason, shown, context
        consumed, reason = self._fit(spec, shown)
        return consumed, reason, shown, context


#: Nodes whose candidates one query reads.
SEARCH_CHUNK = 32
#: Cheapest single victims the fast path lists, and reads at a time.
SINGLES = 64
SINGLES_READ = 8
_TOO_MANY = "needs more than [preemption] max_victims ({}) instances preempted"


def _fewest_victims(host: HostState, summary, asked: Mapping[str, int]) -> int:
    """A lower bound of the victims ``host`` needs for ``asked``: per class, the
    shortfall over the largest amount one candidate holds (at least 1)."""
    least = 1
    usable = host.tree._inventories
    for rc, amount in asked.items():
        slots = host.tree.by_class.get(rc, ())
        free = sum(usable[i].capacity - host.usage[i] for i in slots)
        short = amount - free
        if short > 0:
            largest = summary.largest.get(rc, 0)
            if largest <= 0:
                return 1 << 30
            least = max(least, -(-int(short) // largest))
    return least


def _amounts(victims) -> dict[tuple[int, str], int]:
    total: dict[tuple[int, str], int] = {}
    for v in victims:
        for provider_id, rc, amount in v.amounts:
            total[(provider_id, rc)] = total.get((provider_id, rc), 0) + amount
    return total


def priority_of(spec, conf) -> int:
    """The priority a request places with (``scheduler.priority.effective``)."""
    return priorities.effective(spec, conf)
