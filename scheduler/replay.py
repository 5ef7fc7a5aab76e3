"""Trace replay behind ``berth-manage simulate --fleet F --trace T``
(doc/source/admin/tasks.rst, "Try a change before rolling it out").

A trace is JSON Lines: each line is a request spec exactly as
``select_destinations`` takes it over RPC, or ``{"release": "<instance uuid>"}``.
Every line is validated before anything runs (:class:`InvalidTrace` names the
line and the field). The trace is replayed in order on a throwaway copy of the
fleet with the configured filters and weighers; random picks are seeded, so the
same fleet, trace, configuration and seed give the same placements.

The report says what an operator wants to know before a change: requests placed
and refused per kind (the flavor name, else its size) with the most common
refusal reasons, hosts used, utilisation per resource and per availability
zone, and fragmentation: free capacity stranded on partially used hosts, which
large requests cannot use.
"""
from __future__ import annotations

import collections
import json
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oslo_config import cfg

from scheduler import exception

#: Resources reported, as the filters count them (local_gb: disk in GB).
RESOURCES = ("vcpus", "memory_mb", "local_gb")
TOP_REASONS = 3


class InvalidTrace(exception.InvalidRequest):
    """A trace line is not JSON or not a valid request; names the line and field."""


def load_trace(path: str) -> list[Any]:
    """The JSON values of a JSONL file (blank lines and ``#`` comments skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidTrace(f"{path}: cannot read: {e.strerror}", field="trace",
                           reason=str(e.strerror)) from None
    return parse_trace(text.splitlines(), path)


def parse_trace(lines: Iterable[str], name: str = "trace") -> list[Any]:
    out = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as e:
            raise InvalidTrace(f"{name}: line {number}: not JSON: {e.msg}",
                               field=f"line {number}", reason="not JSON") from None
    return out


def _numbered(lines: Sequence[Any]) -> list[tuple[int, Any]]:
    """``parse_trace`` output as is; plain values numbered from 1."""
    if all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], int) for x in lines):
        return list(lines)
    return list(enumerate(lines, 1))


def kind_of(spec) -> str:
    """What a request is called in the report: its flavor's name, else its size."""
    f = spec.flavor
    return f.name or f"{f.vcpus}vcpu-{f.memory_mb}mb-{f.root_gb + f.ephemeral_gb}gb"


def _validate(scheduler, lines: list[tuple[int, Any]]) -> list[tuple[int, str, Any]]:
    """(line number, "release"|"select", uuid or RequestSpec) for every line."""
    steps = []
    for number, value in lines:
        where = f"line {number}"
        if isinstance(value, dict) and "release" in value:
            if set(value) != {"release"}:
                raise InvalidTrace(f"{where}: a release line has only a release key",
                                   field=f"{where}.release", reason="unknown key")
            try:
                steps.append((number, "release", str(uuidlib.UUID(value["release"]))))
            except (ValueError, TypeError, AttributeError):
                raise InvalidTrace(f"{where}: release: not a UUID: {value['release']!r}",
                                   field=f"{where}.release", reason="not a UUID") from None
            continue
        try:
            steps.append((number, "select", scheduler.parse_request(value)))
        except exception.InvalidRequest as e:
            raise InvalidTrace(f"{where}: {e.field}: {e.reason}", field=f"{where}.{e.field}",
                               reason=e.reason) from None
    return steps


def _main_reason(summary: Mapping) -> str:
    """The filter that removed the most hosts, with its most common reason."""
    filters = summary.get("filters") or []
    if not filters:
        return "no hosts"
    top = max(filters, key=lambda f: f["removed"])
    reason = next(iter(top["reasons"]), "")
    return f"{top['filter']}: {reason}" if reason else top["filter"]


