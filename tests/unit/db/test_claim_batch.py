"""A claim's writes as one batch on MariaDB: one round trip, the same
answers as one statement after the other, and a connection that is reusable
or dropped after any failure, never left with results unread."""
from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import api as db_api
from db import claims, models, precompiled
from tests import ledger

_alloc = models.Consumer.__table__
_items = models.Allocation.__table__
_cn = models.ComputeNode.__table__
TABLES = (models.Consumer, models.Allocation, models.NodeChange, models.ProviderInventory,
          models.ComputeNode)


def _uuid(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


def _rows(db) -> dict:
    with db.reader_connection() as conn:
        return {t.__tablename__: conn.execute(sa.select(t.__table__).order_by(
            *t.__table__.primary_key.columns)).all() for t in TABLES}


def _generation(db, node: int) -> int:
    with db.reader_connection() as conn:
        return conn.execute(sa.select(_cn.c.generation).where(_cn.c.id == node)).scalar_one()


def _record(db, node: int, uuid: str, **fields) -> claims.ClaimRecord:
    root = ledger.root_provider(db, node)
    fields.setdefault("seen_generation", _generation(db, node))
    fields.setdefault("items", ((root, "VCPU", 1), (root, "MEMORY_MB", 512),
                                (root, "DISK_GB", 1)))
    return claims.ClaimRecord(instance_uuid=uuid, node_id=node, **fields)


class _Sent:
    """The statement strings the kept connections send (one per round trip)."""

    def __init__(self, db) -> None:
        self.engine = db.kept_engine
        self.strings: list[str] = []

    def _record(self, conn, cursor, statement, *args) -> None:
        self.strings.append(statement)

    def __enter__(self) -> _Sent:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)


def test_a_plain_claim_is_one_round_trip_in_the_order_of_the_transaction(mariadb_db):
    """Inventories first, the journal, the node's compare-and-swap, then the
    INSERTs (their foreign key checks lock the node row shared): one string."""
    node = ledger.add_node(mariadb_db, "h1")
    ledger.hold(mariadb_db, node, _uuid(1))            # the kept connection is open
    with _Sent(mariadb_db) as sent:
        claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(2), pending=True,
                                         request_spec="{}", share_spec=False))
    assert len(sent.strings) == 1
    heads = [" ".join(s.split()[:3]) for s in sent.strings[0].split(";\n")]
    assert heads == ["UPDATE inventories SET", "INSERT INTO node_changes",
                     "UPDATE compute_nodes SET", "INSERT INTO consumers",
                     "INSERT INTO allocations"]
    with mariadb_db.reader_connection() as conn:
        consumer = conn.execute(sa.select(_alloc.c.id).where(_alloc.c.uuid == _uuid(2))
                                ).scalar_one()
        assert sorted(conn.execute(sa.select(_items.c.resource_class)
                                   .where(_items.c.consumer_id == consumer)).scalars()) == \
            ["DISK_GB", "MEMORY_MB", "VCPU"]


def test_values_are_bound_by_the_driver(mariadb_db):
    """Quotes, semicolons, percent signs and backslashes in values are data."""
    node = ledger.add_node(mariadb_db, "h1")
    odd = "g'; DROP TABLE consumers; -- 50% \\' \""
    claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(1), instance_group="g';--",
                                     project_id="%s", user_id="%(x)s",
                                     request_spec=odd, share_spec=False))
    with mariadb_db.reader_connection() as conn:
        assert conn.execute(sa.select(_alloc.c.instance_group, _alloc.c.project_id,
                                      _alloc.c.user_id, _alloc.c.request_spec)).one() == \
            ("g';--", "%s", "%(x)s", odd)


def test_only_the_kept_connections_take_several_statements(mariadb_db):
    with mariadb_db.hot_writer() as conn:
        assert conn.exec_driver_sql("SELECT 1; SELECT 2").scalar() == 1
    with mariadb_db.writer_connection() as conn, pytest.raises(db_exc.DBError):
        conn.exec_driver_sql("SELECT 1; SELECT 2")


