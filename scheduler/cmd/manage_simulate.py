"""``berth-manage simulate``: try scenarios or a recorded trace on a throwaway DB.

* ``simulate FILE.yaml ... [--json]``: run scenarios (fleet + steps + expectations).
  Exit status 0 when every ``expect`` holds, 1 when one does not, 2 when a
  scenario file itself is malformed.
* ``simulate --fleet FLEET.yaml --trace REQUESTS.jsonl [--config-file X] [--seed N]
  [--json]``: replay a trace and report placements, refusals, utilisation and
  fragmentation (``scheduler.replay``).
* ``simulate --fleet F --trace T --compare A.conf B.conf``: replay the same trace
  under two configurations, each in its own process (options cannot leak from
  one run into the other), with the same seed, and report what changes.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from oslo_config import cfg

from scheduler import exception, fleet, replay, simulate
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="run scenarios, or replay a request trace on a fleet, in-process")
    parser.add_argument("files", nargs="*", metavar="FILE.yaml", help="scenario file(s)")
    parser.add_argument("--fleet", metavar="FLEET.yaml",
                        help="fleet file to replay a trace on (with --trace)")
    parser.add_argument("--trace", metavar="REQUESTS.jsonl",
                        help="one request spec per line as select_destinations takes it, "
                             "or {\"release\": UUID}")
    parser.add_argument("--config-file", action="append", metavar="PATH",
                        dest="command_config_file",
                        help="configuration file to replay under (repeatable; read after "
                             "berth-manage's own --config-file)")
    parser.add_argument("--compare", nargs=2, metavar=("A.conf", "B.conf"),
                        help="replay the trace under each configuration (each file "
                             "alone, in its own process) and report the differences")
    parser.add_argument("--allow-preemption", action="store_true",
                        help="with --trace: requests that fit nowhere may preempt "
                             "instances of lower priority (berth:priority, "
                             "berth:preemptible); the report counts the victims")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random picks (host_subset_size, shuffling); "
                             "default 0, so runs are repeatable")
    common.add_json_flag(parser)
    parser.set_defaults(func=do_simulate)


def do_simulate(args: argparse.Namespace) -> int:
    if args.fleet or args.trace or args.compare:
        if args.files:
            raise exception.InvalidRequest(
                "simulate: give scenario files or --fleet/--trace, not both",
                field="files", reason="scenario files and a trace given")
        if not (args.fleet and args.trace):
            missing = "--trace" if args.fleet else "--fleet"
            raise exception.InvalidRequest(f"simulate: {missing} is required to replay",
                                           field=missing, reason="required")
        return do_compare(args) if args.compare else do_replay(args)
    if not args.files:
        raise exception.InvalidRequest(
            "simulate: give scenario files, or --fleet and --trace", field="files",
            reason="required")
    return do_scenarios(args)


def do_scenarios(args: argparse.Namespace) -> int:
    worst = common.EXIT_OK
    results = []
    for path in args.files:
        try:
            data = simulate.load_scenario(path)
            result = simulate.run_scenario(data, cfg.CONF)
        except (OSError, simulate.ScenarioError) as e:
            common.error(f"{path}: {e}")
            return common.EXIT_INVALID
        except exception.InvalidRequest as e:
            common.error(f"{path}: {e}")
            return common.EXIT_INVALID
        results.append((path, result))
        if not result.ok:
            worst = common.EXIT_FAILURE
    if args.json:
        common.print_json([{"file": p, **r.to_primitive()} for p, r in results])
    else:
        for path, result in results:
            print(f"== {path}")
            print(simulate.format_table(result))
    sys.stdout.flush()
    return worst


def do_replay(args: argparse.Namespace) -> int:
    fleet_data = fleet.load_fleet_file(args.fleet)
    lines = replay.load_trace(args.trace)
    try:
        report = replay.replay(fleet_data, lines, cfg.CONF, seed=args.seed,
                               allow_preemption=args.allow_preemption)
    except replay.InvalidTrace as e:
        raise replay.InvalidTrace(f"{args.trace}: {e}", field=e.field,
                                  reason=e.reason) from None
    if args.json:
        common.print_json(report)
    else:
        print(replay.format_report(report))
    return common.EXIT_OK


def _start_replay(conf_path: str, args: argparse.Namespace) -> subprocess.Popen:
    """One replay in a fresh process configured by ``conf_path`` alone."""
    cmd = [sys.executable, "-m", "scheduler.cmd.manage", "--config-file", conf_path,
           "simulate", "--fleet", args.fleet, "--trace", args.trace,
           "--seed", str(args.seed), "--json"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report_of(conf_path: str, proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        detail = err.strip().splitlines()[-1] if err.strip() else \
            f"exit status {proc.returncode}"
        raise exception.InvalidRequest(f"{conf_path}: replay failed: {detail}",
                                       field="compare", reason=detail)
    return json.loads(out)


def do_compare(args: argparse.Namespace) -> int:
    # Validate the inputs here first: a bad file is one clear error, not two.
    fleet.load_fleet_file(args.fleet)
    replay.load_trace(args.trace)
    a_path, b_path = args.compare
    # Both at once: separate processes, so nothing is shared but the files read.
    procs = [_start_replay(a_path, args), _start_replay(b_path, args)]
    try:
        a, b = _report_of(a_path, procs[0]), _report_of(b_path, procs[1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    diff = replay.compare(a, b)
    if args.json:
        common.print_json({"a": {"config": a_path, **a}, "b": {"config": b_path, **b},
                           "changes": diff})
    else:
        print(replay.format_comparison(diff, (a_path, b_path)))
    return common.EXIT_OK
