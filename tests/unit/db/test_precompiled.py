"""Precompiled statements run what ``Connection.execute`` would run, and refuse
the statements whose execution needs more than their SQL and values."""
from __future__ import annotations

import datetime

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import claims, models
from db.precompiled import Precompiled

_alloc = models.Consumer.__table__
_specs = models.RequestSpecRow.__table__

#: A value of every kind the claim's statements write: dates with and without
#: microseconds, booleans, NULL, quotes and percent signs in text.
SPECS = [("{'%s': \"50%\"}", datetime.datetime(2026, 1, 2, 3, 4, 5, 678901)),
         ("plain", datetime.datetime(2026, 1, 2, 3, 4, 5))]


def _sent(db, run) -> list[tuple]:
    """(statement, parameters, executemany) of each cursor execution of ``run``
    (given a connection), rolled back."""
    sent = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, parameters, executemany))

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        with db.engine.connect() as conn:
            run(conn)
            conn.rollback()
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    return sent


def test_same_statement_and_parameters_as_execute(any_db):
    insert = Precompiled(sa.insert(_specs), ("spec", "created_at"))
    many = Precompiled(sa.insert(_specs), ("spec", "created_at"), many=True)
    take = claims._take_precompiled(2)      # repeated names and constants
    items = ((1, "VCPU", 2), (1, "MEMORY_MB", 512))
    flat = tuple(v for item in items for v in item)

    def core(conn):
        for spec, at in SPECS:
            conn.execute(insert.statement, {"spec": spec, "created_at": at})
        conn.execute(many.statement, [{"spec": s, "created_at": at} for s, at in SPECS])
        conn.execute(take.statement, claims._item_params(items))

    def precompiled(conn):
        for row in SPECS:
            insert.execute(conn, row)
        many.executemany(conn, SPECS)
        take.execute(conn, flat)

    assert _sent(any_db, precompiled) == _sent(any_db, core)


def test_rows_read_back_as_written_through_execute(any_db):
    insert = Precompiled(sa.insert(_specs), ("spec", "created_at"))
    with any_db.engine.connect() as conn:
        ids = [insert.execute(conn, row).lastrowid for row in SPECS]
        ids += [conn.execute(insert.statement, {"spec": spec, "created_at": at})
                .inserted_primary_key[0] for spec, at in SPECS]
        rows = conn.execute(sa.select(_specs.c.id, _specs.c.spec, _specs.c.created_at)
                            .order_by(_specs.c.id)).all()
        conn.rollback()
    assert [r.id for r in rows] == ids
    assert [(r.spec, r.created_at) for r in rows] == SPECS + SPECS


def test_a_value_its_type_refuses_is_refused_as_execute_refuses_it(any_db):
    insert = claims._INSERT_CONSUMER
    bad = tuple("yes" if name == "pending" else datetime.datetime(2026, 1, 2)
                if name == "created_at" else None for name in insert.names)

    def raised(run) -> type:
        with any_db.engine.connect() as conn, pytest.raises(Exception) as caught:
            run(conn)
        return type(caught.value)

    expected = raised(lambda conn: conn.execute(insert.statement,
                                                dict(zip(insert.names, bad, strict=True))))
    assert raised(lambda conn: insert.execute(conn, bad)) is expected
    assert raised(lambda conn: insert.executemany(conn, [bad])) is expected


def test_errors_are_translated_by_oslo_db(any_db):
    insert = Precompiled(sa.insert(_specs), ("id", "spec", "created_at"))
    with any_db.engine.connect() as conn:
        insert.execute(conn, (7, "a", datetime.datetime(2026, 1, 2)))
        with pytest.raises(db_exc.DBDuplicateEntry):
            insert.execute(conn, (7, "b", datetime.datetime(2026, 1, 2)))
        conn.rollback()


@pytest.mark.parametrize("statement, names, why", [
    (sa.insert(_specs), ("spec",), "Python-side defaults"),
    (sa.update(_specs).values(spec=sa.bindparam("b_spec")), ("b_spec", "b_id"), "not in it"),
    (sa.update(_specs).where(_specs.c.id == sa.bindparam("b_id"))
     .values(spec=sa.bindparam("b_spec")), ("b_spec",), "not given"),
    (sa.select(_specs.c.id).where(_specs.c.id == sa.bindparam("b_id")), ("b_id", "b_id"),
     "given twice"),
    (claims._CONFIRM, ("b_uuids",), "rendered at execution"),
    (sa.select(_specs.c.created_at), (), "converted as they are read"),
])
def test_statements_it_cannot_run_as_they_are_refused(sqlite_db, statement, names, why):
    with pytest.raises(ValueError, match=why):
        Precompiled(statement, names).sql(sqlite_db.engine.dialect)


def test_compiled_for_each_database(sqlite_db, mariadb_db):
    stmt = claims._SPEC_EXISTS
    sqlite_sql = stmt.sql(sqlite_db.engine.dialect)
    mariadb_sql = stmt.sql(mariadb_db.engine.dialect)
    assert "?" in sqlite_sql and "FOR" not in sqlite_sql
    assert "%(b_spec)s" in mariadb_sql and "SHARE" in mariadb_sql
    assert stmt.sql(sqlite_db.engine.dialect) == sqlite_sql


def test_a_name_the_dialect_escapes_is_refused(mariadb_db):
    """PyMySQL's pyformat spells ``b.id`` as ``b_id`` in the string: values handed
    over by the given name would miss it at execution, so it is refused here."""
    stmt = sa.select(_specs.c.id).where(_specs.c.id == sa.bindparam("b.id"))
    with pytest.raises(ValueError, match="escapes"):
        Precompiled(stmt, ("b.id",)).sql(mariadb_db.engine.dialect)