def test_a_batch_whose_results_were_not_read_fails(mariadb_db):
    """On an engine that does not take batches its results are not read: the
    batch fails rather than let the claim decide on counts it does not have."""
    statement = precompiled.Precompiled(sa.select(sa.literal(1)), ())
    with mariadb_db.writer_connection() as conn, \
            pytest.raises(RuntimeError, match="does not take batches"):
        precompiled.execute_batch(conn, [(statement, ())], [])


@pytest.mark.parametrize("conflict", ["capacity", "generation"])
def test_a_conflict_before_a_duplicate_is_the_conflict(any_db, conflict):
    """The batch runs on after a row count that says conflict; the consumer's
    duplicate found later does not change the answer (one statement after the
    other, the INSERT is never reached)."""
    node = ledger.add_node(any_db, "h1")
    ledger.hold(any_db, node, _uuid(1))
    before = _rows(any_db)
    root = ledger.root_provider(any_db, node)
    rec = _record(any_db, node, _uuid(1),
                  seen_generation=_generation(any_db, node) - (conflict == "generation"),
                  items=((root, "VCPU", 1 if conflict == "generation" else 10**6),))
    with pytest.raises(claims.ClaimConflict) as caught:
        claims.claim(any_db, rec)
    assert type(caught.value) is claims.ClaimConflict
    assert ("no longer fit" in str(caught.value)) == (conflict == "capacity")
    assert _rows(any_db) == before
    ledger.hold(any_db, node, _uuid(2))
    assert _generation(any_db, node) == before["compute_nodes"][0].generation + 1


def test_a_failed_batch_leaves_nothing_unread(mariadb_db):
    """A statement's error ends the batch: the connection takes the next
    statement (its earlier results read, nothing of the batch pending); the
    counts read are those before the failing statement."""
    node = ledger.add_node(mariadb_db, "h1")
    ledger.hold(mariadb_db, node, _uuid(1))
    dup = _record(mariadb_db, node, _uuid(1))
    row = (dup.instance_uuid, "instance", dup.instance_uuid, node, None, None, None, None,
           None, None, None, False, models.utcnow(), None, None, 0, False)
    root = ledger.root_provider(mariadb_db, node)
    counts: list[int] = []
    with mariadb_db.hot_writer() as conn:
        with pytest.raises(db_exc.DBDuplicateEntry):
            precompiled.execute_batch(conn, [
                (claims._take_precompiled(1), (root, "VCPU", 1)),
                (claims._INSERT_CONSUMER, row),      # a duplicate
                (claims._take_precompiled(1), (root, "VCPU", 1))], counts)
        assert counts == [1]
        assert conn.exec_driver_sql("SELECT 42").scalar() == 42
        conn.rollback()
    assert ledger.used(mariadb_db, node)["VCPU"] == 2      # the first hold's


def test_a_duplicate_in_the_batch_then_claims_go_on(mariadb_db):
    node = ledger.add_node(mariadb_db, "h1")
    ledger.hold(mariadb_db, node, _uuid(1))
    before = _rows(mariadb_db)
    with pytest.raises(claims.DuplicateAllocation):
        claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(1)))
    assert _rows(mariadb_db) == before
    for i in (2, 3):
        claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(i)))
    assert ledger.used(mariadb_db, node)["VCPU"] == 2 + 2


