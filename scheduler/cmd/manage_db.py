"""``berth-manage db sync`` and ``db version``: the schema, through alembic."""
from __future__ import annotations

import argparse
import sys

from db import migration
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("db", help="database schema")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sync = commands.add_parser("sync", help="create or upgrade the schema")
    sync.add_argument("--revision", default="head",
                      help="alembic revision to upgrade to (default: head)")
    sync.set_defaults(func=do_sync)

    version = commands.add_parser("version", help="print the applied schema revision")
    version.set_defaults(func=do_version)


def do_sync(args: argparse.Namespace) -> int:
    db = common.database(check_schema=False)
    revision = migration.db_sync(db, args.revision)
    print(f"database schema at revision {revision}")
    return common.EXIT_OK


def do_version(args: argparse.Namespace) -> int:
    db = common.database(check_schema=False)
    current, head = migration.db_version(db), migration.head_revision()
    print(current or "none")
    if current != head:
        print(f"the code needs revision {head}: run 'berth-manage db sync'", file=sys.stderr)
    return common.EXIT_OK
