"""Small builders for filter and weigher tests: hosts, request specs, contexts.

``fake_host(**attrs)`` sets any HostState attribute; ``aggregates`` may be given
as metadata dicts. ``fake_spec(**overrides)`` takes flavor fields (vcpus,
memory_mb, root_gb, ephemeral_gb, swap, extra_specs) and top-level payload keys.
``config(group, **values)`` overrides options for a ``with`` block.
``passes`` / ``filter_vector`` give a filter's answers as the scheduler computes
them, after checking every path (many hosts, one host) and the per-host
reference agree; ``weigh`` / ``weigh_vector`` / ``multiplier`` likewise for
weighers.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from oslo_config import cfg

from db import inventory
from scheduler import provider_tree, testing
from scheduler.cycle import weigh_multiplier
from scheduler.host_columns import HostColumns
from scheduler.host_state import AggregateInfo, HostState
from scheduler.plugins import RequestContext
from scheduler.request_spec import RequestSpec
from tests.unit.scheduler import reference

NOW = datetime.datetime(2024, 1, 1, 12, 0, 0)

_ids = itertools.count(1)

_FLAVOR_KEYS = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap", "extra_specs", "name")


def aggregate(metadata: Mapping[str, str] | None = None, *, name: str | None = None,
              hosts: tuple[str, ...] = ()) -> AggregateInfo:
    """An AggregateInfo with the given metadata."""
    agg_id = next(_ids)
    return AggregateInfo(id=agg_id, uuid=f"agg-{agg_id}", name=name or f"agg{agg_id}",
                         metadata=dict(metadata or {}), hosts=frozenset(hosts))


#: The classic capacity and usage keywords ``fake_host`` turns into the root
#: provider's inventories and usage, with their defaults.
CLASSIC = {"vcpus": 8, "memory_mb": 16384, "local_gb": 100, "vcpus_used": 0,
           "memory_mb_used": 0, "disk_mb_used": 0, "cpu_allocation_ratio": 1.0,
           "ram_allocation_ratio": 1.0, "disk_allocation_ratio": 1.0, "reserved_host_cpus": 0,
           "reserved_host_memory_mb": 0, "reserved_host_disk_mb": 0, "pcpus_used": 0}


def ledger(state: HostState, classic: Mapping[str, Any], traits=(), inventories=None,
           used=None, providers=()) -> None:
    """Give ``state`` the tree a stored node with these fields would have: the
    classic keywords as classes (``db.inventory.node_inventories``, PCPU from the
    NUMA topology's pcpusets), ``inventories`` ({class: Inventory or its dict})
    over them, ``used`` ({class: amount}) of the root, and child ``providers``
    (dicts with ``traits``, ``inventories`` and ``used``)."""
    c = dict(CLASSIC, **classic)
    topology = state.numa_topology
    dedicated = sum(len(cell.pcpuset) for cell in topology.cells) if topology else 0
    invs = inventory.node_inventories(
        vcpus=c["vcpus"], memory_mb=c["memory_mb"], local_gb=c["local_gb"],
        cpu_allocation_ratio=c["cpu_allocation_ratio"],
        ram_allocation_ratio=c["ram_allocation_ratio"],
        disk_allocation_ratio=c["disk_allocation_ratio"],
        reserved_host_cpus=c["reserved_host_cpus"],
        reserved_host_memory_mb=c["reserved_host_memory_mb"],
        reserved_host_disk_mb=c["reserved_host_disk_mb"], dedicated_cpus=dedicated)
    for rc, inv in (inventories or {}).items():
        if isinstance(inv, Mapping):
            inv = inventory.Inventory.from_primitive(dict(inv), rc)
        if inv.total:
            invs[rc] = inv
        else:
            invs.pop(rc, None)
    root_used = {inventory.VCPU: c["vcpus_used"], inventory.MEMORY_MB: c["memory_mb_used"],
                 inventory.DISK_GB: inventory.disk_gb(c["disk_mb_used"]),
                 inventory.PCPU: c["pcpus_used"]}
    root_used.update(used or {})
    shapes = [provider_tree.provider(invs, traits)]
    usage_of = {(0, rc): n for rc, n in root_used.items()}
    for i, child in enumerate(providers, start=1):
        child_invs = {rc: (inventory.Inventory.from_primitive(dict(v), rc)
                           if isinstance(v, Mapping) else v)
                      for rc, v in (child.get("inventories") or {}).items()}
        shapes.append(provider_tree.provider(child_invs, child.get("traits", ()),
                                             parent=child.get("parent", 0)))
        for rc, n in (child.get("used") or {}).items():
            usage_of[(i, rc)] = n
    tree = provider_tree.tree_of(shapes)
    usage = tuple(usage_of.get(slot, 0) for slot in tree.slots)
    ids = tuple((state.node_id * 100 + i, f"{state.uuid or state.host}-rp{i}",
                 state.nodename if i == 0 else f"{state.nodename}-child{i}")
                for i in range(len(shapes)))
    state.set_providers(tree, usage, ids)


def fake_host(host: str = "host1", nodename: str | None = None, *,
              aggregates: list | tuple = (), default_az: str | None = "nova",
              traits=(), inventories=None, used=None, providers=(),
              **attrs: Any) -> HostState:
    """A HostState with roomy defaults (8 vCPUs, 16 GiB, 100 GB, up, enabled).

    The classic keywords (``vcpus``, ``memory_mb_used``, ``cpu_allocation_ratio``,
    ...) set the root provider's inventories and usage, as ``ledger`` says."""
    state = HostState(next(_ids), host, nodename or host)
    classic = {k: attrs.pop(k) for k in list(attrs) if k in CLASSIC}
    state.hypervisor_type = "QEMU"
    state.hypervisor_version = 8002000
    state.supported_instances = [("x86_64", "kvm", "hvm")]
    state.last_heartbeat = NOW
    for key, value in attrs.items():
        if not hasattr(state, key) and key not in HostState.__slots__:
            raise AttributeError(f"HostState has no attribute {key}")
        setattr(state, key, value)
    ledger(state, classic, traits, inventories, used, providers)
    aggs = tuple(a if isinstance(a, AggregateInfo) else aggregate(a) for a in aggregates)
    state.set_aggregates(aggs, default_az)
    return state


def fake_spec(**overrides: Any) -> RequestSpec:
    """A validated RequestSpec: a 1 vCPU / 512 MB / 1 GB flavor unless overridden."""
    flavor: dict[str, Any] = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    for key in _FLAVOR_KEYS:
        if key in overrides:
            flavor[key] = overrides.pop(key)
    data = {"flavor": flavor, **overrides}
    return RequestSpec.from_primitive(data)


@dataclasses.dataclass(frozen=True)
class Ctx:
    """What a test says about the world besides the host and the request."""

    now: datetime.datetime = NOW
    conf: Any = None
    group_hosts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    instance_nodes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def request(self, spec: RequestSpec, hosts=()) -> RequestContext:
        """The request as the scheduler would build it; instances on ``hosts``
        are indexed by node, as the HostManager indexes them."""
        nodes = {u: h.node_id for h in hosts for u in h.instances}
        nodes.update(self.instance_nodes)
        return testing.request(spec, now=self.now, conf=self.conf,
                               group_hosts=self.group_hosts, instance_nodes=nodes)


def ctx(now: datetime.datetime = NOW, conf: Any = None,
        group_hosts: Mapping[str, int] | None = None,
        instance_nodes: Mapping[str, int] | None = None) -> Ctx:
    """The world of a test, on the global config unless ``conf`` is given."""
    return Ctx(now=now, conf=conf if conf is not None else cfg.CONF,
               group_hosts=dict(group_hosts or {}), instance_nodes=dict(instance_nodes or {}))


@contextlib.contextmanager
def config(group: str | None = None, **values: Any) -> Iterator[cfg.ConfigOpts]:
    """Override options of ``group`` on ``cfg.CONF`` for the ``with`` block."""
    for name, value in values.items():
        cfg.CONF.set_override(name, value, group=group)
    try:
        yield cfg.CONF
    finally:
        for name in values:
            cfg.CONF.clear_override(name, group=group)


def _conformant(flt, hosts, req) -> None:
    reference_rule = None
    if flt.has_vector and not flt.has_per_host:
        reference_rule = reference.filter_rule(flt)
    testing.check_filter(flt, hosts, [req], reference=reference_rule)


def passes(flt, host: HostState, spec: RequestSpec, context: Ctx | None = None) -> str | None:
    """The scheduler's answer for one host (None: passes), after checking that
    every path and the per-host reference agree on it."""
    req = (context or ctx()).request(spec, [host])
    _conformant(flt, [host], req)
    return testing.answers(flt, [host], req)[0]


def filter_vector(flt, hosts: list[HostState], spec: RequestSpec,
                  context: Ctx | None = None) -> list[bool]:
    """Which of ``hosts`` pass, answered over all of them at once (and checked
    against every other path and the reference)."""
    req = (context or ctx()).request(spec, hosts)
    _conformant(flt, hosts, req)
    return [a is None for a in testing.answers(flt, hosts, req)]


def skips(plugin, spec: RequestSpec, context: Ctx | None = None) -> bool:
    """Whether the plugin has nothing to say about ``spec`` (``prepare`` -> SKIP)."""
    return plugin.prepare((context or ctx()).request(spec)) is testing.SKIP


def weigh(weigher, host: HostState, spec: RequestSpec, context: Ctx | None = None) -> float:
    """The raw weight of one host (0.0 when the weigher skips the request)."""
    return weigh_vector(weigher, [host], spec, context)[0]


def weigh_vector(weigher, hosts: list[HostState], spec: RequestSpec,
                 context: Ctx | None = None) -> list[float]:
    """Raw weights of ``hosts`` as the scheduler computes them (all 0.0 when the
    weigher skips the request), checked against the reference."""
    req = (context or ctx()).request(spec)
    testing.check_weigher(weigher, hosts, [req], reference=reference.WEIGHT_RULES.get(
        weigher.name))
    raw = testing.raw_weights(weigher, hosts, req)
    return [0.0] * len(hosts) if raw is None else raw


def multiplier(weigher, host: HostState) -> float:
    """The multiplier the scheduler applies to ``weigher``'s weight of ``host``."""
    value = weigh_multiplier(weigher, HostColumns([host]), np.zeros(1, dtype=np.intp))
    return float(value if np.isscalar(value) else value[0])
