"""Cross-check ``berth-manage numa fit`` against Nova 34's ``numa_fit_instance_to_host``.

    tox -e nova-parity [-- --cases 3000 --seed 1 --show 3]

Seeded random cases (``cases.py``) go through Berth's tool (``numa.tool.fit_case``)
with ``isolate_on_smt_hosts`` set to ``refuse`` and to ``reserve-siblings``, and
through Nova (``nova_side.py``). Every case where the two say different things about
whether the guest fits is put in one class:

- ``policy option``: Berth with ``reserve-siblings`` fits an isolate guest on SMT
  cells that Nova refuses (Berth with ``refuse`` agrees with Nova);
- ``Nova defect: reused guest cells``: Nova's answer differs from Nova's own per-cell
  check run on fresh guest cells per permutation, and Berth agrees with the latter
  (``numa_fit_instance_to_host`` keeps the page size it resolved and the host cell id
  it set on a guest cell after a failed permutation, and its fit cache is keyed on
  that changed id);
- ``Berth: RAM ratio below 1 for dedicated guests``: Berth keeps a cell's
  ``memory_mb * ram_allocation_ratio`` (below 1) out of reach of guests with only
  pinned vCPUs too; Nova checks their memory against the free memory only (Berth with
  a ratio of 1 agrees with Nova);
- ``unexplained``: anything else (printed; the run fails when there is any).

Where both fit, Berth's fit is applied to Nova's host with Nova's
``numa_usage_from_instance_numa`` (which refuses pins on used or unknown CPUs) and
the usage is compared with Berth's ``numa.usage.apply_usage`` (CPUs, memory, pages).

Exit status: 0 when every difference is explained, the usages agree and agreement with
``refuse`` is at least ``--target`` percent; 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from numa.tool import fit_case  # noqa: E402
from numa.topology import FittedTopology, HostTopology  # noqa: E402
from numa.usage import apply_usage  # noqa: E402
from tools.nova_parity import nova_side  # noqa: E402
from tools.nova_parity.cases import make_cases  # noqa: E402

MODES = ("refuse", "reserve-siblings")
AGREE = "agree"
POLICY = "policy option (isolate on SMT cells, reserve-siblings)"
NOVA_DEFECT = "Nova defect: reused guest cells across permutations"
RATIO_BELOW_1 = "Berth: RAM ratio below 1 holds back memory from dedicated guests too"
UNEXPLAINED = "unexplained"


def berth_usage(case: dict, answer: dict) -> dict:
    host = HostTopology.from_primitive(case["host"])
    fitted = FittedTopology.from_primitive({
        "cells": [dict(placed, memory_mb=guest["memory_mb"], shared_cpus=len(guest["cpuset"]),
                       cpuset_isolated=_isolated(host, guest, placed))
                  for guest, placed in zip(case["instance"]["cells"], answer["cells"],
                                           strict=True)],
        "emulator_threads_policy": case["instance"].get("emulator_threads_policy")})
    used = apply_usage(host, fitted)
    return {cell.id: (cell.cpu_usage, cell.memory_usage, cell.pinned_cpus,
                      {p.size_kb: p.used for p in cell.mempages}) for cell in used.cells}


def _isolated(host: HostTopology, guest: dict, placed: dict) -> list[int]:
    """The idle siblings of an isolate guest's cores (the tool does not print them)."""
    if guest.get("cpu_thread_policy") != "isolate":
        return []
    cell = host.cell(placed["host_cell_id"])
    taken = set(placed["cpu_pinning"].values()) | set(placed["cpuset_reserved"])
    idle = {c for core in cell.cores() if taken & set(core) for c in core} - taken
    return sorted(idle)


def classify(case: dict, berth: dict[str, bool], nova: bool, fresh: bool, mode: str) -> str:
    mine = berth[mode]
    if mine == nova:
        return AGREE
    if fresh != nova and mine == fresh:
        return NOVA_DEFECT
    if mode == "reserve-siblings" and berth["refuse"] == nova and _isolate(case):
        return POLICY
    if not mine and nova and _ratio_below_1_only(case, mode):
        return RATIO_BELOW_1
    return UNEXPLAINED


