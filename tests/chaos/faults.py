"""Stopping and starting this machine's MariaDB and RabbitMQ, for the fault suite.

The suite (``tox -e chaos``) stops the real local services, as an outage would,
and always starts them again: ``ensure_running`` is called after every
experiment and at the end of the session, whatever happened. Nothing here runs
in the default ``tox`` run.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time

MYSQL = ("127.0.0.1", 3306)
RABBIT = ("127.0.0.1", 5672)


def port_open(addr: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(addr, timeout=1):
            return True
    except OSError:
        return False


def _run(*cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _wait(check, timeout: float, what: str) -> float:
    """Seconds until ``check()`` holds; AssertionError after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout:.0f} s")


# -- MariaDB ----------------------------------------------------------------------------

def mariadb_answers() -> bool:
    return _run("mysqladmin", "-uroot", "--connect-timeout=2", "ping", timeout=10) \
        .returncode == 0


def stop_mariadb() -> float:
    """A clean shutdown (connections cut, port closed); seconds it took."""
    started = time.monotonic()
    _run("mysqladmin", "-uroot", "shutdown")
    _wait(lambda: not port_open(MYSQL), 60, "MariaDB did not stop")
    return time.monotonic() - started


def start_mariadb() -> float:
    """Start it as .ci/run does; seconds until it answers a ping."""
    started = time.monotonic()
    if not os.path.isdir("/run/mysqld"):
        os.makedirs("/run/mysqld")
        _run("chown", "mysql:mysql", "/run/mysqld")
    # --pidfile: the shared server's own pid file, so that another mariadbd on
    # this machine (a test's private one) is not taken for it
    _run("start-stop-daemon", "--start", "--oknodo", "--background",
         "--pidfile", "/run/mysqld/mysqld.pid", "--exec", "/usr/sbin/mariadbd")
    _wait(mariadb_answers, 120, "MariaDB did not answer after start")
    return time.monotonic() - started


# -- RabbitMQ ---------------------------------------------------------------------------

def stop_rabbitmq_app() -> float:
    """Stop the broker application (every connection cut, port closed; the Erlang
    node stays up, so it comes back in about a second)."""
    started = time.monotonic()
    _run("rabbitmqctl", "-q", "stop_app")
    _wait(lambda: not port_open(RABBIT), 60, "RabbitMQ did not stop")
    return time.monotonic() - started


def start_rabbitmq_app() -> float:
    started = time.monotonic()
    _run("rabbitmqctl", "-q", "start_app")
    _wait(lambda: port_open(RABBIT), 60, "RabbitMQ did not listen after start_app")
    return time.monotonic() - started


def restart_rabbitmq() -> float:
    """The whole broker node stopped and started again, as .ci/run starts it
    (non-durable queues and exchanges are gone afterwards); seconds taken."""
    started = time.monotonic()
    _run("rabbitmqctl", "-q", "stop")
    _wait(lambda: not port_open(RABBIT), 60, "RabbitMQ did not stop")
    _start_rabbitmq_node()
    return time.monotonic() - started


def _start_rabbitmq_node() -> None:
    subprocess.Popen(["rabbitmq-server", "-detached"], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait(60)
    time.sleep(2)
    _wait(lambda: _run("rabbitmqctl", "-q", "await_startup", timeout=60).returncode == 0,
          120, "RabbitMQ did not start")
    _wait(lambda: port_open(RABBIT), 60, "RabbitMQ did not listen")


def rabbitmq_running() -> bool:
    return port_open(RABBIT)


# -- after every experiment -------------------------------------------------------------

def ensure_running() -> list[str]:
    """Start whatever of the two is down; returns what had to be started."""
    started = []
    if not mariadb_answers():
        start_mariadb()
        started.append("mariadb")
    if not rabbitmq_running():
        # the node may be up with the application stopped, or down altogether
        if _run("rabbitmqctl", "-q", "start_app", timeout=60).returncode != 0 \
                or not _wait_quietly(lambda: port_open(RABBIT), 20):
            _start_rabbitmq_node()
        started.append("rabbitmq")
    return started


def _wait_quietly(check, timeout: float) -> bool:
    try:
        _wait(check, timeout, "")
        return True
    except AssertionError:
        return False
