"""``berth-manage aggregate ...``: host aggregates and availability zones."""
from __future__ import annotations

import argparse

from db import aggregates as db_aggregates
from scheduler import exception
from scheduler.cmd import common

AGGREGATE_COLUMNS: list[common.Column] = [
    ("NAME", "name"),
    ("AZ", "availability_zone"),
    ("HOSTS", "hosts"),
    ("METADATA", lambda a: {k: v for k, v in a["metadata"].items()
                            if k != db_aggregates.AZ_KEY}),
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("aggregate", help="host aggregates and availability zones")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    lst = commands.add_parser("list", help="aggregates with zone, hosts and metadata")
    common.add_json_flag(lst)
    lst.set_defaults(func=do_list)

    show = commands.add_parser("show", help="one aggregate")
    show.add_argument("name")
    common.add_json_flag(show)
    show.set_defaults(func=do_show)

    create = commands.add_parser("create", help="create an aggregate")
    create.add_argument("name")
    create.add_argument("--zone", metavar="AZ", help="make it availability zone AZ")
    create.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="metadata (repeatable)")
    create.add_argument("--host", action="append", default=[], dest="hosts",
                        metavar="HOST", help="member host (repeatable)")
    common.add_json_flag(create)
    create.set_defaults(func=do_create)

    update = commands.add_parser("update", help="rename an aggregate or change its zone")
    update.add_argument("name")
    update.add_argument("--name", dest="new_name", metavar="NEW_NAME")
    zone = update.add_mutually_exclusive_group()
    zone.add_argument("--zone", metavar="AZ", help="set the availability zone")
    zone.add_argument("--no-zone", action="store_true", help="remove the availability zone")
    common.add_json_flag(update)
    update.set_defaults(func=do_update)

    delete = commands.add_parser("delete", help="delete an empty aggregate")
    delete.add_argument("name")
    delete.set_defaults(func=do_delete)

    for command, func, help_text in (
            ("add-host", do_add_host,
             "add hosts (one transaction: all of them, or none if one is unknown, "
             "a member already or would be in a second zone)"),
            ("remove-host", do_remove_host,
             "remove hosts (one transaction: all of them, or none if one is not a "
             "member)")):
        p = commands.add_parser(command, help=help_text)
        p.add_argument("name", help="aggregate name")
        p.add_argument("hosts", nargs="+", metavar="HOST")
        common.add_json_flag(p)
        p.set_defaults(func=func)

    meta = commands.add_parser("set-metadata",
                               help="set metadata: KEY=VALUE sets, KEY alone unsets")
    meta.add_argument("name")
    meta.add_argument("items", nargs="+", metavar="KEY[=VALUE]")
    common.add_json_flag(meta)
    meta.set_defaults(func=do_set_metadata)


def _parse_items(items: list[str], allow_unset: bool) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key or (not sep and not allow_unset):
            raise exception.InvalidRequest(
                f"metadata: expected KEY=VALUE, got {item!r}", field="metadata",
                reason="expected KEY=VALUE")
        out[key] = value if sep else None
    return out


def _print(aggregate: dict, as_json: bool) -> None:
    if as_json:
        common.print_json(aggregate)
    else:
        common.print_fields(aggregate, ["name", "uuid", "availability_zone", "hosts",
                                        "metadata", "created_at", "updated_at"])


def do_list(args: argparse.Namespace) -> int:
    aggregates = db_aggregates.list_aggregates(common.database())
    if args.json:
        common.print_json(aggregates)
    else:
        common.print_table(aggregates, AGGREGATE_COLUMNS, empty="no aggregates")
    return common.EXIT_OK


def do_show(args: argparse.Namespace) -> int:
    _print(db_aggregates.get_aggregate(common.database(), args.name), args.json)
    return common.EXIT_OK


def do_create(args: argparse.Namespace) -> int:
    agg = db_aggregates.create_aggregate(
        common.database(), args.name, availability_zone=args.zone,
        metadata=_parse_items(args.property, allow_unset=False), hosts=args.hosts)
    _print(agg, args.json)
    return common.EXIT_OK


def do_update(args: argparse.Namespace) -> int:
    kwargs = {}
    if args.zone is not None:
        kwargs["availability_zone"] = args.zone
    elif args.no_zone:
        kwargs["availability_zone"] = None
    agg = db_aggregates.update_aggregate(common.database(), args.name,
                                         new_name=args.new_name, **kwargs)
    _print(agg, args.json)
    return common.EXIT_OK


def do_delete(args: argparse.Namespace) -> int:
    db_aggregates.delete_aggregate(common.database(), args.name)
    print(f"deleted aggregate {args.name}")
    return common.EXIT_OK


def do_add_host(args: argparse.Namespace) -> int:
    _print(db_aggregates.add_hosts(common.database(), args.name, args.hosts), args.json)
    return common.EXIT_OK


def do_remove_host(args: argparse.Namespace) -> int:
    _print(db_aggregates.remove_hosts(common.database(), args.name, args.hosts), args.json)
    return common.EXIT_OK


def do_set_metadata(args: argparse.Namespace) -> int:
    metadata = _parse_items(args.items, allow_unset=True)
    _print(db_aggregates.set_metadata(common.database(), args.name, metadata), args.json)
    return common.EXIT_OK