def _isolate(case: dict) -> bool:
    return any(c.get("cpu_thread_policy") == "isolate" for c in case["instance"]["cells"])


def _ratio_below_1_only(case: dict, mode: str) -> bool:
    """A dedicated guest, a RAM ratio below 1, and Berth fits it with a ratio of 1."""
    limits = case["limits"]
    if limits is None or limits.get("ram_allocation_ratio", 1.0) >= 1.0:
        return False
    if any(c.get("cpuset") for c in case["instance"]["cells"]):
        return False
    at_one = dict(case, limits=dict(limits, ram_allocation_ratio=1.0),
                  isolate_on_smt_hosts=mode)
    return fit_case(at_one)["fits"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=2,
                        help="example cases to print per class of difference")
    parser.add_argument("--target", type=float, default=99.0,
                        help="least agreement (%%) with isolate_on_smt_hosts=refuse")
    args, _ = parser.parse_known_args(argv)   # the other script's arguments too

    started = time.monotonic()
    cases = make_cases(args.seed, args.cases)
    classes = {mode: collections.Counter() for mode in MODES}
    examples: dict[tuple[str, str], list] = collections.defaultdict(list)
    usage_mismatch = []
    both_fit = nova_fit_count = 0
    for case in cases:
        answers = {mode: fit_case(dict(case, isolate_on_smt_hosts=mode)) for mode in MODES}
        for answer in answers.values():
            if "error" in answer:
                raise SystemExit(f"case {case['id']}: Berth refused the input: {answer}")
        berth = {mode: answers[mode]["fits"] for mode in MODES}
        nova = nova_side.nova_fits(case)
        fresh = nova_side.fresh_fits(case)
        nova_fit_count += nova
        for mode in MODES:
            which = classify(case, berth, nova, fresh, mode)
            classes[mode][which] += 1
            if which != AGREE and len(examples[mode, which]) < args.show:
                examples[mode, which].append((case, berth[mode], nova, fresh,
                                              answers[mode].get("reason")))
        if berth["refuse"] and nova:
            both_fit += 1
            try:
                theirs = nova_side.usage_after(case, answers["refuse"])
            except Exception as exc:  # Nova refuses the pinning: that is a finding
                usage_mismatch.append((case, f"{type(exc).__name__}: {exc}"))
                continue
            ours = berth_usage(case, answers["refuse"])
            if theirs != ours:
                usage_mismatch.append((case, {"nova": theirs, "berth": ours}))

    n = len(cases)
    print(f"{n} cases (seed {args.seed}), Nova fits {nova_fit_count}, "
          f"{time.monotonic() - started:.1f} s")
    ok = True
    for mode in MODES:
        agree = classes[mode][AGREE]
        print(f"\nisolate_on_smt_hosts = {mode}: agreement {agree}/{n} = {100 * agree / n:.2f} %")
        for which, count in classes[mode].most_common():
            if which != AGREE:
                print(f"  {count:5d}  {which}")
        if classes[mode][UNEXPLAINED]:
            ok = False
        if mode == "refuse" and 100 * agree / n < args.target:
            print(f"  below the target of {args.target} %")
            ok = False
    print(f"\nusage after Berth's fit, Nova vs Berth ({both_fit} cases where both fit): "
          f"{both_fit - len(usage_mismatch)} equal, {len(usage_mismatch)} differ")
    if usage_mismatch:
        ok = False
        for case, detail in usage_mismatch[:args.show]:
            print(f"  case {case['id']}: {detail}\n    {case}")
    for (mode, which), found in sorted(examples.items()):
        print(f"\nexamples, {mode}, {which}:")
        for case, mine, nova, fresh, reason in found:
            print(f"  case {case['id']}: berth {mine} ({reason}), nova {nova}, "
                  f"nova on fresh cells {fresh}\n    {case}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
