"""Where the functional tests find MariaDB and RabbitMQ, and whether they answer.

Tests that need a service skip when it is down on a developer's machine, and
fail instead under CI (``CI=true``), where .ci/run has started them.
"""
from __future__ import annotations

import os
import socket
import uuid

import pytest

MYSQL_URL = os.environ.get("BERTH_TEST_MYSQL_URL", "mysql+pymysql://root:@127.0.0.1:3306")
RABBIT_URL = os.environ.get("BERTH_TEST_TRANSPORT_URL", "rabbit://guest:guest@127.0.0.1:5672/")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    msg = f"{name} is not answering on {host}:{port}"
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI: .ci/run should have started it)")
    pytest.skip(msg)


def require_mariadb() -> None:
    require("MariaDB", "127.0.0.1", 3306)


def require_rabbitmq() -> None:
    require("RabbitMQ", "127.0.0.1", 5672)


def create_mariadb_database() -> tuple[str, str]:
    """Create a uniquely named database; returns (name, url)."""
    import sqlalchemy as sa

    require_mariadb()
    name = "berth_test_" + uuid.uuid4().hex[:12]
    eng = sa.create_engine(MYSQL_URL + "/")
    with eng.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    eng.dispose()
    return name, f"{MYSQL_URL}/{name}?charset=utf8mb4"


def drop_mariadb_database(name: str) -> None:
    import sqlalchemy as sa

    eng = sa.create_engine(MYSQL_URL + "/")
    with eng.begin() as conn:
        conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{name}`"))
    eng.dispose()
