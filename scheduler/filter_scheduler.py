"""FilterScheduler: filter, weigh, pick, then check-and-consume with a persisted claim.

For each instance of a request (seed 001): take the cached host states, run the
enabled filters in their configured order (remembering why each host was
removed), weigh the survivors, pick at random among the best
``host_subset_size``, and consume the request on that host under its lock,
writing the claim in one generation-guarded transaction (DESIGN §4). A claim
conflict re-reads that one host, re-checks it and otherwise moves on to the
next candidate. A multi-instance request is all-or-nothing.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import json
import random
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from oslo_config import cfg
from oslo_log import log as logging
from stevedore import named

from db import claims
from db.models import utcnow
from scheduler import exception
from scheduler.filters import FILTER_NAMESPACE, BaseHostFilter, FilterContext
from scheduler.host_manager import HostManager
from scheduler.host_state import Consumed, ConsumeRefused, HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights import WEIGHER_NAMESPACE, BaseWeigher, normalize

LOG = logging.getLogger(__name__)

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
                    "conflicts) at the cost of less optimal packing."),
    cfg.BoolOpt("shuffle_best_same_weighed_hosts", default=False,
                help="Shuffle the hosts that share the best weight before picking, so "
                     "identical hosts are used evenly."),
]
scheduler_opts = [
    cfg.IntOpt("max_attempts", default=3, min=1,
               help="Hosts returned per instance when alternates are asked for: the "
                    "chosen one plus up to max_attempts - 1 alternates."),
    cfg.IntOpt("claim_retries", default=1, min=0,
               help="How many times a claim that lost a race re-reads the host and "
                    "tries it again before moving to the next candidate."),
]
pci_opts = [
    cfg.MultiStrOpt("alias", default=[],
                    help="A PCI alias as JSON, e.g. {\"name\": \"nic\", \"vendor_id\": "
                         "\"8086\", \"product_id\": \"154c\", \"device_type\": \"type-VF\", "
                         "\"numa_policy\": \"legacy\"}. Repeat the option for several "
                         "aliases; flavors ask for them with pci_passthrough:alias."),
]

cfg.CONF.register_opts(filter_scheduler_opts, group="filter_scheduler")
cfg.CONF.register_opts(scheduler_opts, group="scheduler")
cfg.CONF.register_opts(pci_opts, group="pci")

LIST_OPTS = [("filter_scheduler", filter_scheduler_opts), ("scheduler", scheduler_opts),
             ("pci", pci_opts)]


@dataclasses.dataclass(frozen=True)
class Selection:
    """One answer for one instance: a chosen host or an alternate."""

    instance_uuid: str
    host: str
    node: str
    node_uuid: str
    weight: float
    allocation: Mapping[str, int]
    numa_cells: Any = None
    pci_devices: tuple[str, ...] = ()
    alternate: bool = False

    def to_primitive(self) -> dict:
        return {"instance_uuid": self.instance_uuid, "host": self.host, "node": self.node,
                "node_uuid": self.node_uuid, "weight": self.weight,
                "allocation": dict(self.allocation), "numa_cells": self.numa_cells,
                "pci_devices": list(self.pci_devices), "alternate": self.alternate}

    @classmethod
    def from_primitive(cls, data: Mapping) -> Selection:
        return cls(instance_uuid=data["instance_uuid"], host=data["host"], node=data["node"],
                   node_uuid=data["node_uuid"], weight=data["weight"],
                   allocation=dict(data["allocation"]), numa_cells=data.get("numa_cells"),
                   pci_devices=tuple(data.get("pci_devices") or ()),
                   alternate=bool(data.get("alternate")))


class _Explanation:
    """Per filter: how many hosts it removed and why (grouped by reason text)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.removed: dict[str, collections.Counter] = {}

    def add(self, filter_name: str, failed: Sequence[tuple[HostState, str]]) -> None:
        if failed:
            counter = self.removed.setdefault(filter_name, collections.Counter())
            for _, reason in failed:
                counter[reason] += 1

    def add_count(self, filter_name: str, reason: str, count: int) -> None:
        if count:
            self.removed.setdefault(filter_name, collections.Counter())[reason] += count

    def summary(self, available: int) -> dict:
        return {"hosts": self.total, "available": available,
                "filters": [{"filter": name, "removed": sum(c.values()),
                             "reasons": dict(c.most_common())}
                            for name, c in self.removed.items()]}

    @staticmethod
    def text(summary: Mapping) -> str:
        parts = []
        for f in summary["filters"]:
            reasons = f["reasons"]
            if len(reasons) == 1:
                detail = next(iter(reasons))
            else:
                detail = ", ".join(f"{n} {r}" for r, n in reasons.items())
            parts.append(f"{f['removed']} {f['filter']} ({detail})")
        head = f"{summary['available']}/{summary['hosts']} hosts available"
        return head + (": " + ", ".join(parts) if parts else "")


