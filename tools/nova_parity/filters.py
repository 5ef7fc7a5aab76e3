"""Cross-check Berth's filter catalogue and weighers against Nova 34's own.

    tox -e nova-parity [-- --requests 200 --seed 1]   # the NUMA check, then this one
    python tools/nova_parity/filters.py [--requests 200] [--seed 1] [--show 1]

Seeded random cases (``filter_cases.py``: one request and six hosts each, for
every filter both have but NUMATopologyFilter, which ``run.py`` covers through
the fitting itself) are answered by Nova's real ``host_passes``
(``filter_nova.py``) and by Berth's scheduler path (``filter_berth.py``), each
in a process of its own. Every (request, host) pair where one passes the host
and the other does not is put in a class by the first rule of ``RULES`` that
explains it; each rule names a category:

- ``Nova bug``: Nova's answer is wrong by its own documentation or crashes
  (a crash counts as "Nova refuses");
- ``documented``: a deliberate difference, listed in the filter reference
  (doc/source/reference/filters-nova.rst) with an example;
- ``Berth bug``: anything no rule explains, and any case where Berth's own paths
  disagree or Berth raises.

One example per class is minimised (hosts, request keys, host attributes and
aggregate keys removed while the same disagreement remains) and printed. Then
the weighers: fleets of 30 hosts weighed by both, the order of the 10 heaviest
compared (hosts of equal weight in either are interchangeable).

Exit status 0 when no class is a Berth bug and the weighers agree, else 1.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tools.nova_parity import filter_cases  # noqa: E402
from tools.nova_parity.filter_rules import (  # noqa: E402
    BERTH_BUG,
    DOCUMENTED,
    RULES,
    candidates,
    unexplained,
)

BATCH = 50


class Sides:
    """Nova's and Berth's answers, each side in a process of its own."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.nova = concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx)
        self.berth = concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx)

    def answers(self, cases: list[dict]) -> list[tuple[list, list]]:
        """(berth answers, nova answers) per case, in order."""
        batches = [cases[i:i + BATCH] for i in range(0, len(cases), BATCH)]
        nova = [self.nova.submit(_call, "filter_nova", "answer_batch", b) for b in batches]
        berth = [self.berth.submit(_call, "filter_berth", "answer_batch", b) for b in batches]
        out = []
        for n, b in zip(nova, berth, strict=True):
            out.extend(zip(b.result(), n.result(), strict=True))
        return out

    def weights(self, cases: list[dict], names: list[str]) -> list[tuple[dict, dict]]:
        nova = self.nova.submit(_call, "filter_nova", "weigh_batch", cases, names)
        berth = self.berth.submit(_call, "filter_berth", "weigh_batch", cases, names)
        return list(zip(berth.result(), nova.result(), strict=True))

    def close(self) -> None:
        self.nova.shutdown()
        self.berth.shutdown()


def _call(module: str, function: str, *args):
    import importlib

    return getattr(importlib.import_module(f"tools.nova_parity.{module}"), function)(*args)


def berth_passes(answer) -> bool:
    return answer is None


def nova_passes(answer: str) -> bool:
    return answer == "pass"


def signature(berth, nova: str) -> tuple[str, str]:
    """How each side answered, coarsely: what minimising must keep."""
    if berth is None:
        b = "passes"
    elif berth.startswith(("invalid:", "error:", "paths disagree:")):
        b = berth.split(":")[0] + (":" + berth.split(":")[1].strip() if berth.startswith(
            "invalid:") else "")
    else:
        b = "refuses"
    n = nova if nova in ("pass", "fail") else "raises " + nova.split(":")[1].strip()
    return b, n


def agrees(berth, nova: str) -> bool:
    bad = berth is not None and berth.startswith(("error:", "paths disagree:"))
    return not bad and berth_passes(berth) == nova_passes(nova)


def explain(sides: Sides, pending: list[tuple], classes: dict) -> None:
    """Put each disagreement in the class of the first rule whose cause is present
    and whose removal makes the two agree (or, when several causes are present
    and none alone explains it, of all of them removed together); the rest are
    unexplained (Berth bugs)."""
    work = []
    for case, i, b, n, cands in pending:
        tries = [[rule] for rule in cands] + ([list(cands)] if len(cands) > 1 else [])
        work.append((case, i, b, n, tries))
    while work:
        asked = []
        for entry in work:
            case, i, b, n, tries = entry
            if not tries:
                classes[case["filter"], BERTH_BUG, unexplained(case, b, n)].append(
                    (case, i, b, n))
                continue
            rules = tries[0]
            smaller, host = case, case["hosts"][i]
            for rule in rules:
                smaller = rule[4](smaller, host)
                host = smaller["hosts"][0]
            asked.append((entry, rules, smaller))
        work = []
        if not asked:
            break
        results = sides.answers([smaller for _, _, smaller in asked])
        for (entry, rules, _), (b2, n2) in zip(asked, results, strict=True):
            case, i, b, n, tries = entry
            if not agrees(b2[0], n2[0]):
                work.append((case, i, b, n, tries[1:]))
                continue
            label = " + ".join(rule[1] for rule in rules)
            category = DOCUMENTED if any(rule[2] == DOCUMENTED for rule in rules) \
                else rules[0][2]
            classes[case["filter"], category, label].append((case, i, b, n))