def replay(fleet, lines: Sequence[Any], conf: cfg.ConfigOpts = cfg.CONF, seed: int = 0,
           allow_preemption: bool = False) -> dict:
    """Replay ``lines`` (trace values) on ``fleet`` (a fleet document or ``Fleet``);
    ``allow_preemption``: requests that fit nowhere may preempt (each placement
    then names its victims, and the report counts them per kind)."""
    from scheduler import fleet as fleet_mod
    from scheduler import simulate

    t0 = time.perf_counter()
    if isinstance(fleet, dict):
        fleet = fleet_mod.load_fleet(fleet)
    t1 = time.perf_counter()
    with simulate.throwaway_scheduler(fleet, conf, seed=seed) as (_db, scheduler):
        steps = _validate(scheduler, _numbered(lines))
        t2 = time.perf_counter()
        result = _run(scheduler, steps, allow_preemption)
        t3 = time.perf_counter()
        result.update(usage_report(host_rows(scheduler.host_manager.host_states())))
        t4 = time.perf_counter()
    result["timing"] = {"fleet_s": round(t1 - t0, 3), "setup_s": round(t2 - t1, 3),
                        "replay_s": round(t3 - t2, 3), "report_s": round(t4 - t3, 3)}
    result["seed"] = seed
    return result


def _run(scheduler, steps, allow_preemption: bool = False) -> dict:
    kinds: dict[str, dict] = {}
    placements: list[dict] = []
    refusals: list[dict] = []
    releases = {"released": 0, "nothing_to_release": 0}
    for number, what, value in steps:
        if what == "release":
            released = scheduler.release(value)
            releases["released" if released else "nothing_to_release"] += 1
            continue
        spec = value
        kind = kinds.setdefault(kind_of(spec), {"requests": 0, "placed": 0, "refused": 0,
                                                "instances_placed": 0, "preempted": 0,
                                                "reasons": collections.Counter()})
        kind["requests"] += 1
        try:
            answers = scheduler.select_destinations(
                spec, **({"allow_preemption": True} if allow_preemption else {}))
        except exception.NoValidHost as e:
            reason = _main_reason(e.kwargs.get("summary") or {})
            kind["refused"] += 1
            kind["reasons"][reason] += 1
            refusals.append({"line": number, "kind": kind_of(spec), "reason": reason})
            continue
        except exception.InvalidRequest as e:   # e.g. an instance UUID placed twice
            reason = f"invalid: {e.field}: {e.reason}"
            kind["refused"] += 1
            kind["reasons"][reason] += 1
            refusals.append({"line": number, "kind": kind_of(spec), "reason": reason})
            continue
        kind["placed"] += 1
        kind["instances_placed"] += len(answers)
        for index, per_instance in enumerate(answers):
            chosen = per_instance[0]
            placements.append({"line": number, "index": index,
                               "instance_uuid": chosen.instance_uuid, "host": chosen.host,
                               **({"preempted": [v["instance_uuid"]
                                                 for v in chosen.preempted]}
                                  if chosen.preempted else {})})
            kind["preempted"] += len(chosen.preempted)
    by_kind = {}
    for name in sorted(kinds):
        k = kinds[name]
        by_kind[name] = {**{key: k[key] for key in ("requests", "placed", "refused",
                                                    "instances_placed")},
                         **({"preempted": k["preempted"]} if allow_preemption else {}),
                         "top_reasons": [{"reason": r, "count": n}
                                         for r, n in k["reasons"].most_common(TOP_REASONS)]}
    return {"requests": sum(k["requests"] for k in kinds.values()),
            "placed": sum(k["placed"] for k in kinds.values()),
            "refused": sum(k["refused"] for k in kinds.values()),
            "releases": releases, "kinds": by_kind,
            **({"preempted": sum(k["preempted"] for k in kinds.values())}
               if allow_preemption else {}),
            "placements": placements, "refusals": refusals}


