"""A Galera node without quorum refuses a COMMIT with error 1180 ("... Not
connected to Primary Component"). Seen in tests/chaos/test_galera.py with a
node frozen: the confirm's COMMIT got it, the error reached the RPC layer as
an unexpected error and the caller got InternalError. It must read as a lost
connection: retried within ``[database] retry_budget``, then
ServiceUnavailable. The real MariaDB raises the same error number and text
here through SIGNAL, on a real connection (no Galera needed).
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import api as db_api
from tests import services

NOT_PRIMARY = ("SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1180, MESSAGE_TEXT = "
               "'Error while appending streaming replication fragment(provider status: "
               "Not connected to Primary Component)'")
OTHER_1180 = ("SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1180, "
              "MESSAGE_TEXT = 'Got error 28 during COMMIT'")


@pytest.fixture
def db():
    services.require_mariadb()
    name, url = services.create_mariadb_database()
    database = db_api.Database(url)
    try:
        yield database
    finally:
        database.dispose()
        services.drop_mariadb_database(name)


def test_not_primary_is_a_lost_connection_and_is_retried(db):
    tries = []

    @db_api.retry_on_deadlock
    def write():
        tries.append(1)
        with db.hot_writer() as conn:
            if len(tries) < 3:
                conn.exec_driver_sql(NOT_PRIMARY)
            return conn.execute(sa.text("SELECT 1")).scalar()

    assert write() == 1
    assert len(tries) == 3


def test_not_primary_raises_db_connection_error(db):
    with pytest.raises(db_exc.DBConnectionError):
        with db.hot_writer() as conn:
            conn.exec_driver_sql(NOT_PRIMARY)


def test_other_errors_of_that_number_stay_what_they_were(db):
    with pytest.raises(sa.exc.OperationalError) as caught:
        with db.hot_writer() as conn:
            conn.exec_driver_sql(OTHER_1180)
    assert not isinstance(caught.value, db_exc.DBConnectionError)
