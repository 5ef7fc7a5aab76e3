"""FilterScheduler: choose hosts for a request, then check, claim and consume.

For each instance of a request: a :class:`scheduler.cycle.Cycle`
over one snapshot of the cached hosts filters them (remembering why each host
was removed) and weighs the survivors; a host is picked at random among the
best ``host_subset_size``, re-checked under its lock with a fresh view of the
world (group members included) and consumed: the claim is written in one
generation-guarded transaction that also enforces hard group policies
(``db.claims``). A claim conflict re-reads that one host and checks it again,
otherwise the next candidate is tried. A multi-instance request is
all-or-nothing; a dry run claims nothing and shows each instance the
earlier ones on a private copy of the columns.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import itertools
import json
import random
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from oslo_config import cfg
from oslo_log import log as logging

from db import claims, transitions
from db.inventory import DISK_GB, MEMORY_MB, PCPU, VCPU
from db.models import utcnow
from scheduler import cycle as cycles
from scheduler import exception, metrics
from scheduler import priority as priorities
from scheduler.deadline import Deadline
from scheduler.explanation import Explanation
from scheduler.filters import FILTER_NAMESPACE
from scheduler.filters.resources import ResourcesFilter, assigned, view_classes
from scheduler.host_manager import HostManager
from scheduler.host_state import Consumed, HostState
from scheduler.plugins import RequestContext, load_plugins
from scheduler.request_spec import RequestSpec
from scheduler.selection import Selection
from scheduler.weights import WEIGHER_NAMESPACE

LOG = logging.getLogger(__name__)

__all__ = ["DEFAULT_FILTERS", "DEFAULT_WEIGHERS", "FilterScheduler", "Selection",
           "load_filters", "load_weighers"]

DEFAULT_FILTERS = [
    "ComputeFilter", "AvailabilityZoneFilter", "RamFilter", "CoreFilter", "DiskFilter",
    "ComputeCapabilitiesFilter", "ImagePropertiesFilter", "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter", "NUMATopologyFilter", "PciPassthroughFilter",
]
DEFAULT_WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "NumInstancesWeigher",
    "HypervisorVersionWeigher", "ServerGroupSoftAffinityWeigher",
    "ServerGroupSoftAntiAffinityWeigher", "BuildFailureWeigher", "PCIWeigher",
]

filter_scheduler_opts = [
    cfg.ListOpt("enabled_filters", default=DEFAULT_FILTERS,
                help="Filters to run, in this order, by entry-point name in the "
                     "berth.scheduler.filters namespace. An unknown name stops the "
                     "scheduler at start-up."),
    cfg.ListOpt("weight_classes", default=DEFAULT_WEIGHERS,
                help="Weighers to apply, by entry-point name in the "
                     "berth.scheduler.weights namespace."),
    cfg.IntOpt("host_subset_size", default=1, min=1,
               help="Pick the host at random among this many best-weighed hosts. "
                    "Larger values spread concurrent schedulers apart (fewer claim "
                    "conflicts) at the cost of less optimal packing. Not used while "
                    "near_best_spread applies (by default with several workers)."),
    cfg.BoolOpt("shuffle_best_same_weighed_hosts", default=False,
                help="Shuffle the hosts that share the best weight before picking, so "
                     "identical hosts are used evenly (near_best_spread, when it "
                     "applies, picks among them at random anyway)."),
    cfg.FloatOpt("near_best_spread", default=None, min=0.0,
                 help="Pick the host at random among the candidates whose weight is "
                      "within this much of the best (at most %d of them), so that "
                      "concurrent workers and schedulers seldom claim the same host "
                      "at once (fewer claim conflicts) at a small cost in packing. "
                      "A weight is a sum of weigher values normalised to 0..1 times "
                      "their multipliers: 0.1 is 10%% of one weigher's range. The "
                      "workers of one daemon each prefer their own share of the "
                      "near-best hosts. Unset: 0.1 when [scheduler] workers is above 1, "
                      "else 0. 0: always the best host first (deterministic)." % 16),
]
scheduler_opts = [
    cfg.IntOpt("max_attempts", default=3, min=1,
               help="Hosts returned per instance when alternates are asked for: the "
                    "chosen one plus up to max_attempts - 1 alternates."),
    cfg.IntOpt("claim_retries", default=1, min=0,
               help="How many times a claim that lost a race re-reads the host and "
                    "tries it again before moving to the next candidate; also how "
                    "many times an instance is placed again from scratch when its "
                    "server group changed under it (another scheduler placed "
                    "members this one had not seen yet)."),
    cfg.FloatOpt("request_timeout", default=60.0, min=0.0,
                 help="Seconds one select_destinations (or reschedule) may spend "
                      "placing its instances. Past it the request fails with "
                      "RequestTimeout and whatever it had claimed is released; 0 "
                      "means no limit. Keep it well below the clients' [scheduler] "
                      "long_rpc_timeout."),
    cfg.IntOpt("max_request_work", default=2000000, min=0,
               help="Largest num_instances x hosts in the cache one request may ask "
                    "for; a larger request is refused up front with InvalidRequest "
                    "naming num_instances (split it). 0 means no limit. A capacity "
                    "count is not a request: only request_timeout bounds it."),
]
pci_opts = [
    cfg.MultiStrOpt("alias", default=[],
                    help="A PCI alias as JSON, e.g. {\"name\": \"nic\", \"vendor_id\": "
                         "\"8086\", \"product_id\": \"154c\", \"device_type\": \"type-VF\", "
                         "\"numa_policy\": \"legacy\"}. Any other key names a device tag "
                         "the device must carry ([pci] device_spec on the host), e.g. "
                         "\"trusted\": \"true\". Repeat the option for several "
                         "aliases; flavors ask for them with pci_passthrough:alias."),
]

cfg.CONF.register_opts(filter_scheduler_opts, group="filter_scheduler")
cfg.CONF.register_opts(scheduler_opts, group="scheduler")
cfg.CONF.register_opts(pci_opts, group="pci")

LIST_OPTS = [("filter_scheduler", filter_scheduler_opts), ("scheduler", scheduler_opts),
             ("pci", pci_opts)]


def load_filters(names: Sequence[str], conf) -> list:
    return load_plugins(FILTER_NAMESPACE, names, conf, "enabled_filters")


def load_weighers(names: Sequence[str], conf) -> list:
    return load_plugins(WEIGHER_NAMESPACE, names, conf, "weight_classes")


#: The clock of request deadlines (a module attribute so tests can drive it).
_clock = time.perf_counter


#: Near-best hosts one pick chooses among at most ([filter_scheduler] near_best_spread).
NEAR_BEST_MAX = 16
#: Why a request of several instances (not a dry run) does not preempt.
MULTI_INSTANCE_REFUSAL = ("a request of several instances does not preempt (only a dry run "
                          "of it does)")
#: Searches one preempting placement makes at most (each after its last
#: candidate lost a race).
PREEMPTION_SEARCHES = 6


class _GroupChanged(Exception):
    """The claim found group members the cache did not show: place the instance
    again with fresh group counts."""


@dataclasses.dataclass
class _Request:
    """What one ``select_destinations`` call carries from instance to instance."""

    spec: RequestSpec
    cycle: cycles.Cycle
    dry_run: bool
    group: str | None
    timings: metrics.SelectTimings
    #: Members placed by this request that the cache does not count (dry runs).
    local_group: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: When the request fails with RequestTimeout; also paces the cycle's loops.
    deadline: Deadline = dataclasses.field(default_factory=Deadline)
    #: The spec as stored with the allocations, and its row once the first claim wrote it.
    stored_spec: str | None = None
    spec_row_id: int | None = None
    #: Claims are written pending: the caller confirms them (``pending``), or
    #: this request does once all of its instances are placed (several
    #: instances), so that claims a failed undo leaves behind are reaped.
    pending: bool = False
    #: A move: the instance's source, handed over to its holder by the claim.
    move_from: claims.MoveFrom | None = None
    #: Enforce the group's hard policy in the claim (a forced move does not).
    enforce_group: bool = True
    #: The caller takes victims (``allow_preemption``), and the request's priority.
    allow_preemption: bool = False
    priority: int = 0
    #: Instances this dry run showed preempted already (not chosen twice).
    dry_victims: set = dataclasses.field(default_factory=set)
    #: Nodes whose preemptions per minute are used up (not tried again).
    no_preemption_nodes: set = dataclasses.field(default_factory=set)
    #: Availability zones whose preemptions per minute are used up.
    no_preemption_zones: set = dataclasses.field(default_factory=set)


#: ``pending_before`` that any pending claim is older than.
_FAR_FUTURE = datetime.datetime(9999, 1, 1)

#: Namespace of the group keys (``group_key``).
_GROUP_NAMESPACE = uuidlib.UUID("5d3c6b9e-3f0e-5b8a-9a51-4f3f5f2b7c10")


def group_key(project_id: str | None, group: str | None) -> str | None:
    """The key a server group's members are stored and counted under: a UUID
    derived from the request's project and the group's UUID, so that a group is
    its project's own (naming another project's group UUID shows none of its
    members, nor where they run). No project is a project of its own, not a
    wildcard; the string "None" is another."""
    if not group:
        return None
    return str(uuidlib.uuid5(_GROUP_NAMESPACE, json.dumps([project_id, group])))


class _AlreadyPlaced(Exception):
    """A claim found its instance holding an allocation already."""


class _ClaimsLost(Exception):
    """Claims of a request were released before the request was confirmed."""

    def __init__(self, lost: Sequence[str]) -> None:
        super().__init__(lost)
        self.lost = list(lost)

    def error(self) -> exception.BerthError:
        return exception.Conflict(reason=(
            f"the claims of {', '.join(self.lost)} were released while the request was "
            "placed (a concurrent try of the same request failed, or the claims outlived "
            "[scheduler] claim_ttl); nothing is held for the request: try again"))


def claim_items(host: HostState, assignment) -> tuple[claims.Item, ...]:
    """An assignment as the claim writes it: (provider id, class, amount)."""
    if assignment is None:
        return ()
    tree, ids = host.tree, host.providers
    return tuple((ids[tree.slots[slot][0]][0], tree.slots[slot][1], amount)
                 for slot, amount in assignment.amounts)


def held_amounts(host: HostState, assignment) -> dict[str, dict[str, int]]:
    """An assignment as the reply shows it: {provider uuid: {class: amount}}."""
    out: dict[str, dict[str, int]] = {}
    if assignment is None:
        return out
    tree, ids = host.tree, host.providers
    for slot, amount in assignment.amounts:
        index, rc = tree.slots[slot]
        out.setdefault(ids[index][1], {})[rc] = amount
    return out


def summed(held: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """{class: amount} over every provider."""
    out: dict[str, int] = {}
    for amounts in held.values():
        for rc, n in amounts.items():
            out[rc] = out.get(rc, 0) + n
    return out


def classic_allocation(held: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The ``allocation`` field of a Selection as callers read it before the
    ledger: vcpus (VCPU + PCPU), memory_mb and disk_mb (DISK_GB in MB)."""
    total = summed(held)
    return {"vcpus": total.get(VCPU, 0) + total.get(PCPU, 0),
            "memory_mb": total.get(MEMORY_MB, 0), "disk_mb": total.get(DISK_GB, 0) * 1024}