def host_rows(host_states) -> list[dict]:
    """Capacity and usage per host from the scheduler's host states (as the filters
    count them: (total - reserved) x the host's ratio), its zone and instances."""
    rows = []
    for hs in host_states:
        rows.append({
            "zone": hs.availability_zone or "(none)", "instances": hs.num_instances,
            "capacity": {"vcpus": hs.vcpus_limit, "memory_mb": hs.memory_mb_limit,
                         "local_gb": hs.disk_mb_limit / 1024},
            "used": {"vcpus": hs.vcpus_used, "memory_mb": hs.memory_mb_used,
                     "local_gb": hs.local_gb_used}})
    return rows


def _ratio(used: float, total: float) -> float:
    return round(used / total, 4) if total > 0 else 0.0


def usage_report(hosts: Sequence[Mapping]) -> dict:
    """Hosts used, utilisation per resource (overall and per zone) and fragmentation.

    Fragmentation of a resource: the share of the free capacity that sits on
    partially used hosts (some instances, some room left). An empty host's free
    room takes any request; room stranded beside other instances may be too
    small for the next big one.
    """
    total = {r: 0.0 for r in RESOURCES}
    used = {r: 0.0 for r in RESOURCES}
    free_all = {r: 0.0 for r in RESOURCES}
    free_partial = {r: 0.0 for r in RESOURCES}
    zones: dict[str, dict[str, dict[str, float]]] = {}
    hosts_used = partial = 0
    for row in hosts:
        cap, use, zone = row["capacity"], row["used"], row["zone"]
        z = zones.setdefault(zone, {"hosts": {"total": 0, "used": 0},
                                    "used": {r: 0.0 for r in RESOURCES},
                                    "capacity": {r: 0.0 for r in RESOURCES}})
        z["hosts"]["total"] += 1
        in_use = row["instances"] > 0
        if in_use:
            hosts_used += 1
            z["hosts"]["used"] += 1
        full = all(max(cap[r] - use[r], 0) <= 0 for r in RESOURCES)
        if in_use and not full:
            partial += 1
        for r in RESOURCES:
            free = max(cap[r] - use[r], 0)
            total[r] += cap[r]
            used[r] += use[r]
            free_all[r] += free
            if in_use:
                free_partial[r] += free
            z["used"][r] += use[r]
            z["capacity"][r] += cap[r]
    return {
        "hosts": {"total": len(hosts), "used": hosts_used, "partially_used": partial},
        "utilisation": {r: _ratio(used[r], total[r]) for r in RESOURCES},
        "utilisation_per_az": {
            zone: {"hosts": z["hosts"],
                   **{r: _ratio(z["used"][r], z["capacity"][r]) for r in RESOURCES}}
            for zone, z in sorted(zones.items())},
        "fragmentation": {r: {"stranded": round(free_partial[r], 2),
                              "free": round(free_all[r], 2),
                              "share": _ratio(free_partial[r], free_all[r])}
                          for r in RESOURCES},
    }


# -- output -----------------------------------------------------------------------------

def format_report(report: Mapping) -> str:
    lines = [f"requests: {report['requests']}  placed: {report['placed']}  refused: "
             f"{report['refused']}  releases: {report['releases']['released']} "
             f"(+{report['releases']['nothing_to_release']} with nothing to release)"]
    if "preempted" in report:
        lines[0] += f"  preempted: {report['preempted']}"
    lines.append("")
    preempting = "preempted" in report
    lines.append(f"{'KIND':24} {'REQUESTS':>8} {'PLACED':>7} {'INSTANCES':>9} "
                 f"{'REFUSED':>8} " + (f"{'PREEMPTED':>9} " if preempting else "") +
                 " TOP REFUSAL REASONS")
    for name, k in report["kinds"].items():
        reasons = "; ".join(f"{r['count']}x {r['reason']}" for r in k["top_reasons"])
        lines.append((f"{name:24} {k['requests']:>8} {k['placed']:>7} "
                      f"{k['instances_placed']:>9} {k['refused']:>8} " +
                      (f"{k['preempted']:>9} " if preempting else "") +
                      f" {reasons}").rstrip())
    h = report["hosts"]
    lines.append("")
    lines.append(f"hosts used: {h['used']}/{h['total']} ({h['partially_used']} partially)")
    lines.append("utilisation: " + "  ".join(
        f"{r} {report['utilisation'][r]:.1%}" for r in RESOURCES))
    for zone, z in report["utilisation_per_az"].items():
        lines.append(f"  {zone}: hosts {z['hosts']['used']}/{z['hosts']['total']}  " +
                     "  ".join(f"{r} {z[r]:.1%}" for r in RESOURCES))
    lines.append("fragmentation (free capacity on partially used hosts): " + "  ".join(
        f"{r} {f['share']:.1%} ({f['stranded']:,.0f} of {f['free']:,.0f})"
        for r, f in report["fragmentation"].items()))
    return "\n".join(lines)


