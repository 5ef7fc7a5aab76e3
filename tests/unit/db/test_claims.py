"""The claim transaction: the statements it sends, what a conflict or a
duplicate leaves behind (nothing), and a deadlock in any of its statements
retried as a whole."""
from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa

from db import api as db_api
from db import claims, migration, models, precompiled
from db.api import Database
from db.precompiled import Precompiled
from tests import ledger, services

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901)
SPEC = '{"flavor": {"vcpus": 1}, "note": "50% of \'it\'"}'
TABLES = (models.Consumer, models.Allocation, models.NodeChange, models.RequestSpecRow,
          models.ProviderInventory)


def _uuid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


@pytest.fixture(params=["sqlite", "mariadb"])
def fresh_dbs(request, tmp_path):
    """A maker of fresh migrated databases of one kind."""
    made = []

    def make() -> Database:
        if request.param == "sqlite":
            db = Database(f"sqlite:///{tmp_path}/berth-{len(made)}.sqlite")
            made.append((db, None))
        else:
            services.require_mariadb()
            name, url = services.create_mariadb_database()
            db = Database(url)
            made.append((db, name))
        migration.db_sync(db)
        return db

    yield make
    for db, name in made:
        db.dispose()
        if name is not None:
            services.drop_mariadb_database(name)


def _through_execute(monkeypatch) -> None:
    """Run the precompiled statements through ``Connection.execute`` instead:
    the reference they must equal."""
    def execute(self, conn, values):
        return conn.execute(self.statement, dict(zip(self.names, values, strict=True)))

    def executemany(self, conn, rows):
        return conn.execute(self.statement, [dict(zip(self.names, row, strict=True))
                                             for row in rows])

    monkeypatch.setattr(Precompiled, "execute", execute)
    monkeypatch.setattr(Precompiled, "executemany", executemany)


def _claims_of_every_kind(db) -> tuple[list, list]:
    """Claims a scheduler makes (plain, pending with its own spec, a shared
    spec stored then found, NUMA, priorities), a stale generation, one that no
    longer fits and a duplicate: (what each answered, the statements sent)."""
    node = ledger.add_node(db, "h1")
    root = ledger.root_provider(db, node)
    sent = []
    for engine in {db.engine, db.kept_engine}:
        sa.event.listen(engine, "before_cursor_execute",
                        lambda conn, cur, statement, params, ctx, many:
                        sent.append((statement, params, many)))
    answers = []
    generation = 0
    spec_id = None
    records = [
        dict(items=((root, "VCPU", 1), (root, "MEMORY_MB", 512), (root, "DISK_GB", 1))),
        dict(items=((root, "VCPU", 1),), pending=True, request_spec=SPEC, share_spec=False,
             project_id="p", user_id="u"),
        dict(items=((root, "VCPU", 2), (root, "DISK_GB", 3)), request_spec=SPEC),
        dict(items=((root, "VCPU", 2),), request_spec=SPEC, share_spec=True),
        dict(items=((root, "MEMORY_MB", 1024),), numa_topology='{"cells": []}',
             numa_cells='{"c": 1}', priority=5, preemptible=True, instance_group="g"),
        dict(items=((root, "VCPU", 1),), seen=-1),                  # stale generation
        dict(items=((root, "VCPU", 100),)),                        # no longer fits
        dict(items=((root, "VCPU", 1),), uuid=1),                  # a duplicate
    ]
    for i, rec in enumerate(records, 1):
        if rec.get("share_spec"):
            rec["request_spec_id"] = spec_id
        seen = rec.pop("seen", generation)
        uuid = _uuid(rec.pop("uuid", i))
        try:
            result = claims.claim(db, claims.ClaimRecord(
                instance_uuid=uuid, node_id=node, seen_generation=seen, **rec))
        except (claims.ClaimConflict, claims.DuplicateAllocation) as e:
            answers.append((type(e).__name__, str(e)))
            continue
        answers.append(result)
        generation = result.generation
        spec_id = result.request_spec_id or spec_id
    return answers, sent


def _rows(db) -> dict:
    with db.reader_connection() as conn:
        return {t.__tablename__: conn.execute(sa.select(t.__table__).order_by(
            *t.__table__.primary_key.columns)).all() for t in TABLES}


