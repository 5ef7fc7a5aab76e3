"""A plain, per-host reference of the scheduler's decisions (tests only).

Every vector rule of the built-in filters and weighers, written again host by
host the obvious way, and a scheduler that filters in the configured order,
weighs with min-max normalisation and picks the best host that still fits —
no columns, no classes, no memo. The per-host filters (classes) are asked
directly, host by host. ``test_equivalence`` runs random fleets and traces
through this and through the product and compares chosen hosts, weights and
refusal reasons.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.plugins import SKIP, RequestContext


def _ratio(host, key: str, own: float) -> float:
    return host.aggregate_min_float(key, own) if host.aggregates else own


# -- filters -------------------------------------------------------------------------

def compute(host, r: RequestContext):
    if host.disabled:
        return "disabled"
    hb = host.last_heartbeat
    if hb is not None and hb < r.now - datetime.timedelta(seconds=r.conf.service_down_time):
        return "service down"
    return None


def _one_class(host, r, rc: str, text: str, ratio=None):
    """A class of the request's unnumbered group against the root provider's
    inventory of it, written out (RamFilter, CoreFilter, DiskFilter)."""
    group = r.spec.resources.unnumbered
    need = group.amount(rc) if group is not None else 0
    if not need:
        return None
    inv = host.inventory(rc)
    if inv is None:
        return text.format(need)
    ratio = inv.allocation_ratio if ratio is None else ratio
    if not (inv.min_unit <= need <= inv.max_unit) or need % inv.step_size:
        return text.format(need)
    if host.used(rc) + need > (inv.total - inv.reserved) * ratio:
        return text.format(need)
    return None


def ram(host, r, ratio=None):
    return _one_class(host, r, "MEMORY_MB", "insufficient RAM: need {} MB", ratio)


def core(host, r, ratio=None):
    return _one_class(host, r, "VCPU", "insufficient vCPUs: need {}", ratio)


def disk(host, r, ratio=None):
    return _one_class(host, r, "DISK_GB", "insufficient disk: need {} GB", ratio)


def resources(views):
    """ResourcesFilter on nodes without child providers, for a request of one
    unnumbered group: root traits, then each class on the root (those a view
    filter checks left to it), in the product's order of reasons."""
    def check(host, r):
        request = r.spec.resources
        assert not request.numbered and not host.tree.nested
        group = request.unnumbered
        if group is None:
            return None
        for trait in sorted(group.required):
            if trait not in host.traits:
                return f"lacks trait {trait}"
        for trait in sorted(group.forbidden):
            if trait in host.traits:
                return f"has forbidden trait {trait}"
        for rc, need in group.resources:
            if rc in views:
                continue
            inv = host.inventory(rc)
            if inv is None:
                return f"no {rc} inventory"
            if need < inv.min_unit:
                return f"{rc} {need} below min_unit"
            if need > inv.max_unit:
                return f"{rc} {need} above max_unit"
            if need % inv.step_size:
                return f"{rc} {need} not a multiple of step_size"
            if host.used(rc) + need > (inv.total - inv.reserved) * inv.allocation_ratio:
                return f"insufficient {rc}: need {need}"
        return None
    return check


def _count_limit(attr: str, option: str, text: str, aggregate: bool):
    def check(host, r):
        limit = getattr(r.conf.filter_scheduler, option)
        if aggregate and host.aggregates:
            limit = int(host.aggregate_min_float(option, limit))
        if getattr(host, attr) >= limit:
            return text.format(limit=limit)
        return None
    return check


def same_host(host, r):
    wanted = r.spec.scheduler_hints.same_host
    if wanted and not any(u in host.instances for u in wanted):
        return "not on the same host as the same_host instances"
    return None


def different_host(host, r):
    if any(u in host.instances for u in r.spec.scheduler_hints.different_host):
        return "runs one of the different_host instances"
    return None


def affinity(host, r):
    group = r.spec.instance_group
    if group is None or group.policy != "affinity":
        return None
    members = r.group_hosts
    if not any(members.values()) or members.get(host.host):
        return None
    return f"not a host of affinity group {group.uuid}"


def anti_affinity(host, r):
    group = r.spec.instance_group
    if group is None or group.policy != "anti-affinity":
        return None
    limit = group.max_server_per_host or 1
    if r.group_hosts.get(host.host, 0) >= limit:
        return f"anti-affinity group {group.uuid}: max {limit} member(s) per host"
    return None


def isolated_hosts(host, r):
    """Nova's rule, as booleans."""
    fs = r.conf.filter_scheduler
    images = [i.strip() for i in fs.isolated_images]
    host_isolated = host.host in [h.strip() for h in fs.isolated_hosts]
    image_isolated = r.spec.image.id is not None and r.spec.image.id in images
    if image_isolated:
        return None if host_isolated else \
            f"image {r.spec.image.id} is isolated: not an isolated host"
    if fs.restrict_isolated_hosts_to_isolated_images and host_isolated:
        return "isolated host: the image is not an isolated image"
    return None


