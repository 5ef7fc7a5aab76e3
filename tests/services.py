"""Where the functional tests find MariaDB and RabbitMQ, and whether they answer.

Tests that need a service skip when it is down on a developer's machine, and
fail instead under CI (``CI=true``), where .ci/run has started them.
"""
from __future__ import annotations

import os
import socket
import threading
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


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` so a test can make a service
    unreachable for one process (``stop`` refuses new connections and cuts the
    open ones) and reachable again (``start``, on the same port), without
    touching the shared server."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(32)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown wakes the accept() of the other thread; close alone would not.
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return                      # stopped
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class RabbitVhost:
    """A vhost and users of the shared RabbitMQ made for one test, with unique names,
    through ``rabbitmqctl`` (the management plugin is not assumed); ``remove()``
    deletes exactly them. Nothing else of the broker is touched."""

    def __init__(self, prefix: str = "berth_sec") -> None:
        import shutil

        require_rabbitmq()
        if shutil.which("rabbitmqctl") is None:
            msg = "rabbitmqctl is not installed"
            if os.environ.get("CI"):
                pytest.fail(msg)
            pytest.skip(msg)
        self.run_id = uuid.uuid4().hex[:10]
        self.name = f"{prefix}_{self.run_id}"
        self.users: list[str] = []
        self._ctl("add_vhost", self.name)

    @staticmethod
    def _ctl(*args: str) -> str:
        import subprocess

        proc = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {args[0]}: {proc.stderr.strip()}")
        return proc.stdout

    def add_user(self, role: str, configure: str, write: str, read: str,
                 topic: tuple[str, str, str] | None = None) -> tuple[str, str]:
        """A user of this vhost (named ``<role>_<run id>``) with these permission
        regexes, and optionally topic permissions (exchange, write, read) there.
        ``{user}`` in a regex stands for the user's name. Returns (name, URL)."""
        name = f"{role}_{self.run_id}"
        password = uuid.uuid4().hex
        self._ctl("add_user", name, password)
        self.users.append(name)
        fill = lambda regex: regex.replace("{user}", name)  # noqa: E731
        self._ctl("set_permissions", "-p", self.name, name, fill(configure), fill(write),
                  fill(read))
        if topic is not None:
            exchange, t_write, t_read = topic
            self._ctl("set_topic_permissions", "-p", self.name, name, exchange,
                      fill(t_write), fill(t_read))
        host = RABBIT_URL.split("@", 1)[1].split("/", 1)[0]
        return name, f"rabbit://{name}:{password}@{host}/{self.name}"

    def remove(self) -> None:
        for name in self.users:
            try:
                self._ctl("delete_user", name)
            except RuntimeError:
                pass
        self._ctl("delete_vhost", self.name)
