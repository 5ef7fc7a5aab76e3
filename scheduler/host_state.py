"""HostState: what filters and weighers read about one node.

A HostState lives in the HostManager's cache across requests. Only the
HostManager changes it — from database rows (when the node's generation
moved), and by ``apply``/``unapply`` after a claim or release was persisted —
and it rewrites the host's column row each time. Filters never write it.

Capacity follows Placement's rule: usable = (total - reserved) * allocation ratio;
usage counts allocations only.

``fit`` answers "where would this request's NUMA cells and PCI devices go on
this host?"; the answer is remembered by what it depends on (the request's
``fit_key`` and the host's ``fit_signature``), so hosts in the same state and
the NUMA filter and the claim that follows it all share one computation.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import math
from collections.abc import Mapping
from typing import Any

from oslo_concurrency import lockutils
from oslo_config import cfg

from db.inventory import DISK_GB, MEMORY_MB, VCPU, Inventory
from db.models import utcnow
from scheduler.provider_tree import EMPTY_TREE, Assignment, ProviderTree

numa_opts = [
    cfg.StrOpt("isolate_on_smt_hosts",
               default="reserve-siblings",
               choices=[("reserve-siblings",
                         "pin each vCPU to one thread of a whole free core and keep the "
                         "core's other threads idle (accounted as used)"),
                        ("refuse",
                         "such cells do not take isolate guests, as in Nova; only cells "
                         "without SMT (or with it disabled) do")],
               help="What hw:cpu_thread_policy=isolate does on a host NUMA cell whose CPUs "
                    "have SMT siblings. Read by NUMATopologyFilter and the claim; the "
                    "setting is part of every remembered NUMA answer."),
]

cfg.CONF.register_opts(numa_opts, group="numa")

LIST_OPTS = [("numa", numa_opts)]


_NUMA_GROUP: list = []


def isolate_on_smt_hosts(topology=None) -> str | None:
    """The ``[numa] isolate_on_smt_hosts`` option, part of the fit signature of a
    host whose topology has SMT siblings (None for the others: they fit the same
    either way, and skip the option read)."""
    if topology is not None and not topology.has_smt:
        return None
    if not _NUMA_GROUP:
        _NUMA_GROUP.append(cfg.CONF.numa)   # the group view reads through to CONF
    return _NUMA_GROUP[0].isolate_on_smt_hosts


@dataclasses.dataclass(frozen=True, slots=True)
class AggregateInfo:
    id: int
    uuid: str
    name: str
    metadata: Mapping[str, str]
    hosts: frozenset[str]
    _hash: int = dataclasses.field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Hosts' aggregates are part of class keys: hash the value once.
        object.__setattr__(self, "_hash", hash((self.id, self.uuid, self.name,
                                                tuple(sorted(self.metadata.items())),
                                                self.hosts)))

    def __hash__(self) -> int:
        return self._hash


@dataclasses.dataclass(frozen=True, slots=True)
class Consumed:
    """What one successful consume took from a host (returned to the caller)."""

    node_id: int
    assignment: Assignment | None = None  # which provider gives what
    numa_fitted: Any = None          # numa.topology.FittedTopology | None
    pci_picks: tuple = ()            # ((request_index, PoolKey, count), ...)
    pci_addresses: tuple[str, ...] = ()
    generation: int = 0
    pci_pools: tuple | None = None   # the node's pools after the claim, when re-read
    victims: tuple = ()              # db.preemption.Candidate: preempted for this claim
    at: datetime.datetime | None = None  # the node's updated_at as the claim stamped it


_TOPOLOGIES: dict[str, Any] = {}


def _host_topology(text: str | None):
    """The HostTopology stored as ``text``; equal texts share one (immutable)
    object, so reloading a changed row re-parses only new layouts/usages."""
    if not text:
        return None
    topo = _TOPOLOGIES.get(text)
    if topo is None:
        data = _loads(text, None)
        if not data:
            return None
        from numa.topology import HostTopology

        if len(_TOPOLOGIES) >= 4096:
            _TOPOLOGIES.clear()
        topo = _TOPOLOGIES[text] = HostTopology.from_primitive(data)
    return topo


def _loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


class HostState:
    """Mutable, cached view of one compute node."""

    __slots__ = (
        "node_id", "uuid", "host", "nodename",
        "tree", "usage", "providers",
        "num_instances", "num_io_ops", "failed_builds",
        "hypervisor_type", "hypervisor_version", "host_ip", "cpu_info",
        "supported_instances", "stats", "metrics", "disabled", "disabled_reason",
        "last_heartbeat", "numa_topology", "pci_pools", "aggregates",
        "availability_zone", "instances", "instance_images", "generation", "updated",
        "version",
        "_lock_name", "__weakref__",
    )

    def __init__(self, node_id: int, host: str, nodename: str, uuid: str = "") -> None:
        self.node_id = node_id
        self.host = host
        self.nodename = nodename
        self.uuid = uuid
        #: The node's providers (root first): their shape, shared by nodes built
        #: alike (``scheduler.provider_tree``) ...
        self.tree: ProviderTree = EMPTY_TREE
        #: ... what the allocations hold of each of the tree's slots ...
        self.usage: tuple[int, ...] = ()
        #: ... and each provider's (id, uuid, name), in the tree's order.
        self.providers: tuple[tuple[int, str, str], ...] = ((0, uuid, nodename),)
        self.num_instances = self.num_io_ops = self.failed_builds = 0
        self.hypervisor_type: str | None = None
        self.hypervisor_version: int | None = None
        self.host_ip: str | None = None
        self.cpu_info: dict = {}
        self.supported_instances: list = []
        self.stats: dict = {}
        self.metrics: dict = {}
        self.disabled = False
        self.disabled_reason: str | None = None
        self.last_heartbeat: datetime.datetime | None = None
        self.numa_topology = None
        self.pci_pools: tuple = ()
        self.aggregates: tuple[AggregateInfo, ...] = ()
        self.availability_zone: str | None = None
        self.instances: dict[str, str | None] = {}
        #: instance uuid -> its image's (property, value) pairs; loaded only
        #: when a weigher needs them (ImagePropertiesWeigher).
        self.instance_images: dict[str, frozenset[tuple[str, str]]] = {}
        self.generation = -1
        self.updated: datetime.datetime | None = None
        #: Bumped by the HostManager before and after each change (odd while
        #: changing), so lock-free readers can tell they read one state.
        self.version = 0
        self._lock_name = f"berth-host-{node_id}"

    def __repr__(self) -> str:
        return (f"<HostState {self.host}/{self.nodename} ram:{self.free_ram_mb} "
                f"disk:{self.free_disk_mb} vcpus:{self.vcpus_used}/{self.vcpus} "
                f"gen:{self.generation}>")

    def copy(self) -> HostState:
        """A shallow copy with its own instances (a dry run's what-if state)."""
        other = object.__new__(HostState)
        for name in HostState.__slots__:
            if name != "__weakref__":
                setattr(other, name, getattr(self, name))
        other.instances = dict(self.instances)
        other.instance_images = dict(self.instance_images)
        return other

    # -- loading ----------------------------------------------------------
    def update_from_row(self, row: Mapping[str, Any]) -> None:
        """Take every column of a compute_nodes row (a newer generation)."""
        self.uuid = row["uuid"]
        self.host = row["host"]
        self.nodename = row["hypervisor_hostname"]
        self.num_instances = row["running_vms"]
        self.num_io_ops = row["current_workload"]
        self.failed_builds = row["failed_builds"]
        self.hypervisor_type = row["hypervisor_type"]
        self.hypervisor_version = row["hypervisor_version"]
        self.host_ip = row["host_ip"]
        self.cpu_info = _loads(row["cpu_info"], {})
        self.supported_instances = [tuple(x) for x in _loads(row["supported_instances"], [])]
        self.stats = _loads(row["stats"], {})
        self.metrics = _loads(row["metrics"], {})
        self.disabled = bool(row["disabled"])
        self.disabled_reason = row["disabled_reason"]
        self.numa_topology = _host_topology(row["numa_topology"])
        self.generation = row["generation"]
        self.updated = row["updated_at"]

    def set_providers(self, tree: ProviderTree, usage: tuple[int, ...],
                      providers: tuple[tuple[int, str, str], ...]) -> None:
        """Take the node's providers as the ledger holds them."""
        self.tree = tree
        self.usage = usage
        self.providers = providers

    def set_aggregates(self, aggregates: tuple[AggregateInfo, ...],
                       default_az: str | None) -> None:
        self.aggregates = aggregates
        az = None
        for agg in aggregates:
            if "availability_zone" in agg.metadata:
                az = agg.metadata["availability_zone"]
                break
        self.availability_zone = az or default_az

    # -- the ledger (the root provider's inventories) -------------------------
    @property
    def traits(self) -> frozenset[str]:
        """The root provider's traits."""
        return self.tree.root.traits

    def inventory(self, rc: str) -> Inventory | None:
        """The root provider's inventory of ``rc`` (None: it has none)."""
        return self.tree.root_inventory(rc)

    def used(self, rc: str) -> int:
        """What the allocations hold of the root provider's ``rc``."""
        slot = self.tree.slot_of.get((0, rc))
        return 0 if slot is None else self.usage[slot]

    def _total(self, rc: str) -> int:
        inv = self.tree.root_inventory(rc)
        return 0 if inv is None else inv.total

    def _reserved(self, rc: str) -> int:
        inv = self.tree.root_inventory(rc)
        return 0 if inv is None else inv.reserved

    def _limit(self, rc: str) -> float:
        inv = self.tree.root_inventory(rc)
        return 0.0 if inv is None else inv.capacity

    # The classic counters, as views of the root's VCPU, MEMORY_MB and DISK_GB
    # (disk in MB, as filters, weighers and JsonFilter queries read it).
    vcpus = property(lambda self: self._total(VCPU))
    vcpus_used = property(lambda self: self.used(VCPU))
    reserved_host_cpus = property(lambda self: self._reserved(VCPU))
    cpu_allocation_ratio = property(lambda self: self.tree.classic_ratios[0])
    memory_mb = property(lambda self: self._total(MEMORY_MB))
    memory_mb_used = property(lambda self: self.used(MEMORY_MB))
    reserved_host_memory_mb = property(lambda self: self._reserved(MEMORY_MB))
    ram_allocation_ratio = property(lambda self: self.tree.classic_ratios[1])
    local_gb = property(lambda self: self._total(DISK_GB))
    local_gb_used = property(lambda self: self.used(DISK_GB))
    disk_mb_used = property(lambda self: self.used(DISK_GB) * 1024)
    reserved_host_disk_mb = property(lambda self: self._reserved(DISK_GB) * 1024)
    disk_allocation_ratio = property(lambda self: self.tree.classic_ratios[2])

    @property
    def vcpus_limit(self) -> float:
        return self._limit(VCPU)

    @property
    def memory_mb_limit(self) -> float:
        return self._limit(MEMORY_MB)

    @property
    def disk_mb_limit(self) -> float:
        return self._limit(DISK_GB) * 1024

    @property
    def free_ram_mb(self) -> int:
        """Physical RAM not used by allocations nor reserved (may be negative
        when over-committed)."""
        return self.memory_mb - self.reserved_host_memory_mb - self.memory_mb_used

    @property
    def free_disk_mb(self) -> int:
        return (self.local_gb - self._reserved(DISK_GB) - self.local_gb_used) * 1024

    @property
    def free_vcpus(self) -> int:
        return self.vcpus - self.reserved_host_cpus - self.vcpus_used

    def aggregate_values(self, key: str) -> list[str]:
        """Every value ``key`` has in this host's aggregates' metadata."""
        return [a.metadata[key] for a in self.aggregates if key in a.metadata]

    def aggregate_min_float(self, key: str, default: float | None) -> float | None:
        """The smallest finite float value of ``key`` over the host's aggregates
        (values that are not finite numbers are ignored)."""
        best = None
        for raw in self.aggregate_values(key):
            try:
                val = float(raw)
            except ValueError:
                continue
            if not math.isfinite(val):
                continue
            best = val if best is None else min(best, val)
        return default if best is None else best

    # -- NUMA and PCI ---------------------------------------------------------
    def socket_of(self) -> dict[int, int | None] | None:
        """NUMA cell id -> socket, for PCI ``socket`` affinity (None without NUMA)."""
        return _socket_of(self.numa_topology)

    def numa_signature(self) -> tuple:
        """What fitting a guest without PCI requests reads of this host (and of the
        ``[numa]`` options, so answers remembered under another setting are not
        reused)."""
        topology = self.numa_topology
        ratios = self.tree.classic_ratios
        return (topology, ratios[0], ratios[1],
                None if topology is None else isolate_on_smt_hosts(topology))

    def fit_signature(self) -> tuple:
        """Everything ``fit`` reads of this host: hosts with equal signatures get
        equal fits."""
        return self.numa_signature() + (self.pci_pools,)

    def numa_reason(self, spec) -> str | None:
        """Why the request's guest NUMA topology (with the PCI devices it needs on
        its cells) does not fit here, or None: the NUMA filter's answer. Cheaper
        than ``fit`` (no CPUs are picked) and remembered the same way."""
        sig = self.fit_signature() if spec.pci_requests else self.numa_signature() + ((),)
        return _remembered(("check", spec.fit_key, sig), _check_numa, spec, sig)

    def fit(self, spec) -> Fit:
        """Where the request's guest NUMA cells (with their PCI requests) and its
        PCI devices go on this host, or why they can't (``Fit.reason``)."""
        sig = self.fit_signature()
        return _remembered(("fit", spec.fit_key, sig), _fit, spec, sig)

    def pci_reason(self, spec, numa_cells=None) -> str | None:
        """Why the request's PCI devices can't be served here (on ``numa_cells``
        when given), or None when they can."""
        return _pci_reason(self.pci_pools, _socket_of(self.numa_topology), spec, numa_cells)

    # -- changes (by the HostManager, under this host's lock) -----------------
    def apply(self, spec, consumed: Consumed) -> None:
        """Subtract a persisted claim; stamps ``updated`` only now, on success."""
        if consumed.assignment is not None:
            self.usage = consumed.assignment.add_to(self.usage)
        self.num_instances += 1
        self.num_io_ops += 1
        if consumed.numa_fitted is not None:
            from numa import usage

            self.numa_topology = usage.apply_usage(self.numa_topology, consumed.numa_fitted)
        if consumed.pci_pools is not None:
            self.pci_pools = consumed.pci_pools
        elif consumed.pci_picks:
            from pci import matching

            cells = None
            if consumed.numa_fitted is not None:
                cells = frozenset(c.host_cell_id for c in consumed.numa_fitted.cells)
            self.pci_pools, _ = matching.apply_requests(
                self.pci_pools, spec.pci_requests, numa_cells=cells,
                socket_of=self.socket_of())
        if consumed.generation > self.generation:
            self.generation = consumed.generation
        self.updated = consumed.at or utcnow()

    def unapply(self, released) -> bool:
        """Give back what a release freed (``db.claims.Released``), when this state
        is exactly the one the release changed (its generation is the one
        before); False otherwise (nothing changed; re-read the host)."""
        if self.generation != released.generation - 1:
            return False
        usage = self._usage_moved(released.amounts, taken=False)
        if usage is None:
            return False            # the cached tree is not the one released from
        self.usage = usage
        self.num_instances -= 1
        self.num_io_ops = max(0, self.num_io_ops - 1)
        if released.numa_topology is not None:
            self.numa_topology = _host_topology(released.numa_topology)
        if released.pci_pools is not None:
            self.pci_pools = released.pci_pools
        self.generation = released.generation
        self.updated = released.at or utcnow()
        return True

    def _usage_moved(self, items, taken: bool) -> tuple | None:
        """The usage after (provider id, class, amount) ``items`` were taken or
        given back (never below 0, as the release's statement), or None when
        one names no slot of the cached tree."""
        usage = list(self.usage)
        index = {pid: i for i, (pid, _uuid, _name) in enumerate(self.providers)}
        for provider_id, rc, amount in items:
            slot = self.tree.slot_of.get((index.get(provider_id, -1), rc))
            if slot is None:
                return None
            usage[slot] = usage[slot] + amount if taken else max(0, usage[slot] - amount)
        return tuple(usage)

    def take_change(self, change, pools: bool) -> bool:
        """Take another scheduler's claim or release (``db.node_changes.Change``)
        when this state is exactly the one it changed (its generation is the
        one before): as the claim's and the release's statements change the
        node's row and inventories. False otherwise (nothing changed; re-read
        the host). ``pools``: take the node's PCI pools after it (the cache
        keeps them)."""
        if self.generation != change.generation - 1:
            return False
        usage = self._usage_moved(change.items, taken=change.taken)
        if usage is None:
            return False            # the cached tree is not the one it changed
        self.usage = usage
        if change.taken:
            self.num_instances += 1
            self.num_io_ops += 1
        else:
            self.num_instances -= 1
            self.num_io_ops = max(0, self.num_io_ops - 1)
        if change.numa_topology is not None:
            self.numa_topology = _host_topology(change.numa_topology)
        if pools and change.pci_pools is not None:
            self.pci_pools = change.pci_pools
        self.generation = change.generation
        self.updated = change.at
        return True

    def lock(self):
        """The per-host lock: held while a claim is checked, persisted and applied,
        and while a refresh rewrites the host."""
        return lockutils.lock(self._lock_name)


@dataclasses.dataclass(frozen=True, slots=True)
class Fit:
    """``HostState.fit``'s answer: the fitted guest topology (None without one),
    the PCI picks ``((request_index, PoolKey, count), ...)``, or a reason."""

    numa_fitted: Any
    pci_picks: tuple
    reason: str | None

    @property
    def fits(self) -> bool:
        return self.reason is None


#: (kind, request fit_key, host signature) -> answer, oldest evicted first.
#: A signature holds its host topology: the bound is also what keeps topologies
#: of states long gone alive (20,000 grew a worker by ~100 MB in a soak).
_FITS: collections.OrderedDict = collections.OrderedDict()
_MAX_FITS = 8192


def _remembered(key, compute, spec, sig):
    """``compute(spec, sig)``, remembered under ``key``. Only the signature's
    values are read, never the host again, so a host changing meanwhile cannot
    put an answer under the wrong signature."""
    hit = _FITS.get(key)
    if hit is None:
        hit = _FITS[key] = compute(spec, sig)
        if len(_FITS) > _MAX_FITS:
            _FITS.popitem(last=False)
    return hit


def _socket_of(topology) -> dict[int, int | None] | None:
    if topology is None:
        return None
    return {c.id: c.socket for c in topology.cells}


def _pci_reason(pools, socket_of, spec, numa_cells) -> str | None:
    from pci import matching

    if matching.supports_requests(pools, spec.pci_requests, numa_cells=numa_cells,
                                  socket_of=socket_of):
        return None
    return matching.explain(pools, spec.pci_requests, numa_cells=numa_cells,
                            socket_of=socket_of) or "PCI requests cannot be satisfied"


def _fit_numa(spec, sig, check_only: bool):
    """The guest NUMA fit on a host signature: (FittedTopology | None, reason).
    ``check_only``: only whether it fits (no CPUs picked)."""
    from numa import fitting

    topology, cpu_ratio, ram_ratio, isolate_on_smt, pools = sig
    if topology is None:
        return None, "host has no NUMA topology"
    isolate_on_smt = isolate_on_smt or fitting.RESERVE_SIBLINGS  # None: no SMT, no matter
    socket_of = _socket_of(topology)
    limits = fitting.Limits(cpu_ratio, ram_ratio)
    guest = spec.numa_topology

    def attempt(requests):
        pci_check = None
        if requests:
            def pci_check(host_cells):
                from pci import matching

                return matching.supports_requests(pools, requests, numa_cells=host_cells,
                                                  socket_of=socket_of)
        if check_only:
            reason = fitting.check_fit(topology, guest, limits=limits, pci_check=pci_check,
                                       isolate_on_smt=isolate_on_smt)
            return (None if reason else True), reason
        result = fitting.fit_instance_to_host(topology, guest, limits=limits,
                                              pci_check=pci_check,
                                              isolate_on_smt=isolate_on_smt)
        return result.fitted, result.reason

    requests = spec.pci_requests
    if not requests:
        return attempt(())
    # ``preferred`` devices: first try to land the guest on cells that have
    # them (as if required), and only then anywhere.
    if any(r.numa_policy == "preferred" for r in requests):
        strict = tuple(dataclasses.replace(r, numa_policy="required")
                       if r.numa_policy == "preferred" else r for r in requests)
        fitted, reason = attempt(strict)
        if reason is None:
            return fitted, None
    fitted, reason = attempt(requests)
    if reason is None:
        return fitted, None
    # Say which device request failed on the cells the guest would take.
    cells, _ = fitting.choose_cells(topology, guest, limits=limits,
                                    isolate_on_smt=isolate_on_smt)
    if cells is None:
        return None, reason
    return None, _pci_reason(pools, socket_of, spec, cells)


def _check_numa(spec, sig) -> str | None:
    return _fit_numa(spec, sig, check_only=True)[1]


def _fit(spec, sig) -> Fit:
    topology, _, _, _, pools = sig
    fitted = None
    cells = None
    if spec.numa_topology is not None:
        fitted, reason = _fit_numa(spec, sig, check_only=False)
        if reason is not None:
            return Fit(None, (), reason)
        cells = frozenset(c.host_cell_id for c in fitted.cells)
    picks: tuple = ()
    if spec.pci_requests:
        from pci import errors as pci_errors
        from pci import matching

        socket_of = _socket_of(topology)
        try:
            _, picks = matching.apply_requests(pools, spec.pci_requests, numa_cells=cells,
                                               socket_of=socket_of)
        except pci_errors.PciError:
            return Fit(None, (), _pci_reason(pools, socket_of, spec, cells))
    return Fit(fitted, picks, None)
