"""Instructions per plain placement: the worker's own CPU of one request.

The daemon's per-placement CPU beyond the claim transaction and the broker is
the scheduling cycle: filters, weighers, the pick, the recheck under the
host's lock, taking the claim into the cache (its row rewritten) and the
selection. This script counts the instructions of exactly that with
valgrind's callgrind, on the fleet of ``tools/bench/instructions.py build DIR``
(the realistic 10,000-host fleet), with the default filters and weighers (as
the daemon runs them):

``run DIR``
    the measured process (``measure`` runs it under callgrind): builds
    ``HostManager`` and ``FilterScheduler`` on a scratch copy of
    ``DIR/fleet.sqlite``, warms up, then places ``--requests`` one-instance
    plain requests in turn (``--flavors``: ``plain`` is the daemon benchmark's
    1 vCPU / 512 MB / 1 GB each time, ``mixed`` cycles through three plain
    flavors). Each claim is taken into the cache as a written claim would be
    (the next request sees it) but not written to the database, and the
    per-request refresh is left out: both are database work, measured by
    ``tools/bench/claim_cpu.py`` and the daemon profile. Only the placements
    are counted (``callgrind_control -z`` / ``-d``). Writes
    ``DIR/cycle.json``: the chosen host and weight (hex) of every request, to
    check that two builds made the same placements with the same weights.

``measure DIR``
    runs ``run`` under callgrind and prints instructions per placement; the
    dump is ``DIR/callgrind.out.cycle`` (``callgrind_annotate --inclusive=yes``).

Compare two trees by measuring in each (the same ``DIR``; copy ``cycle.json``
aside between them)::

    nice -n 19 .tox/py3/bin/python tools/bench/cycle_instructions.py measure /tmp/ins
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

from oslo_config import cfg  # noqa: E402

from tools.bench import instructions  # noqa: E402
from tools.bench import replay as bench_replay  # noqa: E402
from tools.bench.daemon import Plugins  # noqa: E402

DUMP_NAME = "callgrind.out.cycle"
FLAVORS = {
    "plain": [{"vcpus": 1, "memory_mb": 512, "root_gb": 1}],
    "mixed": [{"vcpus": 1, "memory_mb": 512, "root_gb": 1},
              {"vcpus": 2, "memory_mb": 4096, "root_gb": 20},
              {"vcpus": 4, "memory_mb": 8192, "root_gb": 40}],
}


def run(workdir: str, requests: int, flavors: str, under_callgrind: bool) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    from db.api import Database
    from scheduler.filter_scheduler import DEFAULT_FILTERS, DEFAULT_WEIGHERS, FilterScheduler
    from scheduler.host_manager import HostManager

    scratch = os.path.join(workdir, f"cycle-{os.getpid()}.sqlite")
    instructions._remove(scratch)
    shutil.copyfile(os.path.join(workdir, "fleet.sqlite"), scratch)
    bench_replay.configure(cfg.CONF, Plugins(list(DEFAULT_FILTERS), list(DEFAULT_WEIGHERS),
                                             [], []))
    db = Database(f"sqlite:///{scratch}")
    hm = HostManager(db, cfg.CONF)
    sched = FilterScheduler(hm, cfg.CONF, seed=1)
    sched.warm_up()

    def persist_in_cache_only(req, instance_uuid):
        def persist(host, consumed, victims=None):
            return dataclasses.replace(consumed, generation=host.generation + 1)
        return persist

    sched._persister = persist_in_cache_only
    hm.refresh = lambda: None
    specs = [sched.parse_request({"num_instances": 1, "project_id": "p1", "user_id": "u1",
                                  "flavor": {"name": f"f{i}", "ephemeral_gb": 0, "swap": 0,
                                             "extra_specs": {}, **flavor}})
             for i, flavor in enumerate(FLAVORS[flavors])]
    gc.collect()
    gc.freeze()
    if under_callgrind:
        instructions._callgrind("-z")
    t0 = time.perf_counter()
    placed = []
    for i in range(requests):
        sel = sched.select_destinations(specs[i % len(specs)])[0][0]
        placed.append([sel.host, float(sel.weight).hex()])
    wall = time.perf_counter() - t0
    if under_callgrind:
        _dump()
    db.dispose()
    instructions._remove(scratch)
    with open(os.path.join(workdir, "cycle.json"), "w") as f:
        json.dump({"requests": requests, "flavors": flavors, "wall_s": wall,
                   "placed": placed}, f)


def _dump() -> None:
    args = ["callgrind_control", "-d", "cycle", str(os.getpid())]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or "OK." not in proc.stdout:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stdout} {proc.stderr}")


def measure(workdir: str, requests: int, flavors: str) -> None:
    workdir = os.path.abspath(workdir)
    instructions.run_under_callgrind(
        __file__, ["run", workdir, "--requests", str(requests), "--flavors", flavors,
                   "--under-callgrind"], workdir, DUMP_NAME, keep=(instructions.DUMP_NAME,))
    ir = instructions._summary(os.path.join(workdir, DUMP_NAME))
    print(f"{ir:,} instructions over {requests} {flavors} placements: "
          f"{ir / requests / 1e6:.3f} M per placement; dump {workdir}/{DUMP_NAME}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("run", "the measured process (under callgrind)"),
                       ("measure", "run under callgrind, print instructions per placement")):
        s = sub.add_parser(name, help=text)
        s.add_argument("workdir")
        s.add_argument("--requests", type=int, default=200)
        s.add_argument("--flavors", choices=sorted(FLAVORS), default="plain")
        if name == "run":
            s.add_argument("--under-callgrind", action="store_true")
    args = p.parse_args(argv)
    if args.command == "run":
        run(args.workdir, args.requests, args.flavors, args.under_callgrind)
    else:
        measure(args.workdir, args.requests, args.flavors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
