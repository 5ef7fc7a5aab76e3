"""``berth-manage``: operator commands (database, hosts, PCI, aggregates, NUMA, simulate,
capacity, allocations).

Exit status: 0 done, 1 failed (not found, conflict, database trouble), 2 invalid
input (bad file, bad argument, bad configuration). Expected errors print one
line on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from oslo_config import cfg
from oslo_db import exception as db_exc
from oslo_log import log as logging
from sqlalchemy import exc as sa_exc

from scheduler import exception
from scheduler.cmd import common

# Each module exposes register(subparsers) and adds one command group.
COMMAND_MODULES: tuple[str, ...] = (
    "scheduler.cmd.manage_db",
    "scheduler.cmd.manage_host",
    "scheduler.cmd.manage_pci",
    "scheduler.cmd.manage_aggregate",
    "scheduler.cmd.manage_numa",
    "scheduler.cmd.manage_simulate",
    "scheduler.cmd.manage_capacity",
    "scheduler.cmd.manage_allocations",
)


def _command_modules() -> list:
    return [importlib.import_module(name) for name in COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth-manage", description="Berth operator commands.")
    parser.add_argument("--config-file", action="append", metavar="PATH",
                        help="configuration file (repeatable); default: oslo.config's "
                             "search for berth.conf (~/.berth, /etc/berth, ...)")
    parser.add_argument("--config-dir", action="append", metavar="DIR",
                        help="directory of *.conf files read after --config-file")
    parser.add_argument("--debug", action="store_true",
                        help="log at DEBUG level on stderr")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for module in _command_modules():
        module.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``berth-manage`` command; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return int(e.code or 0)
    cfg.CONF.clear()  # a second main() in one process (tests) parses afresh
    logging.register_options(cfg.CONF)
    try:
        # A command may take --config-file after its name too (simulate does).
        common.load_config((args.config_file or []) +
                           (getattr(args, "command_config_file", None) or []) or None,
                           args.config_dir)
    except cfg.Error as e:
        common.error(f"configuration: {e}")
        return common.EXIT_INVALID
    if args.debug or cfg.CONF.debug:
        # Without --debug, Python's default handler shows warnings and errors only.
        cfg.CONF.set_override("debug", True)
        logging.setup(cfg.CONF, "berth")
        from scheduler import log_escape

        log_escape.install()
    try:
        return int(args.func(args) or 0)
    except exception.BerthError as e:
        common.error(str(e))
        return common.exit_code_for(e)
    except (db_exc.DBError, sa_exc.SQLAlchemyError) as e:
        common.error(f"database: {_first_line(e)}")
        return common.EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    finally:
        common.close_database()


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "inner_exception", None) or error)
    return text.splitlines()[0] if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