def pinned_cpus(assignment, host: HostState, fitted):
    """The assignment with its PCPU amount set to the host CPUs the NUMA fit
    pins: the guest's dedicated vCPUs, an isolated emulator thread and siblings
    kept idle by thread policy isolate (which the request alone cannot count)."""
    pinned = sum(len(cell.host_cpus) for cell in fitted.cells)
    tree = host.tree
    amounts = []
    changed = False
    for slot, amount in assignment.amounts:
        if tree.slots[slot][1] == PCPU and amount != pinned:
            amount, changed = pinned, True
        amounts.append((slot, amount))
    if not changed:
        return assignment
    return dataclasses.replace(assignment, amounts=tuple(amounts))


def _stored_spec(spec: RequestSpec) -> str:
    """The request as stored with each of its allocations (for reschedules, and
    to recognise a retry of the same request)."""
    return json.dumps(spec.for_one_instance().to_primitive(), sort_keys=True)


class FilterScheduler:
    """Chooses hosts for requests and holds what it handed out."""

    def __init__(self, host_manager: HostManager, conf: cfg.ConfigOpts = cfg.CONF, *,
                 filters: Sequence | None = None, weighers: Sequence | None = None,
                 seed: int | None = None) -> None:
        """``filters``/``weighers``: plugin instances to use instead of the
        configured ``enabled_filters``/``weight_classes`` (embedding, tests);
        ``seed``: make the random picks repeatable (trace replay, comparisons)."""
        self.host_manager = host_manager
        self.db = host_manager.db
        self.conf = conf
        fs = conf.filter_scheduler
        self.filters = list(filters) if filters is not None else \
            load_filters(fs.enabled_filters, conf)
        self.weighers = list(weighers) if weighers is not None else \
            load_weighers(fs.weight_classes, conf)
        #: The ledger's check: every request runs it (``filters.resources``).
        self.resources_filter = ResourcesFilter(conf, view_classes(self.filters))
        #: A forced move's only filter: every class asked, none left to the view
        #: filters (which a forced move does not run).
        self.forced_resources_filter = ResourcesFilter(conf)
        self.steps = cycles.plan(self.filters, builtin=(self.resources_filter,))
        for step in self.steps:
            if step.flt.has_classes:    # per-host filters and vector ones that use classes
                for column, key_fn in step.flt.class_columns().items():
                    host_manager.register_class(column, key_fn)
        if not host_manager.load_instance_images:
            host_manager.load_instance_images = any(
                getattr(w, "reads_instance_images", False) for w in self.weighers)
        self.pci_aliases = self._parse_aliases(conf.pci.alias)
        if not host_manager.load_pci_pools:
            host_manager.load_pci_pools = any(f.name == "PciPassthroughFilter"
                                              for f in self.filters)
        self._rng = random.Random(seed)
        #: The victim cost plugin ([preemption] victim_cost), loaded on first use.
        self._cost = None
        #: (this worker's index, workers of the daemon) when there are several:
        #: among the near-best hosts each worker prefers its own share.
        self.partition: tuple[int, int] | None = None

    @staticmethod
    def _parse_aliases(raw: list[str]) -> Mapping:
        if not raw:
            return {}
        from pci import errors as pci_errors
        from pci import request as pci_request

        try:
            return pci_request.parse_aliases(list(raw))
        except pci_errors.PciError as e:
            raise exception.InvalidRequest(field=f"pci.alias: {e.field}", reason=e.reason) \
                from None

    def warm_up(self) -> None:
        """Load the host cache and build what the first request would otherwise
        build: the class columns and the weighers' aggregate-override columns."""
        self.host_manager.refresh()
        cols = self.host_manager.columns
        for step in self.steps:
            if step.flt.has_classes:
                for column in step.flt.class_columns():
                    cols.class_codes(column)
        for w in self.weighers:
            if w.aggregate_multiplier_key:
                cols.aggregate_min(w.aggregate_multiplier_key)

    def parse_request(self, data: Any) -> RequestSpec:
        """Validate a request payload with this scheduler's PCI aliases."""
        return RequestSpec.from_primitive(data, pci_aliases=self.pci_aliases)

    # -- the request ---------------------------------------------------------
    def select_destinations(self, spec: RequestSpec, instance_uuids: Sequence[str] | None = None,
                            return_alternates: bool = False, dry_run: bool = False,
                            pending: bool = False, allow_preemption: bool = False
                            ) -> list[list[Selection]]:
        """Choose (and, unless ``dry_run``, claim) one host per instance.

        Returns one list per instance: the chosen host first, then up to
        ``max_attempts - 1`` alternates when ``return_alternates``. With
        ``pending`` the claims stay pending until ``confirm``; a pending claim
        older than ``[scheduler] claim_ttl`` is released by the reaper. With
        ``allow_preemption`` an instance that fits nowhere may preempt
        instances of lower priority (``scheduler.preemption``): its selection
        names them, and the caller deletes them.
        """
        return self._select(spec, instance_uuids, return_alternates, dry_run, pending,
                            resume=True, allow_preemption=allow_preemption)

    def _select(self, spec: RequestSpec, instance_uuids: Sequence[str] | None,
                return_alternates: bool, dry_run: bool, pending: bool, *, resume: bool,
                allow_preemption: bool = False) -> list[list[Selection]]:
        """``resume``: a retry of a request whose first try stopped part-way may
        place the instances that try did not (once: not when resuming)."""
        timings = metrics.SelectTimings()
        timeout = self.conf.scheduler.request_timeout
        deadline = Deadline(timeout, _clock)
        uuids = self._instance_uuids(spec, instance_uuids)
        # Named instances may hold allocations already: a retry after a lost
        # reply. That shows as a duplicate claim, or as no room left (the
        # request's own claims took it); only then is it looked up.
        named = not dry_run and bool(instance_uuids or spec.instance_uuids)
        self.host_manager.refresh()
        timings.phase("refresh", timings.started)
        self._check_work(spec)
        req = self._request(spec, deadline, timings, self.weighers, dry_run=dry_run,
                            pending=pending or len(uuids) > 1)
        req.allow_preemption = allow_preemption
        group = req.group
        timings.hosts = req.cycle.cols.n
        outcome = "error"
        results: list[list[Selection]] = []
        claimed: list[str] = []
        try:
            for index, instance_uuid in enumerate(uuids):
                req.deadline.check(index)
                if index:
                    time.sleep(0)   # let other requests of this worker run (eventlet)
                weight, chosen, consumed, alternates = self._place_instance(
                    req, index, instance_uuid)
                if dry_run:
                    if group:
                        req.local_group[chosen.host] += 1
                    if spec.num_instances > 1:
                        self._show_dry_claim(req, chosen, consumed, instance_uuid)
                    if consumed.victims:
                        # a preempted member of the request's group leaves its host
                        gone = sum(1 for v in consumed.victims if group is not None
                                   and v.instance_group == group)
                        if gone:
                            req.local_group[chosen.host] -= gone
                else:
                    claimed.append(instance_uuid)
                    self.host_manager.note_placed(chosen, instance_uuid, group,
                                                  spec.image.properties,
                                                  generation=consumed.generation)
                    self._index_claim(req, chosen, instance_uuid, consumed)
                results.append(self._selections(weight, chosen, consumed, alternates, spec,
                                                instance_uuid, return_alternates))
            if claimed and req.pending and not pending:
                # the whole request is placed: keep it, unless one of its claims
                # was released meanwhile (reaped, or given back by a failed
                # retry of this same request), and then none of it
                confirmed, lost = claims.confirm(self.db, claimed)
                if lost:
                    raise _ClaimsLost(lost)
                self.host_manager.note_confirmed(confirmed)
            outcome = "placed"
        except _AlreadyPlaced as e:
            # Held already: by a placed request (a retry gets its placements),
            # by another try of this same request still pending (placed in
            # full now, this try's claims kept), or by another request (refused,
            # this try's claims given back).
            try:
                earlier = self._earlier_placements(spec, uuids, pending, resume)
            except exception.InvalidRequest:
                outcome = "invalid request"
                self._undo(claimed, req.pending)
                raise
            except BaseException as failed:
                outcome = f"failed ({type(failed).__name__})"
                raise
            if earlier is None:
                outcome = "invalid request"
                self._undo(claimed, req.pending)
                raise exception.InvalidRequest(
                    field="instance_uuids", reason=f"already allocated: {e}") from None
            outcome, results = "placed earlier", earlier
        except _ClaimsLost as e:
            outcome = "claims lost"
            self._undo(claimed, req.pending)
            raise e.error() from None
        except exception.NoValidHost as e:
            self._undo(claimed, req.pending)
            earlier = self._earlier_placements(spec, uuids, pending, resume) if named else None
            if earlier is None:
                outcome = "no valid host"
                LOG.info("No valid host for request (%d instances): %s", spec.num_instances,
                         e.reason)
                raise
            outcome, results = "placed earlier", earlier
        except exception.RequestTimeout as e:
            outcome = "timed out"
            LOG.warning("Request (%d instances) stopped at instance %d after %.1f s "
                        "([scheduler] request_timeout); releasing %d claims",
                        spec.num_instances, e.instance_index, timeout, len(claimed))
            self._undo(claimed, req.pending)
            raise
        except BaseException as e:     # eventlet's Timeout and GreenletExit too
            outcome = f"failed ({type(e).__name__})"
            self._undo(claimed, req.pending)
            raise
        finally:
            timings.placed = len(results) if outcome == "placed" else 0
            if outcome == "placed earlier":
                outcome = "placed"
            elapsed = timings.record(req.cycle.filter_seconds, req.cycle.weigher_seconds,
                                     dry_run, outcome, self.conf.scheduler.slow_request_ms,
                                     spec.num_instances)
        LOG.debug("select_destinations took %.2f ms", elapsed * 1000)
        return results

    def new_deadline(self) -> Deadline:
        """The deadline of one request starting now (``[scheduler] request_timeout``)."""
        return Deadline(self.conf.scheduler.request_timeout, _clock)

    def count_fits(self, spec: RequestSpec, deadline: Deadline | None = None,
                   preempting: bool = False) -> tuple[int, exception.NoValidHost]:
        """How many more instances of ``spec`` (one per placement) fit now, and
        why the next one does not: a dry run that claims nothing.

        Without an affinity policy a host's answer for the next instance depends
        on that host alone (its resources, cells, devices and its own group
        members), so any order of placement fills each host to the same count.
        The instances are therefore placed in rounds: each round asks the
        filters once over the whole fleet and puts one instance on every host
        that passes (one node per host name when there is a group: members are
        counted per host name), until a round places nothing. A host is checked
        again under its lock before its first instance is counted (a claim may
        have changed it since the round's filtering). A fleet of small hosts is
        counted in a few rounds whatever the number of instances; the rounds
        are as many as the most instances one host takes. With affinity the
        first pick decides where the others go: one instance per round, on the
        host the weighers pick, as ``select_destinations`` would.

        Bounded by ``[scheduler] request_timeout`` (RequestTimeout), not by
        ``max_request_work`` (which bounds a request's instances, not a count);
        or by ``deadline``, one several counts share (``scheduler.capacity``).

        ``preempting``: count as if every instance the request may preempt
        (lower priority, preemptible unless ``[preemption]
        preempt_non_preemptible``) were gone (``_without_preemptibles``).
        """
        one = spec.replace(num_instances=1, instance_uuids=None)
        started = _clock()
        deadline = deadline or self.new_deadline()
        self.host_manager.refresh()
        affinity = one.instance_group is not None and one.instance_group.policy == "affinity"
        req = self._request(one, deadline, metrics.SelectTimings(),
                            self.weighers if affinity else (), dry_run=True)
        cycle, group = req.cycle, req.group
        placed = 0
        given_up: set[int] = set()      # rows whose fit failed: nothing changes them
        own: set[int] = set()           # rows showing this count's private copy
        if preempting:
            own |= self._without_preemptibles(req)
        refused: collections.Counter = collections.Counter()
        for index in itertools.count():
            deadline.check(placed)
            request = self._context(req, index)
            rows, _ = cycle.candidates(request)
            deadline.index = placed     # a timeout names the instances counted
            if given_up:
                rows = rows[~np.isin(rows, list(given_up))]
            if affinity and len(rows):
                try:
                    _, chosen, consumed, _ = self._place(
                        req, cycle.weigh(request, rows), request, f"capacity-{placed}")
                except exception.NoValidHost as e:
                    return self._counted(req, e, placed, index, started)
                self._count_one(req, chosen, consumed, placed)
                placed += 1
                deadline.index = placed
                continue
            before = placed
            # group members are counted per host name: one node of a host a round
            # (its other nodes are asked again next round, with this member seen)
            named: set[str] | None = set() if group else None
            for row in deadline.paced(rows.tolist()):
                host = cycle.cols.hosts[row]
                if named is not None and host.host in named:
                    continue
                cached = row not in own     # else this count's private copy
                # the cached host, under its lock: a claim may have changed it
                # since this round's filtering; the copy is taken under the lock
                with host.lock() if cached else contextlib.nullcontext():
                    reason = cycle.recheck(request, host) if cached else None
                    if not reason:
                        consumed, reason = self._fit(one, host)
                    if not reason:
                        self._count_one(req, host, consumed, placed)
                if reason:
                    refused[reason] += 1
                    given_up.add(row)   # nothing this count does changes it
                    continue
                own.add(row)
                placed += 1
                deadline.index = placed
                if named is not None:
                    named.add(host.host)
            if placed == before:
                return self._counted(req, self._no_valid_host(req, request, refused),
                                     placed, index, started)
        raise AssertionError("unreachable")

    def _request(self, spec: RequestSpec, deadline: Deadline, timings: metrics.SelectTimings,
                 weighers: Sequence, *, dry_run: bool, pending: bool = False,
                 steps: Sequence[cycles.Step] | None = None) -> _Request:
        """What a select (or a count) carries from instance to instance
        (``steps``: other filters than the configured ones, e.g. a forced move's)."""
        keep = max(self.conf.filter_scheduler.host_subset_size,
                   self.conf.scheduler.max_attempts) + 8
        group = spec.instance_group.uuid if spec.instance_group else spec.scheduler_hints.group
        return _Request(spec=spec, dry_run=dry_run, group=group_key(spec.project_id, group),
                        timings=timings,
                        cycle=cycles.Cycle(self.steps if steps is None else steps, weighers,
                                           self.host_manager.columns, keep, deadline),
                        deadline=deadline, pending=pending,
                        priority=priorities.effective(spec, self.conf))

    def place_move(self, spec: RequestSpec, instance_uuid: str, move_from: claims.MoveFrom,
                   *, kept_spec: RequestSpec | None = None, force: bool = False,
                   return_alternates: bool = False, pending: bool = False
                   ) -> tuple[HostState, list[Selection]]:
        """Place one instance for a move and claim it, handing its source over to
        ``move_from.holder`` in the same transaction (``scheduler.moves``).
        ``kept_spec``: the request stored with the new placement (without the
        move's own constraints); ``force``: no filter but the ledger's check (the
        claim still refuses an over-commit), and no group policy enforced."""
        timings = metrics.SelectTimings()
        deadline = Deadline(self.conf.scheduler.request_timeout, _clock)
        self.host_manager.refresh()
        steps = cycles.plan([], builtin=(self.forced_resources_filter,)) if force else None
        req = self._request(spec, deadline, timings, self.weighers, dry_run=False,
                            pending=pending, steps=steps)
        req.move_from = move_from
        req.enforce_group = not force
        req.stored_spec = _stored_spec(kept_spec or spec)
        outcome = "error"
        try:
            weight, chosen, consumed, alternates = self._place_instance(req, 0, instance_uuid)
            outcome = "placed"
        except _AlreadyPlaced:
            outcome = "invalid request"
            raise exception.Conflict(reason=f"instance {instance_uuid} holds another "
                                            f"allocation than the one it moves from") from None
        except claims.SourceMoved as e:
            outcome = "invalid request"
            raise exception.Conflict(reason=f"{e}: it was released or moved by another "
                                            f"request meanwhile") from None
        except exception.NoValidHost:
            outcome = "no valid host"
            raise
        finally:
            timings.placed = 1 if outcome == "placed" else 0
            timings.record(req.cycle.filter_seconds, req.cycle.weigher_seconds, False,
                           outcome, self.conf.scheduler.slow_request_ms, 1)
        self.host_manager.note_placed(chosen, instance_uuid, req.group, spec.image.properties,
                                      generation=consumed.generation)
        self.host_manager.refresh_nodes([move_from.source_node_id])
        self.host_manager.reindex_preemptibles([move_from.source_node_id, chosen.node_id])
        return chosen, self._selections(weight, chosen, consumed, alternates, spec,
                                        instance_uuid, return_alternates)

    @staticmethod
    def _counted(req: _Request, e: exception.NoValidHost, placed: int, rounds: int,
                 started: float) -> tuple[int, exception.NoValidHost]:
        """The count and why the next instance does not fit (logged)."""
        e.summary["instance_index"] = placed
        LOG.info("Capacity count: %d more instances fit (%d rounds over %d hosts, "
                 "%.2f s); the next one: %s", placed, rounds, req.cycle.cols.n,
                 _clock() - started, e.reason)
        return placed, e

    def _without_preemptibles(self, req: _Request) -> set[int]:
        """Show every host of ``req``'s cycle without the instances the request
        may preempt (what-if copies); returns the rows changed. Their server
        group members stop counting on their hosts too."""
        from db import preemption as db_preemption
        from scheduler import preemption

        any_preemptible = self.conf.preemption.preempt_non_preemptible
        index = self.host_manager.preemptible_index(any_preemptible)
        cycle = req.cycle
        room = preemption.Room.of(cycle.cols, index.view(req.priority, any_preemptible, ()),
                                  {})
        changed: set[int] = set()
        for row in np.unique(room.rows[room.rows >= 0]).tolist():
            req.deadline.pace()
            host = cycle.cols.hosts[row]
            victims = [c for c in room.candidates_on(host.node_id) if c.uuid in host.instances]
            if not victims:
                continue
            fitted = {c.uuid: db_preemption.numa_cells_json(c.numa_cells) for c in victims}
            gone = sum(1 for c in victims if req.group is not None and
                       c.instance_group == req.group)
            if gone:
                req.local_group[host.host] -= gone
            cycle.overlay(row, preemption.what_if(host, victims, fitted))
            changed.add(row)
        return changed

    def _count_one(self, req: _Request, host: HostState, consumed: Consumed,
                   placed: int) -> None:
        """A counted instance on ``host``: the next rounds see it there."""
        if req.group:
            req.local_group[host.host] += 1
        self._show_dry_claim(req, host, consumed, f"capacity-{placed}")

    def release(self, instance_uuid: str, *,
                pending_before: datetime.datetime | None = None,
                why: str | None = "its claim was not confirmed within [scheduler] claim_ttl",
                kind: str = "released") -> bool:
        """Free the instance's allocation. True when it is released, by this call
        or by an earlier release whose answer was lost (``db.transitions``);
        False if it held nothing. ``pending_before``: only if it is still
        pending and older (the reaper, which logs ``why`` as a WARNING; None:
        an INFO line as any release). ``kind``: how it is remembered."""
        hm = self.host_manager
        if pending_before is not None:
            kind = "reaped"
        # Under the cached host's lock, as a claim: this worker's claims of the
        # host wait until the cache has the release (else they would claim with
        # the generation the release just moved past, and conflict).
        node_id = hm.instance_nodes([instance_uuid]).get(instance_uuid)
        cached = hm.get(node_id) if node_id is not None else None
        with cached.lock() if cached is not None else contextlib.nullcontext():
            released = claims.release(self.db, instance_uuid, pending_before=pending_before,
                                      kind=kind, remembered=pending_before is None)
            if released is None:
                return False
            hm.note_released(instance_uuid)
            if getattr(released, "preempted", False):
                # its room was handed over when it was preempted: nothing changes
                LOG.info("Released %s (preempted earlier)", instance_uuid)
                return True
            # an earlier release (this worker's cache may not have it: the
            # first try's answer was lost) is read again from the database
            applied = not isinstance(released, transitions.Transition) and hm.apply_release(
                released, locked=cached is not None and cached.node_id == released.node_id)
        if not applied:
            hm.refresh_nodes([released.node_id])
        if isinstance(released, transitions.Transition):
            LOG.info("Released %s from %s already at %s: answering a retry", instance_uuid,
                     released.host, released.at.isoformat(timespec="seconds"))
        elif pending_before is None or why is None:
            LOG.info("Released %s from %s", instance_uuid, released.host)
        else:
            LOG.warning("Released %s from %s: %s", instance_uuid, released.host, why)
        return True

    def confirm(self, instance_uuids: Sequence[str], project=claims.ANY_PROJECT
                ) -> tuple[list[str], list[str]]:
        """Confirm pending claims: (instances that hold one, those that hold none);
        ``project``: only that project's claims count (``db.claims.confirm``)."""
        confirmed, unknown = claims.confirm(self.db, instance_uuids, project)
        self.host_manager.note_confirmed(confirmed)
        return confirmed, unknown

    def reschedule(self, instance_uuid: str, failed_host: str,
                   return_alternates: bool = False, pending: bool = False
                   ) -> list[Selection]:
        """The build on ``failed_host`` failed: release, count the failure on that
        host and place the instance again elsewhere (pending: as in
        ``select_destinations``).

        The same reschedule sent again (its answer lost, or its worker gone
        after the release) finds the instance released from ``failed_host``
        by a reschedule (``db.transitions``): it answers the placement that
        reschedule made, or places the instance now if none was made."""
        alloc = claims.get_allocation(self.db, instance_uuid)
        if alloc is None or alloc["host"] != failed_host:
            earlier = transitions.last_of(self.db, instance_uuid)
            if earlier is None or earlier.kind != "rescheduled" \
                    or earlier.host != failed_host or not earlier.request_spec:
                if alloc is None:
                    raise exception.NotFound(kind="Allocation", name=instance_uuid)
                raise exception.InvalidRequest(
                    field="failed_host",
                    reason=f"instance {instance_uuid} is on {alloc['host']}, "
                           f"not {failed_host}")
            LOG.info("Reschedule of %s from %s was made already at %s (a retry): "
                     "answering with its placement", instance_uuid, failed_host,
                     earlier.at.isoformat(timespec="seconds"))
            spec = self._rescheduled(earlier.request_spec, instance_uuid, failed_host)
            return self.select_destinations(spec, [instance_uuid], return_alternates,
                                            pending=pending)[0]
        spec = self._rescheduled(alloc["request_spec"], instance_uuid, failed_host)
        self.release(instance_uuid, kind="rescheduled")
        if claims.record_build_failure(self.db, failed_host):
            for hs in self.host_manager.hosts_named(failed_host):
                self.host_manager.refresh_nodes([hs.node_id])
        return self.select_destinations(spec, [instance_uuid], return_alternates,
                                        pending=pending)[0]

    def _rescheduled(self, stored_spec: str, instance_uuid: str, failed_host: str
                     ) -> RequestSpec:
        """The request that places a rescheduled instance again: its own, for
        it alone, without ``failed_host``."""
        spec = self.parse_request(json.loads(stored_spec))
        return spec.replace(num_instances=1, instance_uuids=(instance_uuid,),
                            ignore_hosts=tuple(spec.ignore_hosts) + (failed_host,))

    # -- steps -------------------------------------------------------------
    def _earlier_placements(self, spec: RequestSpec, uuids: Sequence[str], pending: bool,
                            resume: bool) -> list[list[Selection]] | None:
        """A retry of a request that was placed already (its reply was lost): when
        every instance holds an allocation made for this same request, those
        placements (weight 0, no alternates); None when none holds one.

        When only some hold one, all made for this same request and still
        pending, the first try stopped part-way (its worker died, or the
        database went away during its undo: a request of several instances
        keeps its claims pending until all are placed): the others are placed
        now (``resume``), and the whole request answered. Any other mix is
        refused, and nothing is claimed twice. Unless the caller confirms
        (``pending``), the claims are confirmed now."""
        held = claims.allocations_for(self.db, uuids)
        if not held:
            return None
        # Another project's instance is refused before anything is read from,
        # returned, confirmed or released of it, in the words of an instance of
        # this project held by another request: the reply does not tell which.
        # (No project is one of its own: None matches only None.)
        foreign = next((u for u in uuids if u in held
                        and held[u]["project_id"] != spec.project_id), None)
        if foreign is not None:
            raise exception.InvalidRequest(field="instance_uuids",
                                           reason=f"already allocated: {foreign}")
        stored = _stored_spec(spec)
        missing = [u for u in uuids if u not in held]
        other = next((u for u in uuids if u in held and held[u]["request_spec"] != stored),
                     None)
        if other is None and missing and not (
                resume and all(alloc["pending"] for alloc in held.values())):
            other = next(u for u in uuids if u in held)
        if other is not None:
            raise exception.InvalidRequest(field="instance_uuids",
                                           reason=f"already allocated: {other}")
        placed: dict[str, list[Selection]] = {}
        if missing:
            LOG.info("Request for %s was placed in part already (its first try stopped "
                     "part-way): placing %s", ", ".join(uuids), ", ".join(missing))
            rest = spec.replace(num_instances=len(missing), instance_uuids=tuple(missing))
            try:
                result = self._select(rest, missing, False, False, True, resume=False)
            except exception.BerthError:
                # the request failed as a whole: give back what its first try held
                for uuid in held:
                    self.release(uuid, pending_before=_FAR_FUTURE,
                                 why="its request failed when retried")
                raise
            placed = dict(zip(missing, result, strict=True))
        else:
            LOG.info("Request for %s was placed already (a retry): returning those "
                     "placements", ", ".join(uuids))
        if not pending and (placed or any(held[uuid]["pending"] for uuid in uuids)):
            _, lost = claims.confirm(self.db, uuids)
            if lost:
                for uuid in uuids:
                    self.release(uuid, pending_before=_FAR_FUTURE,
                                 why="its request lost other claims when retried")
                raise _ClaimsLost(lost).error()
        from db import preemption as db_preemption

        victims = db_preemption.preempted_of(self.db, [u for u in uuids if u not in placed])
        return [placed[uuid] if uuid in placed
                else [self._held_selection(uuid, held[uuid], victims.get(uuid, ()))]
                for uuid in uuids]

    @staticmethod
    def _held_selection(uuid: str, alloc: Mapping, preempted=()) -> Selection:
        return Selection(
            preempted=tuple(preempted),
            instance_uuid=uuid, host=alloc["host"], node=alloc["hypervisor_hostname"],
            node_uuid=alloc["node_uuid"], weight=0.0,
            allocation=classic_allocation(alloc["allocations"]),
            resources=dict(alloc["resources"]), allocations=alloc["allocations"],
            numa_cells=json.loads(alloc["numa_cells"]) if alloc["numa_cells"] else None,
            pci_devices=tuple(json.loads(alloc["pci_devices"] or "[]")))

    def _check_work(self, spec: RequestSpec) -> None:
        """Refuse up front a request whose instances x hosts exceed max_request_work."""
        cap = self.conf.scheduler.max_request_work
        hosts = self.host_manager.columns.n
        if cap and spec.num_instances * hosts > cap:
            raise exception.InvalidRequest(
                field="num_instances",
                reason=f"{spec.num_instances} instances x {hosts} hosts is more work than "
                       f"[scheduler] max_request_work ({cap}) allows: split the request")

    @staticmethod
    def _instance_uuids(spec: RequestSpec, given: Sequence[str] | None) -> list[str]:
        uuids = list(given) if given else list(spec.instance_uuids or ())
        if not uuids:
            return [str(uuidlib.uuid4()) for _ in range(spec.num_instances)]
        if len(uuids) != spec.num_instances:
            raise exception.InvalidRequest(
                field="instance_uuids",
                reason=f"{len(uuids)} given for num_instances={spec.num_instances}")
        if len(set(uuids)) != len(uuids):
            raise exception.InvalidRequest(field="instance_uuids", reason="duplicate UUIDs")
        return uuids

    def _context(self, req: _Request, index: int) -> RequestContext:
        """The world as instance ``index`` sees it now: group members (cached and
        placed by this request) and the nodes of the instances its hints name."""
        spec = req.spec
        group_hosts = self.host_manager.group_hosts(req.group)
        for host, n in req.local_group.items():
            group_hosts[host] = group_hosts.get(host, 0) + n
        hints = spec.scheduler_hints
        named = hints.same_host + hints.different_host
        nodes = self.host_manager.instance_nodes(named) if named else {}
        return RequestContext(spec=spec, now=utcnow(), conf=self.conf,
                              group_hosts=group_hosts, instance_nodes=nodes, index=index)

    def _place_instance(self, req: _Request, index: int, instance_uuid: str):
        """Filter, weigh and consume for one instance: (weight, host, Consumed,
        the other candidates in pick order); when it fits nowhere and the
        request may preempt, the host and victims the preemption search finds."""
        try:
            return self._place_instance_as_is(req, index, instance_uuid)
        except exception.NoValidHost as e:
            if not req.allow_preemption:
                raise
            return self._place_preempting(req, index, instance_uuid, e)

    def _place_instance_as_is(self, req: _Request, index: int, instance_uuid: str):
        """Filter, weigh and consume for one instance, preempting nothing."""
        for attempt in range(self.conf.scheduler.claim_retries + 1):
            if attempt:
                req.deadline.check(index)
            request = self._context(req, index)
            if attempt:
                metrics.count_claim_retry("group_changed")
                req.cycle.start_instance(request, again=True)
            timings = req.timings
            started = time.perf_counter()
            rows, removed = req.cycle.candidates(request)
            started = timings.phase("filter", started)
            timings.add_removed(removed)
            if not len(rows):
                raise self._no_valid_host(req, request)
            weighed = req.cycle.weigh(request, rows)
            started = timings.phase("weigh", started)
            try:
                weight, chosen, consumed, alternates = self._place(
                    req, weighed, request, instance_uuid)
            except _GroupChanged:
                continue
            finally:
                timings.phase("claim", started)
            (LOG.debug if req.dry_run else LOG.info)(
                     "Placed %s on %s: %d/%d hosts passed filters (%s)%s",
                     instance_uuid, chosen.host, len(rows), req.cycle.cols.n,
                     ", ".join(f"{name} -{n}" for name, n in removed.items() if n)
                     or "none removed", " [dry run]" if req.dry_run else "")
            return weight, chosen, consumed, alternates
        summary = req.cycle.explain(self._context(req, index)).summary(0)
        summary["instance_index"] = index
        summary["filters"].append({"filter": "claim", "removed": 1, "reasons": {
            "server group changed under this scheduler on every attempt": 1}})
        raise exception.NoValidHost(reason=Explanation.text(summary), summary=summary)

    # -- preemption ------------------------------------------------------------
    def _index_claim(self, req: _Request, host: HostState, instance_uuid: str,
                     consumed: Consumed) -> None:
        """Tell the preemptible index of a claim written (a request of higher
        priority may preempt it later)."""
        numa_cells = None
        if consumed.numa_fitted is not None:
            numa_cells = json.dumps(consumed.numa_fitted.to_primitive(), sort_keys=True)
        self.host_manager.note_claimed(
            host, instance_uuid, req.group, items=claim_items(host, consumed.assignment),
            priority=req.priority, preemptible=req.spec.priority.preemptible,
            pending=req.pending, project_id=req.spec.project_id, numa_cells=numa_cells,
            pci_pools=[(key, count) for _i, key, count in consumed.pci_picks],
            created_at=consumed.at)

    def _victim_cost(self):
        if self._cost is None:
            from scheduler import victim_costs

            self._cost = victim_costs.load(self.conf.preemption.victim_cost, self.conf)
        return self._cost

    def _place_preempting(self, req: _Request, index: int, instance_uuid: str,
                          nvh: exception.NoValidHost):
        """The instance fits nowhere as things are: find the host and the
        cheapest victims (``scheduler.preemption``) and claim it preempting
        them in one transaction; a lost race searches again. NoValidHost (its
        reason saying why preemption found nothing) when nothing is found."""
        from scheduler import preemption

        opts = self.conf.preemption
        summary = dict(nvh.summary)
        summary["filters"] = list(summary.get("filters", ()))
        if not opts.enabled:
            outcome = preemption.Outcome()
            outcome.reasons["preemption is off ([preemption] enabled)"] += 1
        elif req.spec.num_instances > 1 and not req.dry_run:
            # Its instances are claimed one transaction each: one failing after
            # others preempted would leave their victims preempted for a request
            # that failed (their room handed back while they still run).
            outcome = preemption.Outcome()
            outcome.reasons[MULTI_INSTANCE_REFUSAL] += 1
        else:
            search = preemption.PreemptionSearch(self.db, self.host_manager, self.conf,
                                                 self._fit, self._victim_cost())
            # A node whose claim conflicted more than claim_retries times is
            # left to the others (as the claim path moves to its next candidate).
            # After a lost race the search returns the cheapest sets on up to
            # NEAR_BEST_MAX hosts: they are tried in random order before the
            # next search (concurrent requests spread over them).
            lost: collections.Counter = collections.Counter()
            retries = self.conf.scheduler.claim_retries
            queued: list = []
            searches = 0
            while True:
                req.deadline.pace()
                if queued:
                    found = queued.pop()
                    if lost[found.host.node_id] > retries:
                        continue
                else:
                    if searches == PREEMPTION_SEARCHES:
                        outcome = preemption.Outcome()
                        outcome.reasons["claim conflicts with another scheduler on every "
                                        "attempt"] += 1
                        break
                    searches += 1
                    request = self._context(req, index)
                    skip = req.no_preemption_nodes | {n for n, c in lost.items()
                                                      if c > retries}
                    outcome = search.find(req.spec, req.priority, req.cycle, request,
                                          req.group, exclude=frozenset(req.dry_victims),
                                          skip_nodes=frozenset(skip),
                                          spread=NEAR_BEST_MAX if lost else 1, rng=self._rng)
                    found = outcome.found
                    if found is None:
                        break
                    queued = list(outcome.others)
                    self._rng.shuffle(queued)
                if req.dry_run:
                    req.dry_victims.update(v.uuid for v in found.victims)
                    consumed = dataclasses.replace(found.consumed, victims=found.victims)
                    # the state with the victims gone: the next instances of
                    # the dry run see this one placed on it (_show_dry_claim)
                    return 0.0, found.what_if, consumed, []
                try:
                    consumed = self._claim_preempting(req, found, instance_uuid)
                except claims.DuplicateAllocation:
                    raise _AlreadyPlaced(instance_uuid) from None
                except claims.PreemptionConflict as e:
                    metrics.count_claim_conflict("preemption")
                    LOG.info("Preempting claim on %s refused (%s); searching again",
                             found.host.host, e)
                    if e.zone is not None:
                        req.no_preemption_zones.add(e.zone)
                        req.no_preemption_nodes |= self.host_manager.zone_nodes(e.zone)
                    elif e.budget:
                        req.no_preemption_nodes.add(found.host.node_id)
                    lost[found.host.node_id] += 1
                    self.host_manager.refresh_nodes([found.host.node_id])
                    self.host_manager.reindex_preemptibles([found.host.node_id])
                    continue
                except claims.ClaimConflict as e:
                    metrics.count_claim_conflict("generation")
                    LOG.debug("Preempting claim on %s lost a race (%s)", found.host.host, e)
                    lost[found.host.node_id] += 1
                    self.host_manager.refresh_nodes([found.host.node_id])
                    continue
                metrics.count_preemption(len(found.victims), req.priority,
                                         found.host.availability_zone)
                LOG.info("Placed %s on %s preempting %s (priority %d)", instance_uuid,
                         found.host.host, ", ".join(v.uuid for v in found.victims),
                         req.priority)
                return 0.0, found.host, consumed, []
            if req.no_preemption_zones:
                outcome.reasons["[preemption] max_per_az_per_minute reached"] += \
                    len(req.no_preemption_zones)
            elif req.no_preemption_nodes:
                outcome.reasons["[preemption] max_per_host_per_minute reached"] += \
                    len(req.no_preemption_nodes)
        summary["filters"].append(outcome.summary_entry())
        raise exception.NoValidHost(reason=Explanation.text(summary), summary=summary) \
            from None

    def _claim_preempting(self, req: _Request, found, instance_uuid: str) -> Consumed:
        """Persist a preempting claim under the host's lock (the host must still
        be the state the victims were chosen on) and take it into the cache."""
        from db import preemption as db_preemption

        host = found.host
        opts = self.conf.preemption
        zone = host.availability_zone
        per_zone = opts.max_per_az_per_minute
        victims = db_preemption.Victims(
            uuids=tuple(v.uuid for v in found.victims), priority=req.priority,
            any_preemptible=opts.preempt_non_preemptible,
            max_per_minute=opts.max_per_host_per_minute,
            max_per_zone_per_minute=per_zone, zone=zone,
            zone_nodes=self.host_manager.zone_nodes(zone) if per_zone else frozenset(),
            zone_aggregates=tuple(sorted(
                a.id for a in host.aggregates
                if a.metadata.get("availability_zone") == zone)) if per_zone else ())
        persist = self._persister(req, instance_uuid)
        with host.lock():
            if host.generation != found.seen_generation:
                raise claims.ClaimConflict(f"node {host.node_id} changed since the search")
            consumed = persist(found.what_if, found.consumed, victims)
            consumed = dataclasses.replace(consumed, victims=found.victims)
            self.host_manager.apply_preemption(host, found.what_if, req.spec, consumed)
        return consumed

    def _no_valid_host(self, req: _Request, request: RequestContext,
                       refused: Mapping[str, int] | None = None) -> exception.NoValidHost:
        summary = req.cycle.explain(request).summary(0)
        summary["instance_index"] = request.index
        if refused:
            summary["filters"].append({"filter": "claim", "removed": sum(refused.values()),
                                       "reasons": dict(collections.Counter(refused)
                                                       .most_common())})
        return exception.NoValidHost(reason=Explanation.text(summary), summary=summary)

    def _spread(self) -> float:
        spread = self.conf.filter_scheduler.near_best_spread
        if spread is None:
            try:
                workers = self.conf.scheduler.workers
            except cfg.NoSuchOptError:      # embedded: no daemon options registered
                workers = 1
            return 0.1 if workers > 1 else 0.0
        return spread

    def _pick_order(self, weighed: list[tuple[float, HostState]]) -> list[int]:
        """Indexes into ``weighed`` in the order to try them."""
        n = len(weighed)
        order = list(range(n))
        fs = self.conf.filter_scheduler
        spread = self._spread()
        if spread > 0 and n > 1:
            # Concurrent schedulers with the same view would all take the best
            # host and all but one lose the claim: start from a random one of
            # the near-best instead (the rest keep their order).
            floor = weighed[0][0] - spread
            near = 1
            while near < min(n, NEAR_BEST_MAX) and weighed[near][0] >= floor:
                near += 1
            if near > 1:
                mine = range(near)
                if self.partition is not None:
                    # workers of one daemon prefer different near-best hosts
                    index, count = self.partition
                    mine = [j for j in range(near)
                            if weighed[j][1].node_id % count == index] or mine
                order.insert(0, order.pop(self._rng.choice(mine)))
                return order
        if fs.shuffle_best_same_weighed_hosts and n > 1:
            best = weighed[0][0]
            same = 1
            while same < n and weighed[same][0] == best:
                same += 1
            head = order[:same]
            self._rng.shuffle(head)
            order[:same] = head
        subset = min(fs.host_subset_size, n)
        if subset > 1:
            pick = self._rng.randrange(subset)
            order.insert(0, order.pop(pick))
        return order

    def _place(self, req: _Request, weighed, request: RequestContext, instance_uuid: str):
        """Consume on the first candidate (in pick order) that still takes it."""
        order = self._pick_order(weighed)
        refused: collections.Counter = collections.Counter()
        pos = 0
        while True:
            if pos == len(order):
                if not isinstance(weighed, cycles.LazyWeighed) or weighed.complete:
                    break
                weighed.extend_all()
                order.extend(range(len(order), len(weighed)))
                if pos == len(order):
                    break
            weight, host = weighed[order[pos]]
            if pos:
                req.deadline.pace()     # and let other requests run between claims
            pos += 1
            consumed = self._try_consume(req, host, request.index, instance_uuid, refused)
            if consumed is None:
                continue
            rest = [weighed[j] for j in order[pos:]]
            return weight, host, consumed, rest
        raise self._no_valid_host(req, request, refused)

    def _checked_consume(self, req: _Request, host: HostState, index: int
                         ) -> tuple[Consumed | None, str | None]:
        """Under the host's lock: every filter again on the host as it is now,
        with fresh group counts, and where its NUMA cells and PCI devices go."""
        reason = req.cycle.recheck(self._context(req, index), host)
        if reason:
            return None, reason
        return self._fit(req.spec, host)

    @staticmethod
    def _fit(spec: RequestSpec, host: HostState) -> tuple[Consumed | None, str | None]:
        """Which of ``host``'s providers give the request's resources, and where
        its NUMA cells and PCI devices go (under the host's lock)."""
        assignment, reason = assigned(spec.resources, host.tree, host.usage)
        if reason:
            return None, f"ResourcesFilter: {reason}"
        if spec.numa_topology is None and not spec.pci_requests:
            return Consumed(node_id=host.node_id, assignment=assignment,
                            generation=host.generation), None
        fit = host.fit(spec)
        if fit.reason:
            return None, fit.reason
        if fit.numa_fitted is not None:
            assignment = pinned_cpus(assignment, host, fit.numa_fitted)
        return Consumed(node_id=host.node_id, assignment=assignment,
                        numa_fitted=fit.numa_fitted, pci_picks=fit.pci_picks,
                        generation=host.generation), None

    def _try_consume(self, req: _Request, host: HostState, index: int, instance_uuid: str,
                     refused: collections.Counter) -> Consumed | None:
        if req.dry_run:
            with host.lock():
                consumed, reason = self._checked_consume(req, host, index)
            if reason:
                refused[reason] += 1
            return consumed
        persist = self._persister(req, instance_uuid)
        for attempt in range(self.conf.scheduler.claim_retries + 1):
            if attempt:
                metrics.count_claim_retry("conflict")
            try:
                with host.lock():
                    consumed, reason = self._checked_consume(req, host, index)
                    if reason:
                        refused[reason] += 1
                        return None
                    consumed = persist(host, consumed)
                    try:
                        self.host_manager.apply_claim(host, req.spec, consumed)
                    except BaseException:
                        # persisted but not applied: give it back, then fail (the
                        # cached host is behind the database now; the next claim
                        # on it conflicts and re-reads it)
                        claims.release(self.db, instance_uuid)
                        raise
                    return consumed
            except claims.DuplicateAllocation:
                raise _AlreadyPlaced(instance_uuid) from None
            except claims.GroupPolicyConflict as e:
                metrics.count_claim_conflict("group_policy")
                LOG.info("Claim on %s refused by its server group (%s); reading the "
                         "group's hosts again", host.host, e)
                self.host_manager.refresh_nodes(claims.group_member_nodes(self.db, req.group))
                group = req.spec.instance_group
                if group is not None and group.policy == "affinity":
                    raise _GroupChanged() from None     # find where the group is now
                # anti-affinity: this host is out; the next candidates are
                # re-checked under their locks with the group's hosts just read
                refused["server group changed under this scheduler"] += 1
                return None
            except claims.ClaimConflict as e:
                LOG.debug("Claim on %s lost a race (attempt %d)", host.host, attempt + 1)
                seen = host.generation
                self.host_manager.refresh_nodes([host.node_id])
                if self.host_manager.get(host.node_id) is not host:
                    metrics.count_claim_conflict("generation")
                    break       # the node was deleted meanwhile
                if host.generation == seen:
                    # Nobody else changed the node: the database refused this
                    # claim on its own terms (e.g. a PF and one of its VFs in one
                    # boot). Trying again would fail the same way.
                    metrics.count_claim_conflict("refused")
                    refused[f"claim refused: {e}"] += 1
                    return None
                metrics.count_claim_conflict("generation")
        refused["claim conflicts with another scheduler"] += 1
        return None

    def _show_dry_claim(self, req: _Request, host: HostState, consumed: Consumed,
                        instance_uuid: str) -> None:
        """Let the next instances of a dry run see this one on a what-if copy."""
        row = req.cycle.cols.row_of_node.get(host.node_id)
        if row is None:
            return
        what_if = host.copy()
        what_if.apply(req.spec, consumed)
        what_if.instances[instance_uuid] = req.group
        if self.host_manager.load_instance_images:
            what_if.instance_images[instance_uuid] = frozenset(
                req.spec.image.properties.items())
        req.cycle.overlay(row, what_if)

    def _persister(self, req: _Request, instance_uuid: str):
        spec = req.spec
        group = req.group
        policy = spec.instance_group.policy if spec.instance_group and req.enforce_group \
            else None
        max_per_host = (spec.instance_group.max_server_per_host or 1) \
            if spec.instance_group else 1
        if req.stored_spec is None:
            req.stored_spec = _stored_spec(spec)
        stored_spec = req.stored_spec

        def persist(host: HostState, consumed: Consumed, victims=None) -> Consumed:
            """``victims``: ``db.preemption.Victims`` preempted by this claim, and
            ``host`` the state with them gone."""
            numa_after = numa_cells = None
            if consumed.numa_fitted is not None:
                from numa import usage

                numa_after = json.dumps(
                    usage.apply_usage(host.numa_topology, consumed.numa_fitted).to_primitive(),
                    sort_keys=True)
                numa_cells = json.dumps(consumed.numa_fitted.to_primitive(), sort_keys=True)
            elif victims is not None and host.numa_topology is not None:
                numa_after = json.dumps(host.numa_topology.to_primitive(), sort_keys=True)
            picks = tuple((spec.pci_requests[i].request_id, key, count)
                          for i, key, count in consumed.pci_picks)
            result = claims.claim(self.db, claims.ClaimRecord(
                instance_uuid=instance_uuid, node_id=host.node_id,
                seen_generation=host.generation,
                items=claim_items(host, consumed.assignment), numa_topology=numa_after,
                numa_cells=numa_cells, pci_picks=picks, project_id=spec.project_id,
                user_id=spec.user_id, instance_group=group, request_spec=stored_spec,
                request_spec_id=req.spec_row_id, share_spec=spec.num_instances > 1,
                pending=req.pending,
                group_policy=policy, group_max_per_host=max_per_host, host=host.host,
                move_from=req.move_from, priority=req.priority,
                preemptible=spec.priority.preemptible, victims=victims,
                image_properties=spec.image.properties or None))
            # The spec is stored by the request's first claim and shared by the
            # others: a 2 MB spec with 20 instances is stored once, not 20 times.
            req.spec_row_id = result.request_spec_id
            return dataclasses.replace(consumed, generation=result.generation,
                                       pci_addresses=result.pci_addresses,
                                       pci_pools=result.pci_pools, at=result.at)
        return persist

    def _selections(self, weight: float, chosen: HostState, consumed: Consumed, alternates,
                    spec: RequestSpec, instance_uuid: str, return_alternates: bool
                    ) -> list[Selection]:
        held = held_amounts(chosen, consumed.assignment)
        numa_cells = consumed.numa_fitted.to_primitive() if consumed.numa_fitted else None
        out = [Selection(instance_uuid=instance_uuid, host=chosen.host, node=chosen.nodename,
                         node_uuid=chosen.uuid, weight=weight,
                         allocation=classic_allocation(held), resources=summed(held),
                         allocations=held, numa_cells=numa_cells,
                         pci_devices=consumed.pci_addresses,
                         preempted=tuple({"instance_uuid": v.uuid, "host": chosen.host,
                                          "node": chosen.nodename, "priority": v.priority,
                                          "project_id": v.project_id}
                                         for v in consumed.victims))]
        if return_alternates:
            limit = self.conf.scheduler.max_attempts - 1
            asked = spec.resources.amounts()
            for w, h in alternates[:limit]:
                out.append(Selection(instance_uuid=instance_uuid, host=h.host,
                                     node=h.nodename, node_uuid=h.uuid, weight=w,
                                     allocation=classic_allocation({"": asked}),
                                     resources=dict(asked), alternate=True))
        return out

    def _undo(self, claimed: list[str], pending: bool) -> None:
        """Give back a failed request's claims. Those of a request of several
        instances are pending: what cannot be released now (the database went
        away) the reaper releases after ``[scheduler] claim_ttl``; one that is
        confirmed already is not this try's to give back (another try of the
        same request took it over and answered it)."""
        for instance_uuid in claimed:
            try:
                self.release(instance_uuid, pending_before=_FAR_FUTURE if pending else None,
                             why=None)
            except Exception as e:      # keep undoing the others
                if pending:
                    LOG.warning("Could not release %s while undoing a failed request "
                                "(%s); its claim is pending: the reaper releases it "
                                "after [scheduler] claim_ttl", instance_uuid,
                                type(e).__name__)
                else:
                    LOG.exception("Could not release %s while undoing a failed request",
                                  instance_uuid)
