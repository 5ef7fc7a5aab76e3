"""The migrated schema equals the models, on SQLite and on MariaDB."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from db import migration, models


def test_db_version_is_head_after_sync(any_db):
    assert migration.db_version(any_db) == migration.head_revision()


def test_sync_is_idempotent(any_db):
    assert migration.db_sync(any_db) == migration.head_revision()


def test_migrated_schema_matches_models(any_db):
    with any_db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, models.Base.metadata)
    assert diff == []


def test_empty_database_has_no_version(tmp_path):
    from db.api import Database

    db = Database(f"sqlite:///{tmp_path}/empty.sqlite")
    assert migration.db_version(db) is None