# -- comparing two configurations -------------------------------------------------------

def compare(a: Mapping, b: Mapping) -> dict:
    """What changes from report ``a`` to report ``b`` of the same trace."""
    where_a = {(p["line"], p["index"]): p["host"] for p in a["placements"]}
    where_b = {(p["line"], p["index"]): p["host"] for p in b["placements"]}
    differ = [{"line": line, "index": index, "a": where_a[(line, index)],
               "b": where_b[(line, index)]}
              for line, index in sorted(set(where_a) & set(where_b))
              if where_a[(line, index)] != where_b[(line, index)]]
    refused_a = {r["line"]: r for r in a["refusals"]}
    refused_b = {r["line"]: r for r in b["refusals"]}
    gained = [refused_b[n] for n in sorted(set(refused_b) - set(refused_a))]
    lost = [refused_a[n] for n in sorted(set(refused_a) - set(refused_b))]
    return {
        "placements_compared": len(set(where_a) & set(where_b)),
        "placements_differ": differ,
        "refusals_gained": gained,
        "refusals_lost": lost,
        "side_by_side": {
            "placed": [a["placed"], b["placed"]],
            "refused": [a["refused"], b["refused"]],
            "hosts_used": [a["hosts"]["used"], b["hosts"]["used"]],
            "utilisation": {r: [a["utilisation"][r], b["utilisation"][r]]
                            for r in RESOURCES},
            "fragmentation": {r: [a["fragmentation"][r]["share"],
                                  b["fragmentation"][r]["share"]] for r in RESOURCES},
        },
    }


def format_comparison(diff: Mapping, names: Sequence[str]) -> str:
    a, b = names
    s = diff["side_by_side"]
    width = max(len(a), len(b), 10)
    lines = [f"{'':26} {a:>{width}} {b:>{width}}"]
    for label, pair in (("placed", s["placed"]), ("refused", s["refused"]),
                        ("hosts used", s["hosts_used"])):
        lines.append(f"{label:26} {pair[0]:>{width}} {pair[1]:>{width}}")
    for r in RESOURCES:
        u = s["utilisation"][r]
        lines.append(f"{'utilisation ' + r:26} {u[0]:>{width}.1%} {u[1]:>{width}.1%}")
    for r in RESOURCES:
        f = s["fragmentation"][r]
        lines.append(f"{'fragmentation ' + r:26} {f[0]:>{width}.1%} {f[1]:>{width}.1%}")
    lines.append("")
    lines.append(f"placements that differ: {len(diff['placements_differ'])} of "
                 f"{diff['placements_compared']}")
    for d in diff["placements_differ"][:10]:
        lines.append(f"  line {d['line']}#{d['index']}: {d['a']} -> {d['b']}")
    if len(diff["placements_differ"]) > 10:
        lines.append(f"  ... {len(diff['placements_differ']) - 10} more (see --json)")
    for title, rows in (("refused only under " + b, diff["refusals_gained"]),
                        ("refused only under " + a, diff["refusals_lost"])):
        lines.append(f"{title}: {len(rows)}")
        for r in rows[:10]:
            lines.append(f"  line {r['line']} ({r['kind']}): {r['reason']}")
    return "\n".join(lines)
