"""How many more instances of a request fit right now (``berth-manage capacity``,
RPC ``capacity``).

The answer is exact, not an estimate from totals: it is what placing instances
one by one would get until ``NoValidHost``, computed with the real pipeline
(every enabled filter, NUMA fitting, PCI pools, server-group policies) on a
private overlay of the host states, claiming nothing
(``FilterScheduler.count_fits``).

Weighing only decides *which* host takes the next instance. Without an
affinity policy, a host's answer for the next instance depends only on that
host's own state (resources, NUMA cells, PCI pools, the group's members on it),
so every order fills each host to the same count: the count places one instance
on every passing host per round, without weighers, until a round places
nothing. With affinity the first pick decides where all the others go, so the
configured weighers pick it as they would.

Per availability zone and per aggregate the same count is made with the request
restricted to that zone's or aggregate's hosts (a ``force_hosts`` list, which in
Berth narrows the hosts and keeps every filter).
"""
from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler import exception
from scheduler.request_spec import RequestSpec

#: Requests (flavors) in one capacity call: each is counted, per zone and per
#: aggregate when asked, all within one [scheduler] request_timeout.
MAX_REQUESTS = 20


def parse_requests(data: Any, parse) -> list[tuple[str, RequestSpec]]:
    """(name, spec) per request of a FLAVOR.json document.

    The document is a request spec as ``select_destinations`` takes it, a bare
    flavor (``{"vcpus": .., "memory_mb": .., "root_gb": ..}``), or a list of
    either. ``parse`` validates one request spec (``FilterScheduler.parse_request``).
    """
    items = data if isinstance(data, list) else [data]
    if not items:
        raise exception.InvalidRequest(field="requests", reason="no request given")
    if len(items) > MAX_REQUESTS:
        raise exception.InvalidRequest(
            field="requests", reason=f"more than {MAX_REQUESTS} requests in one call")
    out = []
    for i, item in enumerate(items):
        field = f"requests[{i}]" if isinstance(data, list) else "request"
        if isinstance(item, dict) and "flavor" not in item and "vcpus" in item:
            item = {"flavor": item}
        try:
            spec = parse(item)
        except exception.InvalidRequest as e:
            raise exception.InvalidRequest(f"{field}: {e.field}: {e.reason}",
                                           field=f"{field}.{e.field}",
                                           reason=e.reason) from None
        f = spec.flavor
        name = f.name or f"{f.vcpus}vcpu-{f.memory_mb}mb-{f.root_gb + f.ephemeral_gb}gb"
        out.append((name, spec))
    return out


def count(scheduler, spec: RequestSpec, hosts: Sequence[str] | None = None,
          deadline=None, preempting: bool = False) -> dict:
    """How many more instances of ``spec`` fit now (on ``hosts`` only, if given),
    within ``deadline`` (``scheduler.deadline.Deadline``) when given;
    ``preempting``: as if every instance it may preempt were gone.

    Returns ``{"fits": n, "limited_by": text}``: ``limited_by`` is why instance
    ``n + 1`` was refused (the NoValidHost explanation).
    """
    one = spec.replace(num_instances=1, instance_uuids=None)
    if hosts is not None:
        wanted = set(hosts)
        if spec.force_hosts:
            wanted &= set(spec.force_hosts)
        if not wanted:
            return {"fits": 0, "limited_by": "no hosts"}
        one = one.replace(force_hosts=tuple(sorted(wanted)))
    if preempting:
        fits, refusal = scheduler.count_fits(one, deadline, preempting=True)
    elif deadline is not None:
        fits, refusal = scheduler.count_fits(one, deadline)
    else:
        fits, refusal = scheduler.count_fits(one)
    return {"fits": fits, "limited_by": refusal.reason}


def _zones_and_aggregates(scheduler) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    zones: dict[str, set[str]] = collections.defaultdict(set)
    aggregates: dict[str, set[str]] = collections.defaultdict(set)
    for hs in scheduler.host_manager.host_states():
        if hs.availability_zone:
            zones[hs.availability_zone].add(hs.host)
        for agg in hs.aggregates:
            aggregates[agg.name].add(hs.host)
    return ({z: sorted(h) for z, h in sorted(zones.items())},
            {a: sorted(h) for a, h in sorted(aggregates.items())})


def capacity(scheduler, requests: Sequence[tuple[str, RequestSpec]], per_az: bool = False,
             per_aggregate: bool = False, preempting: bool = False) -> list[dict]:
    """The count for each named request, optionally per zone and per aggregate,
    all within one ``[scheduler] request_timeout`` (RequestTimeout past it);
    ``preempting``: also ``fits_preempting``, the count as if every instance
    the request may preempt (``scheduler.preemption``) were gone."""
    zones, aggregates = _zones_and_aggregates(scheduler) if (per_az or per_aggregate) \
        else ({}, {})
    deadline = scheduler.new_deadline()
    out = []
    for name, spec in requests:
        entry: dict[str, Any] = {"request": name, **count(scheduler, spec,
                                                          deadline=deadline)}
        if preempting:
            entry["fits_preempting"] = count(scheduler, spec, deadline=deadline,
                                             preempting=True)["fits"]
        if per_az:
            entry["per_az"] = {z: count(scheduler, spec, hosts, deadline)["fits"]
                               for z, hosts in zones.items()}
        if per_aggregate:
            entry["per_aggregate"] = {a: count(scheduler, spec, hosts, deadline)["fits"]
                                      for a, hosts in aggregates.items()}
        out.append(entry)
    return out


def format_capacity(rows: Sequence[Mapping]) -> str:
    preempting = any("fits_preempting" in row for row in rows)
    head = f"{'REQUEST':32} {'FITS':>8}"
    if preempting:
        head += f" {'PREEMPTING':>10}"
    lines = [f"{head}  LIMITED BY"]
    for row in rows:
        line = f"{row['request']:32} {row['fits']:>8}"
        if preempting:
            line += f" {row.get('fits_preempting', ''):>10}"
        lines.append(f"{line}  {row['limited_by']}")
        for key, title in (("per_az", "az"), ("per_aggregate", "aggregate")):
            for where, n in (row.get(key) or {}).items():
                lines.append(f"  {title} {where:{28 - len(title)}} {n:>8}")
    return "\n".join(lines)