# -- minimising --------------------------------------------------------------------------

def _consistent(case: dict) -> dict:
    """The group's hosts follow the hosts left in the case."""
    group = case.get("group")
    if group:
        members = set(group["members"])
        group["hosts"] = sorted({h["host"] for h in case["hosts"]
                                 if members.intersection(h["instances"])})
    return case


def _smaller(case: dict):
    """Every case one step smaller than ``case``."""
    req = case["request"]
    host = case["hosts"][0]
    for key in list(req.get("flavor", {}).get("extra_specs", {})):
        c = copy.deepcopy(case)
        del c["request"]["flavor"]["extra_specs"][key]
        yield c
    for where in ("image", "scheduler_hints"):
        block = req.get(where) or {}
        items = block.get("properties", {}) if where == "image" else block
        for key in list(items):
            c = copy.deepcopy(case)
            target = c["request"][where]
            del (target["properties"] if where == "image" else target)[key]
            yield c
    for key in ("project_id",):
        if key in req:
            c = copy.deepcopy(case)
            del c["request"][key]
            yield c
    for field in ("stats", "metrics", "cpu_info"):
        for key in list(host[field]):
            c = copy.deepcopy(case)
            del c["hosts"][0][field][key]
            yield c
    for i, agg in enumerate(host["aggregates"]):
        c = copy.deepcopy(case)
        del c["hosts"][0]["aggregates"][i]
        yield c
        for key in list(agg):
            if len(agg) > 1:
                c = copy.deepcopy(case)
                del c["hosts"][0]["aggregates"][i][key]
                yield c
    for field, empty in (("supported_instances", []), ("instances", []), ("pci", [])):
        if host[field]:
            c = copy.deepcopy(case)
            c["hosts"][0][field] = empty
            yield _consistent(c)
    for group, opts in case.get("conf", {}).items():
        for name in list(opts):
            c = copy.deepcopy(case)
            del c["conf"][group][name]
            yield c


def minimise(sides: Sides, case: dict, index: int, sig: tuple) -> dict:
    """The smallest case found that still gives ``sig`` on its only host."""
    best = _consistent(dict(copy.deepcopy(case), hosts=[copy.deepcopy(case["hosts"][index])]))
    for _ in range(40):
        candidates = list(_smaller(best))
        if not candidates:
            break
        found = None
        for cand, (b, n) in zip(candidates, sides.answers(candidates), strict=True):
            if signature(b[0], n[0]) == sig:
                found = cand
                break
        if found is None:
            break
        best = found
    return best


def _show(case: dict) -> str:
    host = {k: v for k, v in case["hosts"][0].items()
            if v not in ({}, [], None) or k in ("host",)}
    for k in ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used", "local_gb_used",
              "failed_builds", "heartbeat_age", "num_io_ops", "num_instances", "disabled",
              "host_ip", "hypervisor_type", "hypervisor_version"):
        if k not in _RELEVANT.get(case["filter"], ()):
            host.pop(k, None)
    out = {"request": case["request"], "host": host}
    if case.get("conf"):
        out["conf"] = case["conf"]
    if case.get("group"):
        out["group"] = case["group"]
    return repr(out)


#: Host fields worth printing in an example, per filter (others are noise).
_RELEVANT = {
    "ComputeFilter": ("disabled", "heartbeat_age"),
    "ComputeCapabilitiesFilter": ("hypervisor_type", "hypervisor_version", "host_ip"),
    "ImagePropertiesFilter": ("hypervisor_version",),
    "JsonFilter": ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used",
                   "local_gb_used", "num_io_ops", "num_instances", "host_ip",
                   "hypervisor_type", "hypervisor_version"),
    "NumInstancesFilter": ("num_instances",), "AggregateNumInstancesFilter": ("num_instances",),
    "IoOpsFilter": ("num_io_ops",), "AggregateIoOpsFilter": ("num_io_ops",),
    "SimpleCIDRAffinityFilter": ("host_ip",),
}


# -- weighers ----------------------------------------------------------------------------