@pytest.mark.parametrize("fits", [True, False])
def test_a_connection_lost_mid_batch_is_dropped(mariadb_db, monkeypatch, fits):
    """The kept connection is killed while the server runs the batch (a
    trigger makes its consumer INSERT wait, once): the connection is
    dropped with the other kept ones (even when the batch's inventories
    UPDATE had already said it no longer fits); the claim runs again on a new
    one and is written once, or is the conflict it finds again."""
    node = ledger.add_node(mariadb_db, "h1")
    ledger.hold(mariadb_db, node, _uuid(1))
    victim = mariadb_db._kept[0]
    victim_id = victim.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
    victim.commit()
    with mariadb_db.writer_connection() as conn:
        conn.exec_driver_sql("CREATE TABLE fault_budget (n INT) ENGINE=MEMORY")
        conn.exec_driver_sql("INSERT INTO fault_budget VALUES (1)")
        conn.exec_driver_sql(
            "CREATE TRIGGER wait_once BEFORE INSERT ON consumers FOR EACH ROW "
            "BEGIN IF (SELECT n FROM fault_budget) > 0 THEN "
            "UPDATE fault_budget SET n = n - 1; DO SLEEP(5); END IF; END")

    def kill() -> None:
        import time

        time.sleep(0.5)
        with mariadb_db.writer_connection() as conn:
            conn.exec_driver_sql(f"KILL {int(victim_id)}")

    retried = []
    monkeypatch.setattr(db_api, "retry_listeners", [retried.append])
    killer = threading.Thread(target=kill)
    root = ledger.root_provider(mariadb_db, node)
    rec = _record(mariadb_db, node, _uuid(2)) if fits else \
        _record(mariadb_db, node, _uuid(2), items=((root, "VCPU", 10**6),))
    killer.start()
    try:
        if fits:
            claims.claim(mariadb_db, rec)
        else:
            with pytest.raises(claims.ClaimConflict, match="no longer fit"):
                claims.claim(mariadb_db, rec)
    finally:
        killer.join()
    assert retried == ["claim"]
    assert victim.invalidated or victim.closed
    assert victim not in mariadb_db._kept
    assert ledger.used(mariadb_db, node)["VCPU"] == 2 + fits
    with mariadb_db.reader_connection() as conn:
        assert sorted(conn.execute(sa.select(_alloc.c.uuid)).scalars()) == \
            [_uuid(1), _uuid(2)][:1 + fits]
        assert conn.execute(sa.select(sa.func.count()).select_from(_items)).scalar() == \
            3 + 3 * fits
    ledger.hold(mariadb_db, node, _uuid(3))


def test_a_claim_that_reads_first_batches_its_writes(mariadb_db):
    """The branches that read first (here: a shared spec stored, then found)
    send the writes from the inventories' UPDATE on as one batch too."""
    node = ledger.add_node(mariadb_db, "h1")
    first = claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(1), request_spec="{}"))
    with _Sent(mariadb_db) as sent:
        second = claims.claim(mariadb_db, _record(mariadb_db, node, _uuid(2),
                                                  request_spec_id=first.request_spec_id))
    assert second.request_spec_id == first.request_spec_id
    assert [s.split()[0] for s in sent.strings] == ["SELECT", "UPDATE"]
    assert sent.strings[1].count(";\n") == 4


def test_a_release_writes_the_node_and_its_journal_in_one_round_trip(mariadb_db):
    node = ledger.add_node(mariadb_db, "h1")
    ledger.hold(mariadb_db, node, _uuid(1))
    generation = _generation(mariadb_db, node)
    with _Sent(mariadb_db) as sent:
        released = claims.release(mariadb_db, _uuid(1))
    assert released.generation == generation + 1 == _generation(mariadb_db, node)
    heads = [[" ".join(s.split()[:3]) for s in string.split(";\n")]
             for string in sent.strings]
    assert heads[-2:] == [["UPDATE compute_nodes SET", "INSERT INTO node_changes"],
                          ["INSERT INTO transitions"]]
    assert ledger.used(mariadb_db, node)["VCPU"] == 0
    with mariadb_db.reader_connection() as conn:
        assert conn.execute(sa.select(models.NodeChange.generation)
                            .order_by(models.NodeChange.id)).scalars().all() == \
            [generation, generation + 1]
