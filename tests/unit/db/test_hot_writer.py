"""Claims run on kept-open connections: reused, replaced when old, and a lost
one costs a retry, never a claim."""
from __future__ import annotations

import sqlalchemy as sa

from db import claims, models
from db import hosts as db_hosts
from scheduler import fleet as fleet_mod
from tests import ledger

_cn = models.ComputeNode.__table__


def _one_host(db) -> int:
    db_hosts.import_fleet(db, fleet_mod.load_fleet(
        {"hosts": [{"host": "h1", "vcpus": 8, "memory_mb": 8192, "local_gb": 100}]}))
    with db.reader_connection() as conn:
        return conn.execute(sa.select(_cn.c.id)).scalar_one()


def _claim(db, node_id: int, uuid: str) -> claims.ClaimResult:
    return ledger.hold(db, node_id, uuid, {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1})


def _uuid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def _usage(db, node_id: int) -> tuple[int, int]:
    with db.reader_connection() as conn:
        running = conn.execute(sa.select(_cn.c.running_vms)
                               .where(_cn.c.id == node_id)).scalar_one()
    return ledger.used(db, node_id)["VCPU"], running


def test_claims_reuse_one_kept_connection(any_db):
    node = _one_host(any_db)
    seen = set()
    for i in range(5):
        _claim(any_db, node, _uuid(i))
        assert len(any_db._kept) == 1
        seen.add(id(any_db._kept[0]))
    assert len(seen) == 1
    assert _usage(any_db, node) == (5, 5)


def test_release_gives_back_what_the_rows_held_with_or_without_returning(any_db,
                                                                        monkeypatch):
    """A release reads what its allocation rows held as it deletes them (DELETE
    ... RETURNING), or with a SELECT first where the database has no RETURNING
    (MySQL): the same amounts are given back either way, and once."""
    node = _one_host(any_db)
    held = [("DISK_GB", 1), ("MEMORY_MB", 512), ("VCPU", 1)]
    for returning in (True, False):
        monkeypatch.setattr(any_db.engine.dialect, "delete_returning", returning)
        _claim(any_db, node, _uuid(1))
        _claim(any_db, node, _uuid(2))
        released = claims.release(any_db, _uuid(1))
        assert sorted((rc, n) for _p, rc, n in released.amounts) == held
        assert _usage(any_db, node) == (1, 1)
        assert claims.release(any_db, _uuid(1)) is None
        assert sorted((rc, n) for _p, rc, n in claims.release(any_db, _uuid(2)).amounts) \
            == held
        assert _usage(any_db, node) == (0, 0)
        with any_db.reader_connection() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(
                models.Allocation.__table__)).scalar_one() == 0


def test_kept_connection_is_replaced_after_the_recycle_time(sqlite_db):
    node = _one_host(sqlite_db)
    _claim(sqlite_db, node, _uuid(1))
    first = sqlite_db._kept[0]
    first.info["berth_born"] -= sqlite_db._recycle + 1      # pretend it is old
    _claim(sqlite_db, node, _uuid(2))
    assert sqlite_db._kept[0] is not first
    assert first.closed
    assert _usage(sqlite_db, node) == (2, 2)


def test_conflict_keeps_the_connection_and_changes_nothing(any_db):
    node = _one_host(any_db)
    _claim(any_db, node, _uuid(1))
    kept = any_db._kept[0]
    try:
        claims.claim(any_db, claims.ClaimRecord(
            instance_uuid=_uuid(2), node_id=node, seen_generation=-5,
            items=((ledger.root_provider(any_db, node), "VCPU", 1),)))
    except claims.ClaimConflict:
        pass
    else:
        raise AssertionError("a stale generation must conflict")
    assert any_db._kept[0] is kept and not kept.closed
    assert _usage(any_db, node) == (1, 1)


def test_claim_survives_a_killed_kept_connection(mariadb_db):
    node = _one_host(mariadb_db)
    _claim(mariadb_db, node, _uuid(1))
    victim = mariadb_db._kept[0]
    victim_id = victim.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
    victim.commit()
    with mariadb_db.writer_connection() as conn:
        conn.exec_driver_sql(f"KILL {int(victim_id)}")
    _claim(mariadb_db, node, _uuid(2))          # retried on a new connection
    assert _usage(mariadb_db, node) == (2, 2)
    assert mariadb_db._kept[0] is not victim
    with mariadb_db.reader_connection() as conn:
        uuids = set(conn.execute(sa.select(models.Consumer.__table__.c.uuid))
                    .scalars())
    assert uuids == {_uuid(1), _uuid(2)}