def top_order_agrees(berth: list[float] | None, nova: list[float], k: int = 10) -> bool:
    """Whether both weigh the same hosts heaviest, in the same order, up to ties:
    walking Nova's 10 heaviest, each must be among Berth's hosts of the same rank
    group (equal weights are interchangeable)."""
    n = len(nova)
    b = berth if berth is not None else [0.0] * n

    def ranks(weights):
        order = sorted(range(n), key=lambda i: -weights[i])
        rank, out, last = 0, {}, None
        for pos, i in enumerate(order):
            if last is None or weights[i] != last:
                rank, last = pos, weights[i]
            out[i] = rank
        return order, out

    nova_order, nova_rank = ranks(nova)
    berth_order, berth_rank = ranks(b)
    top = nova_order[:k]
    for i in top:
        for j in top:
            if nova_rank[i] < nova_rank[j] and not berth_rank[i] < berth_rank[j]:
                return False
            if nova_rank[i] == nova_rank[j] and berth_rank[i] != berth_rank[j]:
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200,
                        help="requests per filter (each with 6 hosts)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=1, help="minimised examples per class")
    parser.add_argument("--fleets", type=int, default=100, help="weigher fleets (30 hosts)")
    args, _ = parser.parse_known_args(argv)   # the other script's arguments too

    started = time.monotonic()
    cases = filter_cases.make_cases(args.seed, args.requests)
    sides = Sides()
    try:
        answers = sides.answers(cases)
        per_filter = collections.Counter()
        agree = collections.Counter()
        nova_raised = collections.Counter()
        classes: dict[tuple, list] = collections.defaultdict(list)
        pending: list[tuple] = []
        for case, (berth, nova) in zip(cases, answers, strict=True):
            for i, (b, n) in enumerate(zip(berth, nova, strict=True)):
                per_filter[case["filter"]] += 1
                nova_raised[case["filter"]] += n.startswith("raise")
                bad_berth = b is not None and b.startswith(("error:", "paths disagree:"))
                if berth_passes(b) == nova_passes(n) and not bad_berth:
                    agree[case["filter"]] += 1
                    continue
                if bad_berth:
                    classes[case["filter"], BERTH_BUG, f"Berth: {b[:120]}"].append(
                        (case, i, b, n))
                else:
                    pending.append((case, i, b, n, candidates(case, i, b, n)))
        explain(sides, pending, classes)
        total = sum(per_filter.values())
        print(f"{total} cases ({len(cases)} requests x {filter_cases.HOSTS_PER_CASE} hosts, "
              f"seed {args.seed}), {sum(agree.values())} agree, "
              f"{sum(nova_raised.values())} where Nova raised, "
              f"{time.monotonic() - started:.1f} s\n")
        print(f"{'filter':36s} {'cases':>6s} {'agree':>6s} {'differ':>6s}  Nova raised")
        for name in filter_cases.FILTERS:
            print(f"{name:36s} {per_filter[name]:6d} {agree[name]:6d} "
                  f"{per_filter[name] - agree[name]:6d}  {nova_raised[name]}")
        print("\nDisagreements by class:\n")
        print(f"{'filter':36s} {'category':22s} {'cases':>6s}  class")
        kinds = collections.Counter()
        for (name, category, label), found in sorted(classes.items(),
                                                     key=lambda kv: (kv[0][1], kv[0][0])):
            kinds[category] += 1
            print(f"{name:36s} {category:22s} {len(found):6d}  {label}")
        print("\nkinds per category: " + ", ".join(f"{c}: {n}" for c, n in
                                                 sorted(kinds.items())))
        print(f"Berth-bug kinds: {kinds[BERTH_BUG]}")
        if args.show:
            print("\nMinimised examples (one host):")
            for (name, category, label), found in sorted(classes.items()):
                for case, i, b, n in found[:args.show]:
                    small = minimise(sides, case, i, signature(b, n))
                    (sb,), (sn,) = sides.answers([small])[0]
                    print(f"\n[{category}] {name}: {label}\n  berth: {sb!r}\n  nova:  {sn!r}\n"
                          f"  case:  {_show(small)}")

        print("\nWeighers: the 10 heaviest of 30 hosts, in order (ties aside)")
        fleets = filter_cases.make_weigher_cases(args.seed, args.fleets)
        weighed = sides.weights(fleets, list(filter_cases.WEIGHERS))
        weigher_ok = True
        for name in filter_cases.WEIGHERS:
            same = sum(top_order_agrees(b[name], n[name]) for b, n in weighed)
            weigher_ok &= same == len(fleets)
            print(f"  {name:28s} {same}/{len(fleets)} fleets agree")
    finally:
        sides.close()
    print(f"\n{time.monotonic() - started:.1f} s in all")
    return 0 if kinds[BERTH_BUG] == 0 and weigher_ok else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["RULES", "main"]
