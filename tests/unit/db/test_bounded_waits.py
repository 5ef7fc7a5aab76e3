"""A database that does not answer costs a caller bounded time: connections give
up after [database] connect_timeout, retried writes after [database]
retry_budget (issue 17: replies took up to 19 s during an outage)."""
from __future__ import annotations

import socket
import time
import uuid

import pytest
from oslo_config import cfg
from oslo_db import exception as db_exc

from db import api as db_api
from db import claims


@pytest.fixture
def black_hole():
    """A port that accepts TCP connections and never says a word (a stopped or
    hung server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def waits():
    names = {"connect_timeout": 1, "read_timeout": 1, "retry_budget": 2.0}
    for name, value in names.items():
        cfg.CONF.set_override(name, value, group="database")
    yield
    for name in names:
        cfg.CONF.clear_override(name, group="database")


def test_a_hung_database_fails_a_write_within_the_budget(black_hole, waits):
    db = db_api.Database(f"mysql+pymysql://root@127.0.0.1:{black_hole}/berth",
                         max_retries=1, retry_interval=0)
    tries = []
    db_api.retry_listeners.append(tries.append)
    started = time.monotonic()
    try:
        with pytest.raises(db_exc.DBConnectionError):
            claims.confirm(db, [str(uuid.uuid4())])
    finally:
        db_api.retry_listeners.remove(tries.append)
        db.dispose()
    spent = time.monotonic() - started
    # the server greets nobody: read_timeout 1 s per try; no new try once 2 s
    # are spent
    assert 2 <= len(tries) <= 3, tries
    assert spent < 2.0 + 1.0 + 1.5, spent


def test_retries_stop_at_max_tries_and_a_later_success_returns(monkeypatch):
    monkeypatch.setattr(db_api, "FIRST_SLEEP", 0.001)
    monkeypatch.setattr(db_api, "MAX_SLEEP", 0.001)
    calls = []

    @db_api.retry_on_deadlock
    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise db_exc.DBDeadlock()
        return "done"

    assert flaky() == "done" and len(calls) == 3

    @db_api.retry_on_deadlock
    def always():
        calls.append(time.monotonic())
        raise db_exc.DBDeadlock()

    calls.clear()
    with pytest.raises(db_exc.DBDeadlock):
        always()
    assert len(calls) == db_api.MAX_TRIES


def test_retries_stop_when_the_budget_is_spent(monkeypatch):
    """The budget ends the retries before the cap: no new try once sleeping
    would pass it."""
    from oslo_config import cfg

    monkeypatch.setattr(db_api, "FIRST_SLEEP", 0.02)
    monkeypatch.setattr(db_api, "MAX_SLEEP", 0.02)
    cfg.CONF.set_override("retry_budget", 0.1, group="database")
    calls = []

    @db_api.retry_on_deadlock
    def always():
        calls.append(time.monotonic())
        raise db_exc.DBDeadlock()

    try:
        with pytest.raises(db_exc.DBDeadlock):
            always()
    finally:
        cfg.CONF.clear_override("retry_budget", group="database")
    assert 3 <= len(calls) < db_api.MAX_TRIES, len(calls)
    assert calls[-1] - calls[0] <= 0.1 + 0.05


def test_the_timeouts_are_added_to_mysql_urls():
    from sqlalchemy.engine import make_url

    db = db_api.Database("mysql+pymysql://root@127.0.0.1:1/berth?charset=utf8mb4")
    query = make_url(db.connect_url).query
    assert query["connect_timeout"] == str(cfg.CONF.database.connect_timeout)
    assert query["read_timeout"] == str(cfg.CONF.database.read_timeout)
    assert query["charset"] == "utf8mb4"
    assert db_api.Database("sqlite://").connect_url == "sqlite://"