def load_filters(names: Sequence[str], conf) -> list[BaseHostFilter]:
    return _load(FILTER_NAMESPACE, names, conf, "enabled_filters")


def load_weighers(names: Sequence[str], conf) -> list[BaseWeigher]:
    return _load(WEIGHER_NAMESPACE, names, conf, "weight_classes")


def _load(namespace: str, names: Sequence[str], conf, option: str) -> list:
    """Instantiate the named plugins, in the given order; unknown names fail."""
    missing: list[str] = []

    def _load_failed(manager, entrypoint, error):
        raise exception.InvalidRequest(
            field=f"filter_scheduler.{option}",
            reason=f"plugin {entrypoint.name} failed to load: {error}")

    mgr = named.NamedExtensionManager(
        namespace, names=list(names), invoke_on_load=False, name_order=True,
        on_missing_entrypoints_callback=missing.extend,
        on_load_failure_callback=_load_failed)
    if missing:
        known = sorted(ep.name for ep in mgr.list_entry_points())
        hint = f"; known: {', '.join(known)}" if known else ""
        raise exception.InvalidRequest(
            field=f"filter_scheduler.{option}",
            reason=f"unknown plugin(s) {', '.join(sorted(missing))}{hint}")
    return [ext.plugin(conf) for ext in mgr]