VECTOR_RULES: dict[str, Callable] = {
    "AllHostsFilter": lambda host, r: None,
    "ComputeFilter": compute,
    "RamFilter": ram,
    "CoreFilter": core,
    "DiskFilter": disk,
    "AggregateRamFilter": lambda h, r: ram(h, r, _ratio(h, "ram_allocation_ratio",
                                                       h.ram_allocation_ratio)),
    "AggregateCoreFilter": lambda h, r: core(h, r, _ratio(h, "cpu_allocation_ratio",
                                                         h.cpu_allocation_ratio)),
    "AggregateDiskFilter": lambda h, r: disk(h, r, _ratio(h, "disk_allocation_ratio",
                                                         h.disk_allocation_ratio)),
    "NumInstancesFilter": _count_limit("num_instances", "max_instances_per_host",
                                       "max instances per host reached ({limit})", False),
    "AggregateNumInstancesFilter": _count_limit(
        "num_instances", "max_instances_per_host",
        "max instances per host reached ({limit})", True),
    "IoOpsFilter": _count_limit("num_io_ops", "max_io_ops_per_host",
                                "max I/O operations per host reached ({limit})", False),
    "AggregateIoOpsFilter": _count_limit("num_io_ops", "max_io_ops_per_host",
                                         "max I/O operations per host reached ({limit})",
                                         True),
    "SameHostFilter": same_host,
    "DifferentHostFilter": different_host,
    "ServerGroupAffinityFilter": affinity,
    "ServerGroupAntiAffinityFilter": anti_affinity,
    "IsolatedHostsFilter": isolated_hosts,
}


def filter_rule(flt) -> Callable[[Any, RequestContext], str | None]:
    """The reference per-host answer of a product filter."""
    if flt.name in VECTOR_RULES:
        return VECTOR_RULES[flt.name]
    if not flt.has_per_host:
        raise KeyError(f"no reference for vector filter {flt.name}")

    def per_host(host, r):          # a per-host rule is its own reference
        state = flt.prepare(r)
        return None if state is SKIP else flt.host_passes(host, state)
    return per_host


def request_rules(spec) -> list[tuple[str, Callable]]:
    """force/ignore as the first filters."""
    out = []
    if spec.ignore_hosts:
        out.append(("ignore_hosts", lambda h, r: "host is ignored"
                    if h.host in r.spec.ignore_hosts else None))
    if spec.force_hosts:
        out.append(("force_hosts", lambda h, r: None if h.host in r.spec.force_hosts
                    else "not a forced host"))
    if spec.force_nodes:
        out.append(("force_nodes", lambda h, r: None if h.nodename in r.spec.force_nodes
                    else "not a forced node"))
    return out


# -- weighers --------------------------------------------------------------------------

def _members(r, policy):
    group = r.spec.instance_group
    return 0 if group is None or group.policy != policy else None


WEIGHT_RULES: dict[str, Callable] = {
    "RAMWeigher": lambda h, r: h.free_ram_mb,
    "CPUWeigher": lambda h, r: h.vcpus_limit - h.vcpus_used,
    "DiskWeigher": lambda h, r: h.free_disk_mb,
    "IoOpsWeigher": lambda h, r: h.num_io_ops,
    "NumInstancesWeigher": lambda h, r: h.num_instances,
    "HypervisorVersionWeigher": lambda h, r: h.hypervisor_version or 0,
    "BuildFailureWeigher": lambda h, r: -h.failed_builds,
    "ServerGroupSoftAffinityWeigher": lambda h, r: (
        0 if _members(r, "soft-affinity") == 0 else r.group_hosts.get(h.host, 0)),
    "ServerGroupSoftAntiAffinityWeigher": lambda h, r: (
        0 if _members(r, "soft-anti-affinity") == 0 else -r.group_hosts.get(h.host, 0)),
    "PCIWeigher": lambda h, r: (
        -float(max(sum(p.count for p in h.pci_pools)
                   - sum(x.count for x in r.spec.pci_requests), 0))
        if r.spec.pci_requests else -float(sum(p.count for p in h.pci_pools))),
}


def metrics_weight(host, r):
    total = 0.0
    for entry in r.conf.metrics.weight_setting:
        name, _, ratio = entry.partition("=")
        value = host.metrics.get(name.strip())
        if value is None or isinstance(value, bool):
            if r.conf.metrics.required:
                raise AssertionError(f"{host.host} lacks metric {name}")
            return r.conf.metrics.weight_of_unavailable
        total += value * float(ratio)
    return total


def image_props_weight(host, r):
    setting = {}
    for entry in r.conf.filter_scheduler.image_props_weight_setting:
        name, _, ratio = entry.partition("=")
        setting[name.strip()] = float(ratio)
    total = 0.0
    for props in host.instance_images.values():
        for name, value in r.spec.image.properties.items():
            if (name, value) in props:
                total += setting.get(name, 0.0) if setting else 1.0
    return total


