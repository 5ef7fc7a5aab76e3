"""Schema migrations: ``berth-manage db sync`` / ``db version``."""
from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from db.api import Database

_MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def _alembic_config(connection=None) -> Config:
    cfg = Config(os.path.join(_MIGRATIONS, "alembic.ini"))
    cfg.set_main_option("script_location", _MIGRATIONS)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def db_sync(db: Database, revision: str = "head") -> str | None:
    """Upgrade the schema to ``revision``; returns the revision now applied.

    On SQLite, foreign keys are not enforced while migrating: a table changed
    there is copied, dropped and renamed, which the rows of the tables that
    refer to it would refuse (they still refer to the same ids after)."""
    sqlite = db.dialect == "sqlite"
    with db.engine.connect() as conn:
        # on the DB-API connection: the pragma counts only outside a transaction
        raw = conn.connection.dbapi_connection if sqlite else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                command.upgrade(_alembic_config(conn), revision)
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys = ON")
    return db_version(db)


def db_version(db: Database) -> str | None:
    """The applied revision, or None for an empty database."""
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()