class FilterScheduler:
    """Chooses hosts for requests and holds what it handed out."""

    def __init__(self, host_manager: HostManager, conf: cfg.ConfigOpts = cfg.CONF) -> None:
        self.host_manager = host_manager
        self.db = host_manager.db
        self.conf = conf
        fs = conf.filter_scheduler
        self.filters = load_filters(fs.enabled_filters, conf)
        self.weighers = load_weighers(fs.weight_classes, conf)
        self.pci_aliases = self._parse_aliases(conf.pci.alias)
        #: Evaluate filters and weighers on numpy columns where they allow it.
        #: The straightforward per-host path gives the same answers (tested).
        self.fast_path = True
        if not host_manager.load_pci_pools:
            host_manager.load_pci_pools = "PciPassthroughFilter" in fs.enabled_filters
        self._rng = random.Random()

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
        build: the weighers' aggregate-override columns."""
        self.host_manager.refresh()
        cols = self.host_manager.columns
        for w in self.weighers:
            if w.aggregate_multiplier_key:
                cols.aggregate_min(w.aggregate_multiplier_key)

    def parse_request(self, data: Any) -> RequestSpec:
        """Validate a request payload with this scheduler's PCI aliases."""
        return RequestSpec.from_primitive(data, pci_aliases=self.pci_aliases)

    # -- the request ---------------------------------------------------------
    def select_destinations(self, spec: RequestSpec, instance_uuids: Sequence[str] | None = None,
                            return_alternates: bool = False, dry_run: bool = False
                            ) -> list[list[Selection]]:
        """Choose (and, unless ``dry_run``, claim) one host per instance.

        Returns one list per instance: the chosen host first, then up to
        ``max_attempts - 1`` alternates when ``return_alternates``.
        """
        t0 = time.monotonic()
        uuids = self._instance_uuids(spec, instance_uuids)
        # An instance that already holds an allocation is refused by the claim
        # itself (unique instance_uuid): InvalidRequest, and earlier claims of
        # this request are undone.
        hosts = self.host_manager.host_states()
        results: list[list[Selection]] = []
        claimed: list[str] = []
        overlay: dict[int, HostState] = {}
        once_cache: dict[str, set[int]] = {}
        group = spec.instance_group.uuid if spec.instance_group else spec.scheduler_hints.group
        local_group: collections.Counter = collections.Counter()
        try:
            for index, instance_uuid in enumerate(uuids):
                view = [overlay.get(h.node_id, h) for h in hosts] if overlay else hosts
                group_hosts = self.host_manager.group_hosts(group)
                for h, n in local_group.items():
                    group_hosts[h] = group_hosts.get(h, 0) + n
                ctx = FilterContext(now=utcnow(), conf=self.conf, group_hosts=group_hosts)
                if self.fast_path and not overlay:
                    removed: dict[str, int] = {}
                    candidates = self._filter_fast(spec, ctx, once_cache, index, removed)
                    explain = functools.partial(self._explain_fast, spec, ctx, once_cache, index)
                    weighed = self._weigh_fast(candidates, spec, ctx) if len(candidates) else []
                else:
                    candidates, explanation = self._filter(view, spec, ctx, once_cache, index)
                    explain = functools.partial(lambda e: e, explanation)
                    removed = {f["filter"]: f["removed"]
                               for f in explanation.summary(0)["filters"]}
                    weighed = self._weigh(candidates, spec, ctx) if candidates else []
                if not len(candidates):
                    summary = explain().summary(0)
                    summary["instance_index"] = index
                    raise exception.NoValidHost(reason=_Explanation.text(summary),
                                                summary=summary)
                weight, chosen, consumed, alternates = self._place(
                    weighed, spec, ctx, instance_uuid, dry_run, explain, index)
                if dry_run:
                    if spec.num_instances > 1:
                        overlay[chosen.node_id] = _dry_consume(chosen, spec, consumed,
                                                               instance_uuid, group)
                    if group:
                        local_group[chosen.host] += 1
                else:
                    claimed.append(instance_uuid)
                    self.host_manager.note_placed(chosen, instance_uuid, group)
                results.append(self._selections(weight, chosen, consumed, alternates, spec,
                                                instance_uuid, return_alternates))
                LOG.info("Placed %s on %s: %d/%d hosts passed filters (%s)%s",
                         instance_uuid, chosen.host, len(candidates), len(view),
                         ", ".join(f"{name} -{n}" for name, n in removed.items() if n)
                         or "none removed", " [dry run]" if dry_run else "")
        except exception.NoValidHost as e:
            LOG.info("No valid host for request (%d instances): %s", spec.num_instances,
                     e.reason)
            self._undo(claimed)
            raise
        except Exception:
            self._undo(claimed)
            raise
        LOG.debug("select_destinations took %.2f ms", (time.monotonic() - t0) * 1000)
        return results

    def release(self, instance_uuid: str) -> bool:
        """Free the instance's allocation; False if it held none (idempotent)."""
        released = claims.release(self.db, instance_uuid)
        if released is None:
            return False
        self.host_manager.note_released(instance_uuid)
        host = self.host_manager.get(released.node_id)
        if host is None or not host.unconsume(released):
            self.host_manager.refresh_nodes([released.node_id])
        LOG.info("Released %s from %s", instance_uuid, released.host)
        return True

    def reschedule(self, instance_uuid: str, failed_host: str,
                   return_alternates: bool = False) -> list[Selection]:
        """The build on ``failed_host`` failed: release, count the failure on that
        host and place the instance again elsewhere."""
        alloc = claims.get_allocation(self.db, instance_uuid)
        if alloc is None:
            raise exception.NotFound(kind="Allocation", name=instance_uuid)
        if alloc["host"] != failed_host:
            raise exception.InvalidRequest(
                field="failed_host",
                reason=f"instance {instance_uuid} is on {alloc['host']}, not {failed_host}")
        spec = self.parse_request(json.loads(alloc["request_spec"]))
        self.release(instance_uuid)
        if claims.record_build_failure(self.db, failed_host):
            for hs in self.host_manager.hosts_named(failed_host):
                self.host_manager.refresh_nodes([hs.node_id])
        spec = spec.replace(num_instances=1, instance_uuids=(instance_uuid,),
                            ignore_hosts=tuple(spec.ignore_hosts) + (failed_host,))
        return self.select_destinations(spec, [instance_uuid], return_alternates)[0]

    # -- steps -------------------------------------------------------------
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

    def _filter(self, hosts: list[HostState], spec: RequestSpec, ctx: FilterContext,
                once_cache: dict[str, set[int]], index: int):
        """Run the filters in order; returns (passing hosts, explanation)."""
        explanation = _Explanation(len(hosts))
        current = self._force_and_ignore(hosts, spec, explanation)
        for flt in self.filters:
            if not current:
                break
            if flt.run_filter_once_per_request and index > 0 and flt.name in once_cache:
                keep = once_cache[flt.name]
                passed = [h for h in current if h.node_id in keep]
                failed = [(h, "failed earlier in this request") for h in current
                          if h.node_id not in keep]
            else:
                passed, failed = flt.filter_all(current, spec, ctx)
                if flt.run_filter_once_per_request and index == 0:
                    once_cache[flt.name] = {h.node_id for h in passed}
            explanation.add(flt.name, failed)
            current = passed
        return current, explanation

    @staticmethod
    def _force_and_ignore(hosts: list[HostState], spec: RequestSpec,
                          explanation: _Explanation) -> list[HostState]:
        if not (spec.ignore_hosts or spec.force_hosts or spec.force_nodes):
            return hosts
        current = hosts
        if spec.ignore_hosts:
            ignore = set(spec.ignore_hosts)
            explanation.add("ignore_hosts", [(h, "host is ignored") for h in current
                                             if h.host in ignore])
            current = [h for h in current if h.host not in ignore]
        if spec.force_hosts:
            force = set(spec.force_hosts)
            explanation.add("force_hosts", [(h, "not a forced host") for h in current
                                            if h.host not in force])
            current = [h for h in current if h.host in force]
        if spec.force_nodes:
            force = set(spec.force_nodes)
            explanation.add("force_nodes", [(h, "not a forced node") for h in current
                                            if h.nodename not in force])
            current = [h for h in current if h.nodename in force]
        return current

    def _weigh(self, hosts: list[HostState], spec: RequestSpec, ctx: FilterContext
               ) -> list[tuple[float, HostState]]:
        """Hosts with their total weight, best first (stable for equal weights)."""
        totals = [0.0] * len(hosts)
        if len(hosts) > 1:
            for w in self.weighers:
                raw = [w.weigh(h, spec, ctx) for h in hosts]
                norm = normalize(raw)
                for i, h in enumerate(hosts):
                    if norm[i]:
                        totals[i] += w.weight_multiplier(h) * norm[i]
        order = sorted(range(len(hosts)), key=lambda i: -totals[i])
        return [(totals[i], hosts[i]) for i in order]

    # -- fast path: numpy columns, cheap checks first -------------------------
    def _filter_fast(self, spec: RequestSpec, ctx: FilterContext,
                     once_cache: dict[str, set[int]], index: int,
                     removed: dict[str, int] | None = None) -> np.ndarray:
        """Row indexes (into HostColumns) of the hosts ``_filter`` would keep:
        vector forms over every host first, the other filters per host on the
        survivors only. ``removed`` (optional) gets how many hosts each filter
        removed in that order (cheapest first), for the log."""
        cols = self.host_manager.columns
        hosts = cols.hosts
        mask = self._force_and_ignore_mask(cols, spec)
        slow = []
        for flt in self.filters:
            if flt.is_noop(spec):
                continue
            vec = flt.filter_vector(cols, spec, ctx)
            if vec is None:
                slow.append(flt)
                continue
            before = cols.n if mask is None else None
            if mask is None:
                mask = vec.copy()
            else:
                before = int(np.count_nonzero(mask))
                mask &= vec
            if removed is not None:
                removed[flt.name] = before - int(np.count_nonzero(mask))
        rows = np.arange(cols.n) if mask is None else np.flatnonzero(mask)
        for flt in slow:
            if not len(rows):
                break
            before = len(rows)
            if flt.run_filter_once_per_request and index > 0 and flt.name in once_cache:
                keep = once_cache[flt.name]
                rows = np.array([i for i in rows.tolist() if hosts[i].node_id in keep],
                                dtype=np.intp)
            else:
                check = flt.host_passes
                rows = np.array([i for i in rows.tolist()
                                 if check(hosts[i], spec, ctx) is None], dtype=np.intp)
                if flt.run_filter_once_per_request and index == 0:
                    once_cache[flt.name] = {hosts[i].node_id for i in rows.tolist()}
            if removed is not None:
                removed[flt.name] = before - len(rows)
        return rows

    def _force_and_ignore_mask(self, cols, spec: RequestSpec):
        if not (spec.ignore_hosts or spec.force_hosts or spec.force_nodes):
            return None
        hosts = cols.hosts
        mask = np.ones(cols.n, dtype=bool)
        if spec.ignore_hosts:
            mask[cols.host_indexes(spec.ignore_hosts)] = False
        if spec.force_hosts:
            forced = np.zeros(cols.n, dtype=bool)
            forced[cols.host_indexes(spec.force_hosts)] = True
            mask &= forced
        if spec.force_nodes:
            nodes = set(spec.force_nodes)
            mask &= np.fromiter((h.nodename in nodes for h in hosts), dtype=bool,
                                count=cols.n)
        return mask

    def _explain_fast(self, spec: RequestSpec, ctx: FilterContext,
                      once_cache: dict[str, set[int]], index: int) -> _Explanation:
        """Why hosts were removed, filter by filter in the configured order (the
        same as ``_filter``'s): vector forms count the removed hosts, and a filter
        whose failures all share one text (``uniform_reason``) asks one of them."""
        cols = self.host_manager.columns
        hosts = cols.hosts
        if spec.ignore_hosts or spec.force_hosts or spec.force_nodes:
            return self._filter(hosts, spec, ctx, once_cache, index)[1]
        explanation = _Explanation(cols.n)
        alive = np.ones(cols.n, dtype=bool)
        for flt in self.filters:
            if not alive.any():
                break
            once = flt.run_filter_once_per_request and index > 0 and flt.name in once_cache
            if not once and flt.is_noop(spec):
                explanation.add(flt.name, [])   # passes every host: nothing to ask
                continue
            vec = None if once else flt.filter_vector(cols, spec, ctx)
            if vec is None:
                failed = []
                keep = once_cache.get(flt.name) if once else None
                for i in np.flatnonzero(alive).tolist():
                    host = hosts[i]
                    if keep is not None:
                        reason = None if host.node_id in keep else "failed earlier in this request"
                    else:
                        reason = flt.host_passes(host, spec, ctx)
                    if reason is not None:
                        failed.append((host, reason))
                        alive[i] = False
                explanation.add(flt.name, failed)
                continue
            removed = np.flatnonzero(alive & ~vec)
            if len(removed) and flt.uniform_reason:
                reason = flt.host_passes(hosts[removed[0]], spec, ctx)
                explanation.add_count(flt.name, reason, len(removed))
            elif len(removed):
                explanation.add(flt.name, [(hosts[i], flt.host_passes(hosts[i], spec, ctx))
                                           for i in removed.tolist()])
            alive &= vec
        return explanation

    def _weigh_fast(self, rows: np.ndarray, spec: RequestSpec, ctx: FilterContext
                    ) -> list[tuple[float, HostState]]:
        """Same totals and order as ``_weigh`` for the hosts at ``rows``; only
        the best few are sorted up front."""
        cols = self.host_manager.columns
        hosts = cols.hosts
        n = len(rows)
        totals = np.zeros(n, dtype=np.float64)
        if n > 1:
            buf = np.empty(n, dtype=np.float64)
            for w in self.weighers:
                multiplier = self._multipliers(w, cols, rows)
                if isinstance(multiplier, float) and multiplier == 0.0:
                    continue        # adds 0 × weight to every host (NumInstancesWeigher)
                vec = w.weigh_vector(cols, spec, ctx)
                if vec is None:
                    raw = np.fromiter((w.weigh(hosts[i], spec, ctx) for i in rows.tolist()),
                                      dtype=np.float64, count=n)
                elif isinstance(vec, int | float):
                    continue        # the same raw weight everywhere: normalises to 0
                else:
                    if vec.dtype != np.float64:         # e.g. a plugin's int column
                        vec = vec.astype(np.float64)
                    # rows are valid indexes: 'clip' only skips the bounds checks.
                    raw = np.take(vec, rows, out=buf, mode="clip")
                lo, hi = raw.min(), raw.max()
                if hi == lo:
                    continue
                # In place, the same operations as (raw - lo) / (hi - lo) * multiplier
                # in ``_weigh``, so the totals are equal to the last bit.
                np.subtract(raw, lo, out=raw)
                np.divide(raw, hi - lo, out=raw)
                if isinstance(multiplier, float) and multiplier in (1.0, -1.0):
                    # x * 1.0 is x and t + (-1.0 * x) is t - x, exactly: one pass less.
                    (np.add if multiplier > 0 else np.subtract)(totals, raw, out=totals)
                    continue
                np.multiply(multiplier, raw, out=raw)
                totals += raw
        keep = max(self.conf.filter_scheduler.host_subset_size,
                   self.conf.scheduler.max_attempts) + 8
        if n > 4 * keep:
            kth = _kth_largest(totals, keep)
            top = np.flatnonzero(totals >= kth)
            order = top[np.argsort(-totals[top], kind="stable")]
            head = [(float(totals[k]), hosts[rows[k]]) for k in order.tolist()]
            return _LazyWeighed(head, totals, rows, hosts, set(order.tolist()))
        order = np.argsort(-totals, kind="stable")
        return [(float(totals[k]), hosts[rows[k]]) for k in order.tolist()]

    @staticmethod
    def _multipliers(w: BaseWeigher, cols, rows: np.ndarray):
        """The weigher's multiplier per candidate: the configured one, or the
        smallest valid override in the host's aggregates' metadata."""
        base = w.base_multiplier()
        if not w.aggregate_multiplier_key:
            return base
        values, present = cols.aggregate_min(w.aggregate_multiplier_key)
        if not present.any():
            return base             # no aggregate overrides it (cheaper than gathering)
        present = present[rows]
        if not present.any():
            return base
        return np.where(present, values[rows], base)

    def _pick_order(self, weighed: list[tuple[float, HostState]]) -> list[int]:
        """Indexes into ``weighed`` in the order to try them."""
        n = len(weighed)
        order = list(range(n))
        fs = self.conf.filter_scheduler
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

    def _place(self, weighed, spec: RequestSpec, ctx: FilterContext, instance_uuid: str,
               dry_run: bool, explain, index: int):
        """Consume on the first candidate (in pick order) that still takes it."""
        order = self._pick_order(weighed)
        refused = collections.Counter()
        pos = 0
        while True:
            if pos == len(order):
                if not isinstance(weighed, _LazyWeighed) or weighed._totals is None:
                    break
                weighed.extend_all()
                order.extend(range(len(order), len(weighed)))
                if pos == len(order):
                    break
            weight, host = weighed[order[pos]]
            pos += 1
            consumed = self._try_consume(host, spec, ctx, instance_uuid, dry_run, refused)
            if consumed is None:
                continue
            rest = [weighed[j] for j in order[pos:]]
            return weight, host, consumed, rest
        summary = explain().summary(0)
        summary["instance_index"] = index
        summary["filters"].append({"filter": "claim", "removed": sum(refused.values()),
                                   "reasons": dict(refused.most_common())})
        raise exception.NoValidHost(reason=_Explanation.text(summary), summary=summary)

    def _try_consume(self, host: HostState, spec: RequestSpec, ctx: FilterContext,
                     instance_uuid: str, dry_run: bool, refused: collections.Counter
                     ) -> Consumed | None:
        if dry_run:
            with host.lock():
                reason = host.resources_reason(spec)
                fitted, picks, reason2 = (None, (), None) if reason else \
                    host.fit_numa_and_pci(spec)
            if reason or reason2:
                refused[reason or reason2] += 1
                return None
            return Consumed(node_id=host.node_id, numa_fitted=fitted, pci_picks=picks,
                            generation=host.generation)
        persist = self._persister(spec, instance_uuid)
        for attempt in range(self.conf.scheduler.claim_retries + 1):
            try:
                return host.consume_from_request(spec, persist)
            except ConsumeRefused as e:
                refused[e.reason] += 1
                return None
            except claims.DuplicateAllocation:
                raise exception.InvalidRequest(
                    field="instance_uuids",
                    reason=f"already allocated: {instance_uuid}") from None
            except claims.ClaimConflict as e:
                LOG.debug("Claim on %s lost a race (attempt %d)", host.host, attempt + 1)
                seen = host.generation
                self.host_manager.refresh_nodes([host.node_id])
                if self.host_manager.get(host.node_id) is not host:
                    break       # the node was deleted meanwhile
                if host.generation == seen:
                    # Nobody else changed the node: the database refused this
                    # claim on its own terms (e.g. a PF and one of its VFs in one
                    # boot). Trying again would fail the same way.
                    refused[f"claim refused: {e}"] += 1
                    return None
                reason = self._recheck(host, spec, ctx)
                if reason:
                    refused[reason] += 1
                    return None
        refused["claim conflicts with another scheduler"] += 1
        return None

    def _recheck(self, host: HostState, spec: RequestSpec, ctx: FilterContext) -> str | None:
        for flt in self.filters:
            reason = flt.host_passes(host, spec, ctx)
            if reason:
                return f"{flt.name}: {reason}"
        return None

    def _persister(self, spec: RequestSpec, instance_uuid: str):
        group = spec.instance_group.uuid if spec.instance_group else spec.scheduler_hints.group
        stored_spec = json.dumps(spec.for_one_instance().to_primitive(), sort_keys=True)

        def persist(host: HostState, consumed: Consumed) -> Consumed:
            numa_after = numa_cells = None
            if consumed.numa_fitted is not None:
                from numa import usage

                numa_after = json.dumps(
                    usage.apply_usage(host.numa_topology, consumed.numa_fitted).to_primitive(),
                    sort_keys=True)
                numa_cells = json.dumps(consumed.numa_fitted.to_primitive(), sort_keys=True)
            picks = tuple((spec.pci_requests[i].request_id, key, count)
                          for i, key, count in consumed.pci_picks)
            result = claims.claim(self.db, claims.ClaimRecord(
                instance_uuid=instance_uuid, node_id=host.node_id,
                seen_generation=host.generation, vcpus=spec.vcpus,
                memory_mb=spec.memory_mb, disk_mb=spec.disk_mb, numa_topology=numa_after,
                numa_cells=numa_cells, pci_picks=picks, project_id=spec.project_id,
                user_id=spec.user_id, instance_group=group, request_spec=stored_spec))
            return dataclasses.replace(consumed, generation=result.generation,
                                       pci_addresses=result.pci_addresses,
                                       pci_pools=result.pci_pools)
        return persist

    def _selections(self, weight: float, chosen: HostState, consumed: Consumed, alternates,
                    spec: RequestSpec, instance_uuid: str, return_alternates: bool
                    ) -> list[Selection]:
        allocation = {"vcpus": spec.vcpus, "memory_mb": spec.memory_mb,
                      "disk_mb": spec.disk_mb}
        numa_cells = consumed.numa_fitted.to_primitive() if consumed.numa_fitted else None
        out = [Selection(instance_uuid=instance_uuid, host=chosen.host, node=chosen.nodename,
                         node_uuid=chosen.uuid, weight=weight, allocation=allocation,
                         numa_cells=numa_cells, pci_devices=consumed.pci_addresses)]
        if return_alternates:
            limit = self.conf.scheduler.max_attempts - 1
            for w, h in alternates[:limit]:
                out.append(Selection(instance_uuid=instance_uuid, host=h.host,
                                     node=h.nodename, node_uuid=h.uuid, weight=w,
                                     allocation=allocation, alternate=True))
        return out

    def _undo(self, claimed: list[str]) -> None:
        for instance_uuid in claimed:
            try:
                self.release(instance_uuid)
            except Exception:      # keep undoing the others; log loudly
                LOG.exception("Could not release %s while undoing a failed request",
                              instance_uuid)