def test_a_lost_server_drops_every_kept_connection(mariadb_db, caplog):
    """The server restarted (here: every kept connection killed): the first
    claim that meets a dead one drops them all and retries on a fresh one,
    instead of spending its retries on each dead connection in turn; quietly
    (no pool ERROR for the dead ones' rollback)."""
    import logging

    caplog.set_level(logging.WARNING)
    node = _one_host(mariadb_db)
    held = [mariadb_db._take_kept() for _ in range(mariadb_db.KEPT_IDLE)]
    ids = [c.exec_driver_sql("SELECT CONNECTION_ID()").scalar() for c in held]
    for c in held:
        c.commit()
        mariadb_db._give_back(c)
    assert len(mariadb_db._kept) == mariadb_db.KEPT_IDLE
    with mariadb_db.writer_connection() as conn:
        for i in ids:
            conn.exec_driver_sql(f"KILL {int(i)}")
    _claim(mariadb_db, node, _uuid(1))
    assert _usage(mariadb_db, node) == (1, 1)
    assert len(mariadb_db._kept) == 1 and mariadb_db._kept[0] not in held
    assert all(c.closed for c in held)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_dispose_closes_kept_connections(sqlite_db):
    node = _one_host(sqlite_db)
    _claim(sqlite_db, node, _uuid(1))
    kept = sqlite_db._kept[0]
    sqlite_db.dispose()
    assert kept.closed and not sqlite_db._kept


def test_a_release_does_not_delete_the_spec_a_claim_is_using(mariadb_db, monkeypatch):
    """A claim that found its request's stored spec (an earlier instance's
    allocation refers to it) keeps it: a release of that last allocation,
    committed between the claim's check and its INSERT, would delete the spec
    as orphaned and fail the claim on the foreign key (an InternalError)."""
    import contextlib
    import threading

    db_hosts.import_fleet(mariadb_db, fleet_mod.load_fleet(
        {"hosts": [{"host": h, "vcpus": 8, "memory_mb": 8192, "local_gb": 100}
                   for h in ("h1", "h2")]}))
    with mariadb_db.reader_connection() as conn:
        node, other = conn.execute(sa.select(_cn.c.id).order_by(_cn.c.host)).scalars()
    # the request's first instance went to the other host
    first = ledger.hold(mariadb_db, other, _uuid(1), {"VCPU": 1},
                        request_spec='{"flavor": {"vcpus": 1}}')
    spec_id = first.request_spec_id
    assert spec_id is not None
    real_hot_writer = mariadb_db.hot_writer
    releaser = threading.Thread(target=claims.release, args=(mariadb_db, _uuid(1)))

    class Pausing:
        """The claim's connection: right after the spec check, the release runs
        (given a second to finish) before the claim goes on."""

        def __init__(self, conn):
            self._conn = conn

        def __getattr__(self, name):
            return getattr(self._conn, name)

        def exec_driver_sql(self, sql, *args, **kwargs):
            result = self._conn.exec_driver_sql(sql, *args, **kwargs)
            if sql == claims._SPEC_EXISTS.sql(self._conn.dialect) and not releaser.is_alive():
                releaser.start()
                releaser.join(1.0)
            return result

    @contextlib.contextmanager
    def hot_writer():
        with real_hot_writer() as conn:
            yield Pausing(conn) if threading.current_thread() is not releaser else conn

    monkeypatch.setattr(mariadb_db, "hot_writer", hot_writer)
    second = claims.claim(mariadb_db, claims.ClaimRecord(
        instance_uuid=_uuid(2), node_id=node, seen_generation=0,
        items=((ledger.root_provider(mariadb_db, node), "VCPU", 1),),
        request_spec_id=spec_id))
    releaser.join(30)
    assert not releaser.is_alive()
    assert second.request_spec_id == spec_id
    a, s = models.Consumer.__table__, models.RequestSpecRow.__table__
    with mariadb_db.reader_connection() as conn:
        assert conn.execute(sa.select(a.c.uuid, a.c.request_spec_id)).all() == \
            [(_uuid(2), spec_id)]
        assert conn.execute(sa.select(s.c.id)).scalars().all() == [spec_id]
    assert _usage(mariadb_db, node) == (1, 1) and _usage(mariadb_db, other) == (0, 0)


def test_a_pool_reset_on_a_dropped_connection_is_one_warning(caplog):
    """SQLAlchemy's ERROR with a traceback for a pooled connection the server
    dropped (its rollback on return fails in a database outage) becomes one
    WARNING line; another reset failure stays an ERROR with its traceback."""
    import logging

    import pymysql

    from db import api  # noqa: F401  (installs the filter)

    log = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
    caplog.set_level(logging.INFO)
    for error in (pymysql.err.OperationalError(2013, "Lost connection to MySQL server"),
                  pymysql.err.OperationalError(1205, "Lock wait timeout exceeded")):
        try:
            raise error
        except pymysql.err.OperationalError:
            log.error("Exception during reset or similar", exc_info=True)
    dropped, other = caplog.records[-2:]
    assert (dropped.levelno, dropped.exc_info) == (logging.WARNING, None)
    assert "Lost connection" in dropped.getMessage() and "discarded" in dropped.getMessage()
    assert other.levelno == logging.ERROR and other.exc_info is not None
