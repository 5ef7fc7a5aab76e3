"""``berth-manage simulate FILE.yaml [--json]``: try a scenario on a throwaway DB.

Operators use it to check a config change against their fleet before rolling
it out. Exit status 0 when every ``expect`` holds, 1 when one does not, 2 when
the scenario file itself is malformed.
"""
from __future__ import annotations

import argparse
import sys

from oslo_config import cfg

from scheduler import exception, simulate
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="run a scenario (fleet + requests + expectations) in-process")
    parser.add_argument("files", nargs="+", metavar="FILE.yaml", help="scenario file(s)")
    common.add_json_flag(parser)
    parser.set_defaults(func=do_simulate)


def do_simulate(args: argparse.Namespace) -> int:
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