def test_a_claim_sends_what_execute_would_send(fresh_dbs, monkeypatch):
    """Same answers and the same rows as with every statement through
    ``Connection.execute``, one after the other, on each kind of database; on
    SQLite (no batches) also the same statements with the same parameters
    after their types' processing."""
    monkeypatch.setattr(models, "utcnow", lambda: NOW)
    db = fresh_dbs()
    answers, sent = _claims_of_every_kind(db)
    with monkeypatch.context() as m:
        _through_execute(m)
        m.setattr(precompiled, "takes_batches", lambda conn: False)
        reference = fresh_dbs()
        expected_answers, expected_sent = _claims_of_every_kind(reference)
    assert [type(a).__name__ if isinstance(a, claims.ClaimResult) else a[0]
            for a in answers] == ["ClaimResult"] * 5 + \
        ["ClaimConflict", "ClaimConflict", "DuplicateAllocation"]
    assert answers == expected_answers
    if db.dialect == "sqlite":
        assert sent == expected_sent
    else:
        assert len(sent) < len(expected_sent)
    assert _rows(db) == _rows(reference)


def _counts(db, node: int) -> dict:
    with db.reader_connection() as conn:
        counts = {t.__tablename__: conn.execute(
            sa.select(sa.func.count()).select_from(t.__table__)).scalar_one()
            for t in TABLES}
        counts["generation"] = conn.execute(sa.select(models.ComputeNode.generation)
                                            .where(models.ComputeNode.id == node)).scalar_one()
    counts["used"] = ledger.used(db, node)
    return counts


def test_a_duplicate_raises_duplicate_allocation_and_writes_nothing(any_db):
    node = ledger.add_node(any_db, "h1")
    ledger.hold(any_db, node, _uuid(1), pending=True)
    before = _counts(any_db, node)
    with pytest.raises(claims.DuplicateAllocation, match=_uuid(1)):
        ledger.hold(any_db, node, _uuid(1))
    assert _counts(any_db, node) == before
    ledger.hold(any_db, node, _uuid(2))
    assert _counts(any_db, node)["generation"] == before["generation"] + 1


@pytest.mark.parametrize("why", ["generation", "capacity"])
def test_a_conflict_raises_claim_conflict_and_writes_nothing(any_db, why):
    node = ledger.add_node(any_db, "h1")
    ledger.hold(any_db, node, _uuid(1))
    before = _counts(any_db, node)
    root = ledger.root_provider(any_db, node)
    with pytest.raises(claims.ClaimConflict):
        claims.claim(any_db, claims.ClaimRecord(
            instance_uuid=_uuid(2), node_id=node,
            seen_generation=before["generation"] - (why == "generation"),
            items=((root, "VCPU", 1 if why == "generation" else 1000),
                   (root, "MEMORY_MB", 1))))
    assert _counts(any_db, node) == before


DEADLOCK = ("SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = "
            "'Deadlock found when trying to get lock; try restarting transaction'")


@pytest.mark.parametrize("event, table", [
    ("INSERT", "request_specs"), ("UPDATE", "inventories"), ("INSERT", "node_changes"),
    ("UPDATE", "compute_nodes"), ("INSERT", "consumers"), ("INSERT", "allocations")])
def test_a_deadlock_in_any_statement_retries_the_whole_claim(mariadb_db, monkeypatch,
                                                             event, table):
    """MariaDB's deadlock error, raised once by the statement that writes
    ``table`` (a trigger; its budget is in a table that no rollback restores):
    oslo.db still reads it as a deadlock, the claim runs again and is written
    once."""
    node = ledger.add_node(mariadb_db, "h1")
    root = ledger.root_provider(mariadb_db, node)
    with mariadb_db.writer_connection() as conn:
        conn.exec_driver_sql("CREATE TABLE fault_budget (n INT) ENGINE=MEMORY")
        conn.exec_driver_sql("INSERT INTO fault_budget VALUES (1)")
        conn.exec_driver_sql(
            f"CREATE TRIGGER deadlock_once BEFORE {event} ON {table} FOR EACH ROW "
            f"BEGIN IF (SELECT n FROM fault_budget) > 0 THEN "
            f"UPDATE fault_budget SET n = n - 1; {DEADLOCK}; END IF; END")
    retried = []
    monkeypatch.setattr(db_api, "retry_listeners", [retried.append])
    result = claims.claim(mariadb_db, claims.ClaimRecord(
        instance_uuid=_uuid(1), node_id=node, seen_generation=0,
        items=((root, "VCPU", 1), (root, "MEMORY_MB", 512), (root, "DISK_GB", 1)),
        request_spec=SPEC, share_spec=True))
    assert retried == ["claim"]
    assert result.generation == 1
    counts = _counts(mariadb_db, node)
    assert counts["used"] == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}
    assert {t: counts[t] for t in ("consumers", "allocations", "node_changes",
                                   "request_specs")} == \
        {"consumers": 1, "allocations": 3, "node_changes": 1, "request_specs": 1}
    with mariadb_db.reader_connection() as conn:
        assert conn.exec_driver_sql("SELECT n FROM fault_budget").scalar() == 0
