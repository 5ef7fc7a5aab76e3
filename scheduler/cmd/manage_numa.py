"""``berth-manage numa fit``: would this guest topology fit this host? JSON lines in,
JSON lines out (format in ``numa.tool``); no database, no scheduler needed."""
from __future__ import annotations

import argparse
import sys

from numa import tool


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``numa`` command group (``numa fit``) to ``berth-manage``."""
    numa_parser = subparsers.add_parser("numa", help="NUMA fitting tools")
    numa_commands = numa_parser.add_subparsers(dest="numa_command", metavar="COMMAND")
    numa_commands.required = True
    fit = numa_commands.add_parser(
        "fit",
        help="fit guest NUMA topologies to hosts: JSON lines on stdin, one answer per line",
        description="Read one JSON case per line ({host, instance, limits, strategy, "
                    "isolate_on_smt_hosts, id}) and write one JSON answer per line ({fits, "
                    "cells, reason|error, id}). A malformed line gets an error answer and "
                    "the next line is read. \"limits\": {\"cpu_allocation_ratio\": x, "
                    "\"ram_allocation_ratio\": y} applies those ratios to the cells' usage; "
                    "\"limits\": null (or no key) means no limits object: guests with shared "
                    "vCPUs are checked only against each cell's size (CPUs and memory), not "
                    "its usage, while pinned vCPUs still need free pCPUs and free memory. "
                    "\"isolate_on_smt_hosts\": reserve-siblings (default) or refuse, as the "
                    "[numa] option.")
    fit.add_argument("file", nargs="?", default="-",
                     help="read cases from FILE instead of stdin")
    fit.set_defaults(func=fit_command)


def fit_command(args: argparse.Namespace) -> int:
    """Run the cases; exit 0 even when some were malformed (each has its own answer)."""
    if args.file == "-":
        tool.run(sys.stdin, sys.stdout)
        return 0
    try:
        with open(args.file, encoding="utf-8") as cases:
            tool.run(cases, sys.stdout)
    except OSError as exc:
        print(f"berth-manage numa fit: {exc}", file=sys.stderr)
        return 2
    return 0