WEIGHT_RULES["MetricsWeigher"] = metrics_weight
WEIGHT_RULES["ImagePropertiesWeigher"] = image_props_weight


def multiplier(w, host) -> float:
    base = w.base_multiplier()
    if w.aggregate_multiplier_key and host.aggregates:
        return host.aggregate_min_float(w.aggregate_multiplier_key, base)
    return base


def weigh(weighers, hosts: Sequence, r: RequestContext) -> list[tuple[float, Any]]:
    """(total, host) best first, stable for equal totals."""
    totals = [0.0] * len(hosts)
    if len(hosts) > 1:
        for w in weighers:
            raw = [float(WEIGHT_RULES[w.name](h, r)) for h in hosts]
            lo, hi = min(raw), max(raw)
            if hi == lo:
                continue
            for i, h in enumerate(hosts):
                m = multiplier(w, h)
                if m == 0.0:
                    continue
                totals[i] += m * ((raw[i] - lo) / (hi - lo))
    order = sorted(range(len(hosts)), key=lambda i: -totals[i])
    return [(totals[i], hosts[i]) for i in order]


# -- the scheduler ------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    """Per instance (host, weight), or the explanation of the first that fits nowhere."""

    placed: list[tuple[str, float]]
    refused: dict | None = None
    refused_index: int | None = None


def explain(rules, hosts, r) -> dict:
    removed: dict[str, collections.Counter] = {}
    alive = list(hosts)
    for name, rule in rules:
        kept = []
        for h in alive:
            reason = rule(h, r)
            if reason is None:
                kept.append(h)
            else:
                removed.setdefault(name, collections.Counter())[reason] += 1
        alive = kept
    return {"hosts": len(hosts), "available": 0,
            "filters": [{"filter": n, "removed": sum(c.values()), "reasons": dict(c.most_common())}
                        for n, c in removed.items()]}


def select(hosts: Sequence, spec, filters, weighers, conf, now, group_hosts,
           instance_nodes) -> Outcome:
    """What the scheduler must decide for ``spec`` on ``hosts`` (nothing changes:
    earlier instances are consumed on copies)."""
    views = {"RamFilter": "MEMORY_MB", "AggregateRamFilter": "MEMORY_MB",
             "CoreFilter": "VCPU", "AggregateCoreFilter": "VCPU",
             "DiskFilter": "DISK_GB", "AggregateDiskFilter": "DISK_GB"}
    skip = {views[f.name] for f in filters if f.name in views}
    # The product runs ResourcesFilter as a built-in step after the
    # configured filters (cheap host-level filters prune first).
    rules = request_rules(spec) + [(f.name, filter_rule(f)) for f in filters] + \
        [("ResourcesFilter", resources(skip))]
    group = spec.instance_group.uuid if spec.instance_group else spec.scheduler_hints.group
    view = list(hosts)
    counts = dict(group_hosts)
    placed = []
    for index in range(spec.num_instances):
        r = RequestContext(spec=spec, now=now, conf=conf, group_hosts=dict(counts),
                           instance_nodes=instance_nodes, index=index)
        passing = [h for h in view if all(rule(h, r) is None for _, rule in rules)]
        if not passing:
            return Outcome(placed, explain(rules, view, r), index)
        chosen = None
        for weight, h in weigh(weighers, passing, r):
            fit = h.fit(spec) if (spec.numa_topology is not None or spec.pci_requests) \
                else None
            if fit is None or fit.fits:
                chosen = (weight, h, fit)
                break
        if chosen is None:
            return Outcome(placed, {"claim": True}, index)
        weight, h, fit = chosen
        placed.append((h.host, weight))
        from scheduler.host_state import Consumed

        copy = h.copy()
        copy.usage = _consumed(h, spec, fit)
        copy.apply(spec, Consumed(node_id=h.node_id,
                                  numa_fitted=fit.numa_fitted if fit else None,
                                  pci_picks=fit.pci_picks if fit else ()))
        copy.instances[f"instance-{index}"] = group
        copy.instance_images[f"instance-{index}"] = frozenset(spec.image.properties.items())
        view = [copy if x is h else x for x in view]
        if group:
            counts[h.host] = counts.get(h.host, 0) + 1
    return Outcome(placed)


def _consumed(host, spec, fit) -> tuple[int, ...]:
    """The root's usage after the request: its unnumbered amounts, PCPU as the
    host CPUs the NUMA fit pins."""
    usage = list(host.usage)
    group = spec.resources.unnumbered
    for rc, amount in (group.resources if group is not None else ()):
        if rc == "PCPU" and fit is not None and fit.numa_fitted is not None:
            amount = sum(len(c.host_cpus) for c in fit.numa_fitted.cells)
        usage[host.tree.slot_of[(0, rc)]] += amount
    return tuple(usage)


__all__ = ["Outcome", "select", "weigh", "filter_rule", "VECTOR_RULES", "WEIGHT_RULES"
           ]
