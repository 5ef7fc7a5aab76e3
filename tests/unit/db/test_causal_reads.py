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


def _statements_by_transaction(db):
    """Record the statements the engines run (the kept connections' too),
    grouped by transaction (a new group at each begin): what a Galera node
    would see."""
    groups: list[list[str]] = []

    def begin(conn):
        groups.append([])

    def execute(conn, cursor, statement, *args):
        if groups:
            groups[-1].append(" ".join(statement.split())[:60])

    engines = {db.engine, db.kept_engine}
    for engine in engines:
        sa.event.listen(engine, "begin", begin)
        sa.event.listen(engine, "before_cursor_execute", execute)

    def stop() -> None:
        for engine in engines:
            sa.event.remove(engine, "begin", begin)
            sa.event.remove(engine, "before_cursor_execute", execute)

    return groups, stop


def test_a_confirm_that_matches_fewer_decides_on_a_first_read(any_db):
    """Galera waits for the cluster's earlier commits only before the first
    read of a transaction (wsrep_sync_wait=1: not before an UPDATE, and not
    before any later statement). A confirm whose UPDATE matched fewer claims
    than named (a claim committed through another node, not applied here
    yet) decides in a new transaction that starts with the read: the read
    waits, the claim is found and confirmed. (Its read came second in the
    same transaction, did not wait, and 3 placements of a Galera run were
    answered "unknown", then lost and released.)"""
    from db import claims
    from tests.unit.db.test_hot_writer import _claim, _one_host, _uuid

    node = _one_host(any_db)
    _claim(any_db, node, _uuid(1))
    with any_db.hot_writer() as conn:
        conn.execute(sa.update(claims._alloc).values(pending=True))
    groups, stop = _statements_by_transaction(any_db)
    try:
        assert claims.confirm(any_db, [_uuid(1)]) == ([_uuid(1)], [])      # one statement
        assert [len(g) for g in groups] == [1] and groups[0][0].startswith("UPDATE")
        groups.clear()
        assert claims.confirm(any_db, [_uuid(1), _uuid(2)]) == ([], [_uuid(2)])
    finally:
        stop()
    assert len(groups) == 2 and groups[0][0].startswith("UPDATE")
    assert groups[1][0].startswith("SELECT") and len(groups[1]) == 1
    with any_db.reader_connection() as conn:      # all or none: still confirmed, once
        assert conn.execute(sa.select(claims._alloc.c.pending)).scalar_one() in (0, False)


def test_a_transient_refusal_of_the_setting_keeps_it(mariadb_db, monkeypatch):
    """Only a server that does not know the variable (MySQL) turns the causal
    wait off; any other error of the SET (a Galera node not ready yet:
    1047) fails this connection and the next one sets it again."""
    from oslo_db import exception as db_exc

    real = sa.engine.Connection.exec_driver_sql
    failures = []

    def not_ready_once(conn, statement, *args, **kw):
        if "wsrep_sync_wait" in statement and not failures:
            failures.append(statement)
            raise sa.exc.OperationalError(
                statement, {}, Exception(1047, "WSREP has not yet prepared node for "
                                               "application use"))
        return real(conn, statement, *args, **kw)

    monkeypatch.setattr(sa.engine.Connection, "exec_driver_sql", not_ready_once)
    mariadb_db.dispose()
    try:
        with mariadb_db.causal_reader() as conn:
            conn.execute(sa.text("SELECT 1"))
    except (sa.exc.DBAPIError, db_exc.DBError):
        pass
    assert failures and mariadb_db.sync_wait == 1
    with mariadb_db.causal_reader() as conn:
        assert conn.execute(sa.text("SELECT @@session.wsrep_sync_wait")).scalar() == 1
