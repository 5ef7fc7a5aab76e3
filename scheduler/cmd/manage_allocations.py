"""``berth-manage allocations list|release``: what the scheduler handed out.

``list --pending --older-than 300`` shows the claims nobody confirmed (the reaper
releases them after ``[scheduler] claim_ttl``); ``list --preempted`` the
instances preempted by requests of higher priority that the caller has not
deleted and released yet (their room was handed over already); ``release`` gives allocations
back by hand (the daemons' caches catch up on their next refresh).
"""
from __future__ import annotations

import argparse

from db import claims
from db.models import utcnow
from scheduler import exception
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("allocations", help="allocations (claims) held")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    lst = commands.add_parser("list", help="allocations, oldest first")
    lst.add_argument("--pending", action="store_true",
                     help="only claims not confirmed yet")
    lst.add_argument("--preempted", action="store_true",
                     help="only instances preempted and not released yet")
    lst.add_argument("--older-than", type=_seconds, metavar="SECONDS",
                     help="only allocations made more than SECONDS ago")
    lst.add_argument("--host", metavar="NAME", help="only on this host (or node)")
    common.add_json_flag(lst)
    lst.set_defaults(func=do_list)
    rel = commands.add_parser("release", help="release allocations by instance UUID "
                                              "(idempotent)")
    rel.add_argument("instance_uuids", nargs="+", metavar="UUID")
    rel.set_defaults(func=do_release)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value < 10 ** 9:
        raise argparse.ArgumentTypeError(f"expected 0 to 1e9 seconds, got {text!r}")
    return value


def _age(row: dict, now) -> str:
    seconds = int((now - row["created_at"]).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _state(row: dict) -> str:
    if row["consumer_type"] == "preempted":
        return "preempted"
    return "pending" if row["pending"] else "confirmed"


def do_list(args: argparse.Namespace) -> int:
    now = utcnow()
    rows = claims.list_allocations(common.database(), pending=args.pending,
                                   older_than=args.older_than, host=args.host, now=now,
                                   preempted=args.preempted)
    if args.json:
        common.print_json(rows)
        return common.EXIT_OK
    columns: list[common.Column] = [
        ("CONSUMER", "instance_uuid"), ("TYPE", "consumer_type"), ("HOST", "host"),
        ("NODE", "node"),
        ("RESOURCES", lambda r: " ".join(f"{rc}={n}" for rc, n in
                                         sorted(r["resources"].items())) or None),
        ("PCI", lambda r: len(r["pci_devices"]) or None), ("PROJECT", "project_id"),
        ("PRIORITY", "priority"),
        ("STATE", _state),
        ("AGE", lambda r: _age(r, now)),
    ]
    if args.preempted:
        columns.append(("PREEMPTED BY", "preempted_by"))
    common.print_table(rows, columns, empty="no allocations")
    return common.EXIT_OK


def do_release(args: argparse.Namespace) -> int:
    import uuid as uuidlib

    for i, value in enumerate(args.instance_uuids):
        try:
            uuidlib.UUID(value)
        except ValueError:
            raise exception.InvalidRequest(field=f"instance_uuids[{i}]",
                                           reason=f"not a UUID: {value!r}") from None
    db = common.database()
    for value in args.instance_uuids:
        released = claims.release(db, value)
        print(f"{value}: released from {released.host}" if released
              else f"{value}: held nothing")
    return common.EXIT_OK
