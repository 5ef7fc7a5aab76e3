"""What every ``berth-manage`` command shares: config, the database, output, errors.

A command module exposes ``register(subparsers)``; each command sets
``func=handler`` with ``parser.set_defaults``. ``main`` has loaded the
configuration before it calls ``handler(args) -> int | None``; a handler gets
its database with :func:`database` and prints with :func:`print_table` /
:func:`print_json`. Handlers raise Berth's typed errors (``InvalidRequest``,
``NotFound``, ``Conflict``); ``main`` turns them into one line on stderr and an
exit code (:func:`exit_code_for`).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from oslo_config import cfg

from db import migration
from db.api import Database
from db.limits import escape_controls
from scheduler import exception

EXIT_OK = 0
EXIT_FAILURE = 1  # the request was fine but could not be done (not found, conflict)
EXIT_INVALID = 2  # the input was wrong (bad file, bad argument, bad config)

_db: Database | None = None


def load_config(config_files: Sequence[str] | None = None,
                config_dirs: Sequence[str] | None = None,
                conf: cfg.ConfigOpts = cfg.CONF) -> None:
    """Parse Berth's configuration (no files given: oslo.config's default search)."""
    args: list[str] = []
    for path in config_files or ():
        args += ["--config-file", path]
    for path in config_dirs or ():
        args += ["--config-dir", path]
    conf(args, project="berth")


def database(check_schema: bool = True) -> Database:
    """The database named by ``[database] connection`` (one per process).

    With ``check_schema`` an unmigrated or outdated schema is a clear error
    instead of an SQL one.
    """
    global _db
    if _db is None:
        _db = Database.from_conf(cfg.CONF)
    if check_schema:
        current, head = migration.db_version(_db), migration.head_revision()
        if current != head:
            raise SchemaNotCurrent(
                f"the database schema is at revision {current or 'none'}, this Berth "
                f"needs {head}: run 'berth-manage db sync'", reason="schema not current")
    return _db


def close_database() -> None:
    global _db
    if _db is not None:
        _db.dispose()
        _db = None


class SchemaNotCurrent(exception.Conflict):
    """The database schema is not the one this code needs."""


def exit_code_for(error: BaseException) -> int:
    """2 for invalid input, 1 for everything else that went wrong."""
    return EXIT_INVALID if isinstance(error, exception.InvalidRequest) else EXIT_FAILURE


def printable(value: Any) -> str:
    """``value`` as text a terminal shows as it is: control, line-separator and bidi
    characters (a terminal escape stored in a project id, a newline in a name)
    written as escapes."""
    return escape_controls(str(value))


def error(message: str) -> None:
    """One line on stderr, prefixed with the program name."""
    print(f"berth-manage: error: {printable(message)}", file=sys.stderr)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_primitive"):
        return value.to_primitive()
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


Column = tuple[str, str | Callable[[dict], Any]]


def _cell(value: Any) -> str:
    return printable(_text(value))


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def print_table(rows: Iterable[dict], columns: Sequence[Column], empty: str = "") -> None:
    """Left-aligned columns under upper-case headers; ``empty`` when there are no rows."""
    table = [[_cell(key(row) if callable(key) else row.get(key)) for _h, key in columns]
             for row in rows]
    if not table:
        if empty:
            print(empty)
        return
    headers = [h for h, _k in columns]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
    for line in [headers] + table:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def print_fields(data: dict, keys: Sequence[str] | None = None) -> None:
    """``key: value`` lines for one object; nested values as compact JSON."""
    keys = list(keys) if keys is not None else list(data)
    width = max((len(k) for k in keys), default=0)
    for key in keys:
        value = data.get(key)
        text = (json.dumps(value, default=_json_default, sort_keys=True)
                if isinstance(value, (dict, list)) and value else _cell(value))
        print(f"{printable(key).ljust(width)}  {printable(text)}")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
