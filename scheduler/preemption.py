"""Preemption: where a request that fits nowhere would fit if instances of lower
priority gave their room (doc/source/admin/preemption.rst).

The search reads no database: the instances a request may preempt come from
the host manager's preemptible index (``scheduler.preemptible_index``), and
``Room`` sets them against the cycle's host columns with numpy: the room each
host has per class asked, what each instance holds, what all of a host's hold
together. With a cost plugin that orders single victims by priority then
newest, the instances that could make room alone are tried in that order
first. Otherwise hosts where the request would not fit even without all of
their instances are left out, and the rest are taken by a lower bound of the
victims they need; each is checked with every filter on a what-if copy of its
state with all of them gone (a shallow copy with the victims' usage, NUMA
cells, devices and group membership taken off: ``what_if``). Then victim sets
are tried by size, one victim first: the sets of that size on every host whose
resources fit (the exact provider assignment) are ordered by the cost plugin
(``scheduler.victim_costs``) and checked with every filter and the NUMA and
PCI fit, cheapest first; the first that passes is the answer. The claim that
follows re-checks the victims under their row locks and preempts them in its
own transaction (``db.claims.claim`` with ``victims``).
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import itertools
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from oslo_log import log as logging

from db import preemption as db_preemption
from scheduler import priority as priorities
from scheduler.host_state import Consumed, HostState
from scheduler.preemptible_index import View
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


def free_room(cols, rc: str) -> np.ndarray:
    """Per row of ``cols``: the room for class ``rc`` left on the node's
    providers together (what allocations may add up to, less what they hold;
    an upper bound of what one request can get there)."""
    res = cols.resources(rc)
    room = np.where(res.present, np.maximum(res.usable() - res.used, 0), 0)
    return room.sum(axis=1)


@dataclasses.dataclass
class Summary:
    """Per row of the cycle's columns: what the instances a request may
    preempt there hold together, enough to prune the host and bound its
    cheapest victims before looking at them one by one."""

    count: np.ndarray                    # instances it may preempt
    viable: np.ndarray                   # the request's amounts fit without all of them
    min_priority: np.ndarray             # (viable rows) the lowest priority among them
    newest: np.ndarray                   # (viable rows) the newest creation, epoch seconds
    largest: dict[str, np.ndarray]       # (viable rows) class -> the most one holds
    freeable: dict[str, np.ndarray]      # class -> what they hold together
    free: dict[str, np.ndarray]
    asked: dict[str, int]
    #: (viable rows) per instance its row and creation time, by row then newest
    by_row: tuple = ()

    def kth_newest(self, k: int) -> np.ndarray:
        """Per row, the creation time of its k-th newest instance (-inf when it
        has fewer): no set of k of them has an oldest member newer than that."""
        rows, created = self.by_row
        n = len(self.count)
        out = np.full(n, -np.inf)
        counts = np.bincount(rows, minlength=n)
        starts = np.searchsorted(rows, np.arange(n))
        has = counts >= k
        out[has] = created[starts[has] + k - 1]
        return out

    def short_class(self) -> collections.Counter:
        """Hosts where the request does not fit even without every such
        instance, by the first class it lacks."""
        left = (self.count > 0) & ~self.viable
        out: collections.Counter = collections.Counter()
        for rc, amount in self.asked.items():
            lacking = left & (self.free[rc] + self.freeable[rc] < amount)
            if lacking.any():
                out[rc] = int(np.count_nonzero(lacking))
                left &= ~lacking
        return out

    def fewest_victims(self) -> np.ndarray:
        """A lower bound of the victims each row needs: per class, the
        shortfall over the most one instance holds (summed over the node's
        providers), at least 1."""
        least = np.ones(len(self.count), dtype=np.int64)
        for rc, amount in self.asked.items():
            short = amount - self.free[rc]
            largest = self.largest[rc]
            with np.errstate(divide="ignore", invalid="ignore"):
                need = np.where(largest > 0, np.ceil(short / np.where(largest > 0, largest, 1)),
                                1 << 30)
            need = np.where(short > 0, need, 1)
            least = np.maximum(least, need.astype(np.int64))
        return least


@dataclasses.dataclass
class Room:
    """The vector side of one search: the instances a request may preempt
    (an index ``View``) placed on the rows of the cycle's columns (-1: not a
    host of the cycle, or a node skipped), with the free room per class
    asked."""

    view: View
    rows: np.ndarray
    free: dict[str, np.ndarray]
    asked: dict[str, int]
    n: int
    row_of_node: Mapping[int, int]
    _by_row: tuple | None = None

    @classmethod
    def of(cls, cols, view: View, asked: Mapping[str, int],
           skip_nodes: frozenset[int] = frozenset()) -> Room:
        rows = cols.rows_of_nodes(view.node)
        if skip_nodes:
            rows[np.isin(view.node, np.fromiter(skip_nodes, dtype=np.int64))] = -1
        free = {rc: free_room(cols, rc) for rc in asked}
        return cls(view, rows, free, dict(asked), cols.n, cols.row_of_node)

    def singles(self) -> Iterator[int]:
        """The instances with which alone the host's free room reaches what the
        request asks (per class, over the node's providers), by lowest
        priority, then newest, then node id."""
        ok = self.rows >= 0
        safe = np.where(ok, self.rows, 0)
        for rc, amount in self.asked.items():
            ok &= self.free[rc][safe] + self.view.amounts[rc] >= amount
        idx = np.flatnonzero(ok)
        v = self.view
        priorities = v.priority[idx]
        while len(idx):
            # one priority at a time, lowest first: the caller usually stops
            # within the first few, so the rest is never sorted
            low = priorities.min()
            at = priorities == low
            yield from _newest_first(idx[at], v)
            idx, priorities = idx[~at], priorities[~at]

    def summary(self) -> Summary:
        ok = self.rows >= 0
        r = self.rows[ok]
        n = self.n
        v = self.view
        count = np.bincount(r, minlength=n)
        freeable = {rc: np.bincount(r, weights=v.amounts[rc][ok], minlength=n)
                    for rc in self.asked}
        viable = count > 0
        for rc, amount in self.asked.items():
            viable &= self.free[rc] + freeable[rc] >= amount
        sel = ok.copy()
        sel[ok] = viable[r]
        rv = self.rows[sel]
        min_priority = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(min_priority, rv, v.priority[sel])
        newest = np.full(n, -np.inf)
        np.maximum.at(newest, rv, v.created[sel])
        largest = {}
        for rc in self.asked:
            most = np.zeros(n)
            np.maximum.at(most, rv, v.amounts[rc][sel])
            largest[rc] = most
        created = v.created[sel]
        order = np.lexsort((-created, rv))
        return Summary(count=count, viable=viable, min_priority=min_priority, newest=newest,
                       largest=largest, freeable=freeable, free=self.free, asked=self.asked,
                       by_row=(rv[order], created[order]))

    def may_fit(self, node_id: int, victims: Sequence[db_preemption.Candidate]) -> bool:
        """Whether the host's room per class asked, with ``victims`` gone,
        reaches the request (necessary, not sufficient: see ``assign``)."""
        row = self.row_of_node.get(node_id)
        if row is None:
            return False
        for rc, amount in self.asked.items():
            held = sum(n for v in victims for _p, c, n in v.amounts if c == rc)
            if self.free[rc][row] + held < amount:
                return False
        return True

    def candidates_on(self, node_id: int) -> list[db_preemption.Candidate]:
        """The instances the request may preempt on one node."""
        row = self.row_of_node.get(node_id)
        if row is None:
            return []
        if self._by_row is None:
            order = np.argsort(self.rows, kind="stable")
            self._by_row = (order, self.rows[order])
        order, sorted_rows = self._by_row
        lo, hi = np.searchsorted(sorted_rows, [row, row + 1])
        out = []
        for i in order[lo:hi]:
            c = self.view.candidate(int(i))
            if c is not None:
                out.append(c)
        return out


#: Instances of one priority that ``Room.singles`` sorts before the rest.
SINGLES_SORTED = 256


def _newest_first(idx: np.ndarray, v: View) -> Iterator[int]:
    """``idx`` (view positions) newest first, then by node id: the newest
    ``SINGLES_SORTED`` (and any created at the same second as the last of
    them) first, the rest sorted only if the caller goes on."""
    key = -v.created[idx]
    if len(idx) > SINGLES_SORTED:
        kth = np.partition(key, SINGLES_SORTED - 1)[SINGLES_SORTED - 1]
        head = key <= kth
        first, idx = idx[head], idx[~head]
        yield from first[np.lexsort((v.node[first], -v.created[first]))].tolist()
    yield from idx[np.lexsort((v.node[idx], -v.created[idx]))].tolist()


def _from_epoch(seconds: float) -> datetime.datetime | None:
    """A creation time of the index (naive, as stored) back as a datetime."""
    if not np.isfinite(seconds):
        return None
    return datetime.datetime.fromtimestamp(float(seconds))


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

        Hosts are taken in chunks, cheapest bound first (the cost plugin's
        ``bound``): a chunk whose bound is no better than the best set found
        is not examined, nor any after it."""
        opts = self.conf.preemption
        any_preemptible = opts.preempt_non_preemptible
        out = Outcome()
        asked = spec.resources.amounts() if spec.resources is not None else {}
        index = self.host_manager.preemptible_index(any_preemptible)
        self._settle_pending(index, priority, any_preemptible)
        room = Room.of(cycle.cols, index.view(priority, any_preemptible, asked), asked,
                       skip_nodes)
        if getattr(self.cost, "single_by_priority_then_newest", False):
            if self._single(spec, cycle, request, group, room, exclude, spread, rng, out):
                return out
        summary = room.summary()
        out.considered = int(np.count_nonzero(summary.count))
        short = summary.short_class()
        for rc, n in short.items():
            out.reasons[f"not enough room even without every instance of lower "
                        f"priority (not enough {rc})"] += n
        least = summary.fewest_victims()
        too_many = int(np.count_nonzero(summary.viable & (least > opts.max_victims)))
        if too_many:
            out.reasons[_TOO_MANY.format(opts.max_victims)] += too_many
        usable = np.flatnonzero(summary.viable & (least <= opts.max_victims))
        if not len(usable):
            return out
        fitted: dict[str, object] = {}
        eligible: dict[int, list] = {}        # node id -> its cheapest candidates
        fits_all: dict[int, bool] = {}        # node id -> fits with all of them gone
        cols = cycle.cols
        for size in range(1, opts.max_victims + 1):
            rows = usable[least[usable] <= size]
            ready, bound_of = self._by_bound(size, rows, summary, cols)
            fits: list[tuple[tuple, Found]] = []
            for start in range(0, len(ready), SEARCH_CHUNK):
                chunk = [(bound_of(r), cols.hosts[r])
                         for r in ready[start:start + SEARCH_CHUNK].tolist()]
                if spread == 1 and fits and chunk[0][0] is not None \
                        and fits[0][0] <= chunk[0][0]:
                    break       # nothing further can be cheaper
                # every set of this size on the chunk's hosts, cheapest first;
                # the resources, the filters and the fit are checked in that
                # order until one passes (and a host once, with all of its
                # candidates gone, before its first set is)
                sets = []
                for _bound, host in chunk:
                    mine = eligible.get(host.node_id)
                    if mine is None:
                        mine = eligible[host.node_id] = self._eligible(host, room, exclude, out)
                    if size > len(mine):
                        continue
                    sets.extend((self.cost.cost(combo), host.node_id, combo, host)
                                for combo in itertools.combinations(mine, size))
                    cycle.deadline.pace()
                sets.sort(key=lambda s: (s[0], s[1]))
                for key, node_id, combo, host in sets:
                    if spread == 1 and fits and fits[0][0] <= key:
                        break
                    if any(f.host.node_id == node_id for _k, f in fits) \
                            or fits_all.get(node_id) is False \
                            or not room.may_fit(host.node_id, combo):
                        continue
                    _, why = assign(host.tree, _freed_usage(host, _amounts(combo)),
                                    spec.resources)
                    if why:
                        continue
                    cycle.deadline.pace()
                    if node_id not in fits_all:
                        fits_all[node_id] = self._fits_without_all(
                            spec, cycle, request, group, host, eligible[node_id], fitted, out)
                        if not fits_all[node_id]:
                            continue
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

    def _settle_pending(self, index, priority: int, any_preemptible: bool) -> None:
        """Re-read the pending flags of the instances the search would consider
        but the index shows pending (another process may have confirmed them)."""
        uuids = index.pending_below(priority, any_preemptible)
        if uuids:
            index.settle(db_preemption.pending_states(self.db, uuids), uuids)

    def _by_bound(self, size: int, rows: np.ndarray, summary, cols):
        """``rows`` cheapest bound first (ties by node id), and the bound of a
        row (the cost plugin's ``bound``; computed per chunk when the order
        is known without it)."""
        kth = getattr(self.cost, "bound_uses_kth_newest", False)
        newest = summary.kth_newest(size) if kth else summary.newest

        def bound_of(r: int):
            return self.cost.bound(size, int(summary.min_priority[r]), _from_epoch(newest[r]))

        if getattr(self.cost, "single_by_priority_then_newest", False):
            # (lowest priority, newest first) orders this plugin's bound
            order = np.lexsort((cols.node_ids()[rows], -newest[rows],
                                summary.min_priority[rows]))
            return rows[order], bound_of
        bounds = {int(r): bound_of(int(r)) for r in rows}
        ordered = sorted(bounds, key=lambda r: (bounds[r] is None, bounds[r] or (),
                                                cols.hosts[r].node_id))
        return np.asarray(ordered, dtype=np.int64), bounds.__getitem__

    def _single(self, spec, cycle, request, group, room, exclude, spread, rng, out) -> bool:
        """The fast path of the cost plugins that order single victims by
        priority then newest: the instances that could make room alone (with
        each, the host's free room reaches what the request asks, per class)
        in that order, and the first (or, with ``spread``, up to that many on
        different hosts) that makes the request fit is the answer: one victim
        is the fewest, and no cheaper one fits. False when none of the first
        ``SINGLES`` does (the full search then runs)."""
        cols = cycle.cols
        fitted: dict[str, object] = {}
        fits: list[Found] = []
        tried = 0
        for i in room.singles():
            victim = room.view.candidate(i)
            host = cols.hosts[int(room.rows[i])]
            if victim is None or victim.uuid in exclude or victim.uuid not in host.instances \
                    or any(f.host.node_id == host.node_id for f in fits):
                continue
            tried += 1
            if tried > SINGLES:
                break
            cycle.deadline.pace()
            _, why = assign(host.tree, _freed_usage(host, _amounts([victim])), spec.resources)
            if why:
                continue
            fitted[victim.uuid] = db_preemption.numa_cells_json(victim.numa_cells)
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
        out.considered = len({f.host.node_id for f in fits})
        return True

    def _eligible(self, host, room, exclude, out) -> list:
        """``host``'s cheapest ``exact_search_limit`` candidates (cost order)."""
        mine = [c for c in room.candidates_on(host.node_id)
                if c.uuid not in exclude and c.uuid in host.instances]
        if not mine:
            out.reasons["its instances of lower priority changed meanwhile"] += 1
            return []
        mine.sort(key=self.cost.order)
        return mine[:self.conf.preemption.exact_search_limit]

    def _fits_without_all(self, spec, cycle, request, group, host, eligible, fitted,
                          out) -> bool:
        """Whether the request passes every filter and fits on ``host`` with all
        of ``eligible`` gone (if not, no set of them can make it fit)."""
        for c in eligible:
            if c.uuid not in fitted:
                fitted[c.uuid] = db_preemption.numa_cells_json(c.numa_cells)
        reason = self._check(spec, cycle, request, group, host, eligible, fitted)[1]
        if reason:
            out.reasons[f"does not fit even without its instances of lower priority "
                        f"({reason})"] += 1
            return False
        return True

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
#: Single victims the fast path checks at most.
SINGLES = 64
_TOO_MANY = "needs more than [preemption] max_victims ({}) instances preempted"


def _amounts(victims) -> dict[tuple[int, str], int]:
    total: dict[tuple[int, str], int] = {}
    for v in victims:
        for provider_id, rc, amount in v.amounts:
            total[(provider_id, rc)] = total.get((provider_id, rc), 0) + amount
    return total


def priority_of(spec, conf) -> int:
    """The priority a request places with (``scheduler.priority.effective``)."""
    return priorities.effective(spec, conf)