def _dry_consume(host: HostState, spec: RequestSpec, consumed: Consumed,
                 instance_uuid: str, group: str | None) -> HostState:
    """A shallow copy of ``host`` with the request subtracted (dry runs only)."""
    clone = copy.copy(host)
    clone.detach_columns()
    clone.instances = dict(host.instances)
    clone.instances[instance_uuid] = group
    clone._apply(spec, consumed)
    return clone


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of ``values`` (exactly), without partitioning all of them.

    The k-th largest of a strided sample is a lower bound of the true one (the
    sample's top k are values too), so every value at or above the true k-th
    is among those at or above the bound: a few dozen to partition instead of
    every candidate (about 10 instead of 40-80 us at 10,000 hosts).
    """
    n = len(values)
    sample = values[::16]
    if len(sample) > k:
        bound = np.partition(sample, len(sample) - k)[len(sample) - k]
        values = values[values >= bound]
        n = len(values)
    return np.partition(values, n - k)[n - k]


class _LazyWeighed(list):
    """The best few (weight, host) pairs, sorted; the rest are sorted only if
    every one of those is refused (claims racing with other schedulers)."""

    def __init__(self, head, totals, rows, hosts, taken) -> None:
        super().__init__(head)
        self._totals, self._rows, self._hosts, self._taken = totals, rows, hosts, taken

    def extend_all(self) -> None:
        if self._totals is None:
            return
        totals = self._totals
        rest = np.array([i for i in range(len(totals)) if i not in self._taken],
                        dtype=np.intp)
        if len(rest):
            order = rest[np.argsort(-totals[rest], kind="stable")]
            self.extend((float(totals[i]), self._hosts[self._rows[i]]) for i in order)
        self._totals = None
