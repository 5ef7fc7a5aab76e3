"""The connections whose reads decide answers carry Galera's read-your-writes
setting (``[database] wsrep_sync_wait``); harmless where wsrep is off, and
dropped with one WARNING where the server refuses it."""
from __future__ import annotations

import logging

import sqlalchemy as sa


def test_causal_connections_carry_wsrep_sync_wait(mariadb_db):
    assert mariadb_db.sync_wait == 1            # the default
    with mariadb_db.causal_reader() as conn:
        assert conn.execute(sa.text("SELECT @@session.wsrep_sync_wait")).scalar() == 1
    with mariadb_db.hot_writer() as conn:
        assert conn.execute(sa.text("SELECT @@session.wsrep_sync_wait")).scalar() == 1
    with mariadb_db.reader_connection() as conn:    # the pool's: not changed
        assert conn.execute(sa.text("SELECT @@session.wsrep_sync_wait")).scalar() == 0


def test_a_server_that_refuses_the_setting_is_read_without_it(mariadb_db, caplog):
    mariadb_db.sync_wait = 99                   # refused as an unknown variable would be
    mariadb_db.dispose()
    with caplog.at_level(logging.WARNING, logger="db.api"):
        with mariadb_db.causal_reader() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        with mariadb_db.causal_reader() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    assert mariadb_db.sync_wait == 0
    assert [r.getMessage() for r in caplog.records].count(
        next(r.getMessage() for r in caplog.records if "wsrep_sync_wait" in r.getMessage())) == 1


def test_sqlite_reads_are_causal_as_they_are(sqlite_db):
    assert sqlite_db.sync_wait == 0
    with sqlite_db.causal_reader() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
