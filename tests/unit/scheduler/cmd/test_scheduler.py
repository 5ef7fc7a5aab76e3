"""berth-scheduler's start-up: the backend read before oslo, the schema check."""
from __future__ import annotations

import pytest
from oslo_config import cfg

from db import migration
from db.api import Database
from scheduler import service
from scheduler.cmd import scheduler as cmd


def test_backend_defaults_to_eventlet(tmp_path):
    assert cmd.early_backend(["--config-file", str(tmp_path / "missing.conf")]) == "eventlet"


def test_backend_from_files_and_dirs_later_wins(tmp_path):
    a = tmp_path / "a.conf"
    a.write_text("[DEFAULT]\nconcurrency_backend = threading\n")
    b = tmp_path / "b.conf"
    b.write_text("[DEFAULT]\nconcurrency_backend = eventlet\n[scheduler]\nworkers = 2\n")
    d = tmp_path / "berth.conf.d"
    d.mkdir()
    (d / "10-x.conf").write_text("[DEFAULT]\nconcurrency_backend = threading\n")
    assert cmd.early_backend([f"--config-file={a}"]) == "threading"
    assert cmd.early_backend(["--config-file", str(a), "--config-file", str(b)]) == "eventlet"
    assert cmd.early_backend(["--config-file", str(b), "--config-dir", str(d)]) == "threading"


def test_unparseable_file_is_left_to_oslo_config(tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("no section header\n")
    assert cmd.early_backend(["--config-file", str(bad)]) == "eventlet"


@pytest.fixture
def db_conf(tmp_path):
    url = f"sqlite:///{tmp_path}/s.sqlite"
    cfg.CONF.set_override("connection", url, group="database")
    yield url
    cfg.CONF.clear_override("connection", group="database")
    cfg.CONF.clear_override("auto_db_sync", group="scheduler")


def test_sqlite_is_migrated_at_start_by_default(db_conf):
    service.prepare_database(cfg.CONF)
    db = Database(db_conf)
    assert migration.db_version(db) == migration.head_revision()
    db.dispose()


def test_never_refuses_an_outdated_schema(db_conf):
    cfg.CONF.set_override("auto_db_sync", "never", group="scheduler")
    with pytest.raises(SystemExit, match="berth-manage db sync"):
        service.prepare_database(cfg.CONF)
