"""``berth-manage capacity FLAVOR.json [--per-az] [--per-aggregate] [--preempting] [--json]``.

How many more instances of each given request fit right now on the fleet in the
configured database, with the configured filters (``scheduler.capacity``).
Nothing is claimed. Exit status 0, or 2 when the file is not a valid request.
"""
from __future__ import annotations

import argparse
import json

from oslo_config import cfg

from scheduler import capacity, exception
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "capacity", help="how many more instances of a request fit now (claims nothing)")
    parser.add_argument("file", metavar="FLAVOR.json",
                        help="a request spec as select_destinations takes it, a bare "
                             "flavor, or a list of either")
    parser.add_argument("--per-az", action="store_true",
                        help="also count per availability zone")
    parser.add_argument("--per-aggregate", action="store_true",
                        help="also count per aggregate")
    parser.add_argument("--preempting", action="store_true",
                        help="also count as if every instance the request may preempt "
                             "(lower priority, preemptible) were gone")
    common.add_json_flag(parser)
    parser.set_defaults(func=do_capacity)


def _read(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise exception.InvalidRequest(f"{path}: cannot read: {e.strerror}", field="file",
                                       reason=str(e.strerror)) from None
    except json.JSONDecodeError as e:
        raise exception.InvalidRequest(f"{path}: not JSON (line {e.lineno}): {e.msg}",
                                       field="file", reason="not JSON") from None


def do_capacity(args: argparse.Namespace) -> int:
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    data = _read(args.file)
    scheduler = FilterScheduler(HostManager(common.database(), cfg.CONF), cfg.CONF)
    try:
        requests = capacity.parse_requests(data, scheduler.parse_request)
        rows = capacity.capacity(scheduler, requests, per_az=args.per_az,
                                 per_aggregate=args.per_aggregate,
                                 preempting=args.preempting)
    finally:
        scheduler.host_manager.close()
    if args.json:
        common.print_json(rows)
    else:
        print(capacity.format_capacity(rows))
    return common.EXIT_OK
