"""Cross-check Berth's filters against OpenStack Placement's allocation candidates.

    tox -e placement-parity [-- --requests 5000 --seed 1 --show 2]

Seeded random fleets (``cases.py``: root inventories with reserved, unit limits
and ratios, existing usage, child providers with VGPU, bandwidth and CUSTOM_
inventories, traits, aggregates, some isolated to traits) and seeded requests
(unnumbered and numbered groups, group policies, required and forbidden
traits, image traits, ``member_of``, baremetal flavors, pinned CPUs, amounts
at the unit limits) go into an in-process Placement (``placement_side.py``) and
into Berth (``berth_side.py``). For every request the set of root providers
Placement's ``GET /allocation_candidates`` offers is compared with the set of
hosts Berth's filters pass; a request both refuse as invalid agrees.

Every disagreement is put in one class (``classify.py``): a difference Berth
makes on purpose (documented in doc/source/reference/placement-differences.rst),
or ``unexplained``; the first ``--reduce`` of each class are reduced to a
minimal case (one node, as few providers, traits, aggregates, usages and extra
specs as still disagree the same way). Berth's
filters and the assignment its claim writes are also compared on every host
the filters pass.

Exit status: 0 when nothing is unexplained, the filters and the claim agree,
and parity is at least ``--target`` percent; 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
logging.disable(logging.WARNING)

from scheduler.exception import InvalidRequest  # noqa: E402
from tools.placement_parity import classify, reduce  # noqa: E402
from tools.placement_parity.berth_side import Berth  # noqa: E402
from tools.placement_parity.cases import make_cases  # noqa: E402
from tools.placement_parity.placement_side import Placement, Refused  # noqa: E402

INVALID = "invalid"


class Sides:
    """Both sides, loaded with one fleet at a time."""

    def __init__(self) -> None:
        self.placement = Placement()
        self.berth = Berth()
        self.fleet: dict | None = None

    def close(self) -> None:
        self.placement.close()
        self.berth.close()

    def load(self, fleet: dict) -> None:
        if fleet is not self.fleet:
            self.placement.load(fleet)
            self.berth.load(fleet)
            self.fleet = fleet

    def answers(self, fleet: dict, request: dict, **placement_kw):
        """(Placement's roots or INVALID, Berth's hosts or INVALID, hosts Berth's
        filters pass but its claim would not)."""
        self.load(fleet)
        try:
            theirs = self.placement.candidates(fleet, request, **placement_kw)
        except Refused:
            theirs = INVALID
        try:
            mine, unclaimable = self.berth.passes(request)
        except InvalidRequest:
            mine, unclaimable = INVALID, frozenset()
        return theirs, mine, unclaimable


def differing(theirs, mine) -> set[str] | str | None:
    """The nodes the sides disagree on (or INVALID when one refused the request)."""
    if theirs == mine:
        return None
    if INVALID in (theirs, mine):
        return INVALID
    return set(theirs) ^ set(mine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-fleet", type=int, default=40,
                        help="requests asked of each random fleet")
    parser.add_argument("--show", type=int, default=1,
                        help="minimal cases to print per class")
    parser.add_argument("--reduce", type=int, default=3,
                        help="disagreements to reduce per class at most (the others are "
                             "classified as found)")
    parser.add_argument("--target", type=float, default=99.9,
                        help="least agreement (%%) counting the documented differences "
                             "as agreement")
    parser.add_argument("--dump", help="write every disagreement (JSON lines) here")
    parser.add_argument("--jobs", type=int, default=2,
                        help="processes, each with its own Placement and Berth, sharing "
                             "the fleets")
    args = parser.parse_args(argv)

    started = time.monotonic()
    fleets = len(make_cases(args.seed, args.requests, args.per_fleet))
    shares = [(args, list(range(j, fleets, args.jobs))) for j in range(args.jobs)]
    if args.jobs == 1:
        results = [_work(shares[0])]
    else:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(_work, shares)
    counts: collections.Counter = collections.Counter()
    examples: dict[str, list] = collections.defaultdict(list)
    unclaimable_cases = []
    tally: collections.Counter = collections.Counter()
    for result in results:
        counts.update(result["counts"])
        tally.update(result["tally"])
        unclaimable_cases.extend(result["unclaimable"])
        for which, found in result["examples"].items():
            examples[which].extend(found)
    if args.dump:
        with open(args.dump, "w") as dump:
            for result in results:
                dump.writelines(result["dump"])
    n = tally["requests"]
    offered, both_invalid = tally["offered"], tally["both_invalid"]
    hosts_asked, hosts_offered = tally["hosts_asked"], tally["hosts_offered"]

    agree = counts[classify.AGREE]
    explained = sum(c for which, c in counts.items() if which in classify.ON_PURPOSE)
    unexplained = n - agree - explained
    print(f"{n} requests on {fleets} fleets (seed {args.seed}), "
          f"{time.monotonic() - started:.0f} s with {args.jobs} job(s); "
          f"Placement offered hosts for {offered}, both refused {both_invalid} as invalid; "
          f"Placement offered {hosts_offered} of {hosts_asked} (request, host) pairs")
    print()
    print(f"  {'count':>6}  class")
    print(f"  {agree:6d}  agree (same set of hosts, or both refuse the request)")
    for which, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if which != classify.AGREE:
            kind = "on purpose" if which in classify.ON_PURPOSE else "UNEXPLAINED"
            print(f"  {count:6d}  {kind}: {which}")
    print()
    print(f"parity: {agree}/{n} = {100 * agree / n:.2f} % identical; "
          f"{agree + explained}/{n} = {100 * (agree + explained) / n:.2f} % "
          f"counting the documented differences")
    print(f"filters pass but the claim finds no assignment: {len(unclaimable_cases)} requests")
    for fleet, request, hosts in unclaimable_cases[:args.show]:
        print(f"  hosts {hosts}\n    request {json.dumps(request)}\n    fleet {json.dumps(fleet)}")
    for which, found in sorted(examples.items()):
        print(f"\nminimal case(s), {which}:")
        for small in found[:args.show]:
            print(reduce.describe(small))
    ok = (unexplained == 0 and not unclaimable_cases
          and 100 * (agree + explained) / n >= args.target)
    return 0 if ok else 1


def _work(share) -> dict:
    """Ask both sides every request of some of the fleets (one process)."""
    args, indexes = share
    cases = make_cases(args.seed, args.requests, args.per_fleet)
    sides = Sides()
    counts: collections.Counter = collections.Counter()
    tally: collections.Counter = collections.Counter()
    examples: dict[str, list] = collections.defaultdict(list)
    unclaimable_cases: list = []
    dump: list[str] = []
    try:
        for index in indexes:
            fleet, requests = cases[index]
            for request in requests:
                tally["requests"] += 1
                theirs, mine, unclaimable = sides.answers(fleet, request)
                if unclaimable:
                    unclaimable_cases.append((fleet, request, sorted(unclaimable)))
                if theirs == INVALID and mine == INVALID:
                    tally["both_invalid"] += 1
                if theirs != INVALID:
                    tally["offered"] += bool(theirs)
                    tally["hosts_asked"] += len(fleet["nodes"])
                    tally["hosts_offered"] += len(theirs)
                diff = differing(theirs, mine)
                if diff is None:
                    counts[classify.AGREE] += 1
                    continue
                which = classify.classify(sides, fleet, request, theirs, mine)
                counts[which] += 1
                dump.append(json.dumps({"class": which, "fleet": fleet, "request": request,
                                        "placement": _show(theirs),
                                        "berth": _show(mine)}) + "\n")
                if len(examples[which]) < args.reduce:
                    examples[which].append(reduce.minimal(sides, fleet, request, diff))
                sides.load(fleet)
    finally:
        sides.close()
    return {"counts": counts, "tally": tally, "examples": dict(examples),
            "unclaimable": unclaimable_cases, "dump": dump}


def _show(answer):
    return answer if answer == INVALID else sorted(answer)


if __name__ == "__main__":
    sys.exit(main())
