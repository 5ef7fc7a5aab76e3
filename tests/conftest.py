"""Shared fixtures: a migrated database on SQLite (unit) or MariaDB (functional)."""
from __future__ import annotations

import pytest

from db import migration
from db.api import Database
from tests import services


@pytest.fixture(autouse=True)
def _node_change_journal_written():
    """Every test starts with this process writing the node change journal
    (the module's default): a test that starts a scheduler service or a
    bench replay turns it off as a one-worker daemon does, process-wide."""
    from db import node_changes

    node_changes.write(True)
    yield
    node_changes.write(True)


@pytest.fixture
def sqlite_db(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/berth.sqlite")
    migration.db_sync(db)
    yield db
    db.dispose()


@pytest.fixture
def mariadb_db():
    name, url = services.create_mariadb_database()
    db = Database(url)
    migration.db_sync(db)
    try:
        yield db
    finally:
        db.dispose()
        services.drop_mariadb_database(name)


@pytest.fixture(params=["sqlite", "mariadb"])
def any_db(request, tmp_path):
    """The same test on SQLite and on MariaDB."""
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path}/berth.sqlite")
        migration.db_sync(db)
        yield db
        db.dispose()
        return
    name, url = services.create_mariadb_database()
    db = Database(url)
    migration.db_sync(db)
    try:
        yield db
    finally:
        db.dispose()
        services.drop_mariadb_database(name)


@pytest.fixture
def scheduler_options():
    """``override(name=value, ...)``: set ``[scheduler]`` options of this
    process for one test."""
    from oslo_config import cfg

    names = []

    def override(**values):
        for name, value in values.items():
            cfg.CONF.set_override(name, value, group="scheduler")
            names.append(name)

    yield override
    for name in names:
        cfg.CONF.clear_override(name, group="scheduler")
