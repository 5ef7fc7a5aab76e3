"""Private, throwaway MariaDB and RabbitMQ servers with TLS, for the TLS tests.

Each server gets its own temporary directory (data, socket, logs, certificates),
its own free ports and, for RabbitMQ, its own node name and Erlang cookie; it
runs as a child of the test process and is stopped by its process id. The
shared servers (MariaDB on 3306, RabbitMQ on 5672) are never touched: nothing
here reads their configuration or talks to them.

Certificates are made with ``openssl`` for each run: a CA, a server
certificate for ``localhost`` (``server_names``) signed by it, a client
certificate signed by it, and a second, unrelated CA (the wrong one).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

MARIADBD = next((p for p in ("/usr/sbin/mariadbd", shutil.which("mariadbd") or "")
                 if p and os.access(p, os.X_OK)), None)
INSTALL_DB = shutil.which("mariadb-install-db")
OPENSSL = shutil.which("openssl")
RABBIT_SBIN = "/usr/lib/rabbitmq/bin"       # the scripts themselves, not the su wrappers


def require(*names: str) -> None:
    """Skip (also under CI) when a binary a private server needs is missing: the
    one case where these tests may skip."""
    found = {"mariadbd": MARIADBD, "mariadb-install-db": INSTALL_DB, "openssl": OPENSSL,
             "rabbitmq-server": _rabbit("rabbitmq-server"),
             "rabbitmqctl": _rabbit("rabbitmqctl")}
    missing = [n for n in names if not found[n]]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


def _rabbit(name: str) -> str | None:
    path = os.path.join(RABBIT_SBIN, name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)
    if proc.returncode:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


class Certificates:
    """A CA, a server and a client certificate it signed, and a wrong CA."""

    def __init__(self, directory: str, server_names: tuple[str, ...] = ("DNS:localhost",)):
        self.dir = directory
        self.ca, self.ca_key = self._path("ca.pem"), self._path("ca.key")
        self.wrong_ca = self._path("wrong-ca.pem")
        self.server_cert, self.server_key = self._path("server.pem"), self._path("server.key")
        self.client_cert, self.client_key = self._path("client.pem"), self._path("client.key")
        self._ca(self.ca, self.ca_key, "Berth test CA")
        self._ca(self.wrong_ca, self._path("wrong-ca.key"), "Some other CA")
        self._signed(self.server_cert, self.server_key, "localhost",
                     "subjectAltName=" + ",".join(server_names))
        self._signed(self.client_cert, self.client_key, "berth-client",
                     "extendedKeyUsage=clientAuth")
        for name in os.listdir(directory):
            os.chmod(self._path(name), 0o644)   # the servers may run as another user

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _ca(self, cert: str, key: str, name: str) -> None:
        _run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
              "-out", cert, "-days", "2", "-subj", f"/CN={name}"])

    def _signed(self, cert: str, key: str, name: str, extension: str) -> None:
        csr, ext = cert + ".csr", cert + ".ext"
        with open(ext, "w") as f:
            f.write(extension + "\n")
        _run([OPENSSL, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
              "-subj", f"/CN={name}"])
        _run([OPENSSL, "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
              "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext])


class PrivateMariaDB:
    """``mariadbd`` on a free port of 127.0.0.1 with ``--ssl-ca/--ssl-cert/--ssl-key``,
    a fresh data directory and its own socket; users ``berth`` (REQUIRE SSL) and
    ``berth_x509`` (REQUIRE X509: a client certificate) on database ``berth``."""

    PASSWORD = "tls-test-pw"

    def __init__(self, certs: Certificates) -> None:
        self.certs = certs
        self.dir = tempfile.mkdtemp(prefix="berth-mdb-")    # short: the socket path
        self.port = free_port()
        self.socket = os.path.join(self.dir, "sock")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        datadir = os.path.join(self.dir, "data")
        as_root = ["--user=root"] if os.geteuid() == 0 else []
        _run([INSTALL_DB, "--no-defaults", f"--datadir={datadir}", *as_root,
              "--auth-root-authentication-method=normal", "--skip-test-db"])
        log = open(os.path.join(self.dir, "mariadbd.out"), "ab")
        self.proc = subprocess.Popen(
            [MARIADBD, "--no-defaults", f"--datadir={datadir}", *as_root,
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
             f"--pid-file={os.path.join(self.dir, 'mariadbd.pid')}",
             f"--log-error={os.path.join(self.dir, 'error.log')}", "--skip-name-resolve",
             "--skip-log-bin", "--innodb-buffer-pool-size=32M",
             f"--ssl-ca={self.certs.ca}", f"--ssl-cert={self.certs.server_cert}",
             f"--ssl-key={self.certs.server_key}"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.admin("SELECT 1")
                break
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("private mariadbd did not start:\n"
                                         + self.log_tail()) from None
                time.sleep(0.2)
        self.admin(
            "CREATE DATABASE berth CHARACTER SET utf8mb4",
            f"CREATE USER 'berth'@'127.0.0.1' IDENTIFIED BY '{self.PASSWORD}' REQUIRE SSL",
            "GRANT ALL ON berth.* TO 'berth'@'127.0.0.1'",
            f"CREATE USER 'berth_x509'@'127.0.0.1' IDENTIFIED BY '{self.PASSWORD}' "
            "REQUIRE X509",
            "GRANT ALL ON berth.* TO 'berth_x509'@'127.0.0.1'")

    def admin(self, *statements: str) -> list:
        """Run statements as root over the private socket (no TLS needed there)."""
        import pymysql

        conn = pymysql.connect(unix_socket=self.socket, user="root", connect_timeout=2)
        try:
            with conn.cursor() as cur:
                rows = []
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
                return rows
        finally:
            conn.close()

    def url(self, query: str = "", user: str = "berth", host: str = "127.0.0.1") -> str:
        """A Berth ``[database] connection`` URL over TCP (query: ``ssl_ca=...&...``)."""
        url = f"mysql+pymysql://{user}:{self.PASSWORD}@{host}:{self.port}/berth"
        return url + ("?" + query if query else "")

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "error.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRabbitMQ:
    """A RabbitMQ node of its own (``berth-tls-<id>@localhost``: own data, logs,
    config, enabled-plugins file, Erlang cookie and distribution port) with one
    TLS listener on a free port of 127.0.0.1 and no plain one; guest may log in
    from 127.0.0.1."""

    def __init__(self, certs: Certificates) -> None:
        self.certs = certs
        self.dir = tempfile.mkdtemp(prefix="berth-rmq-")
        self.port = free_port()
        self.node = f"berth-tls-{uuid.uuid4().hex[:8]}@localhost"
        self.proc: subprocess.Popen | None = None
        conf = os.path.join(self.dir, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write(f"""listeners.tcp = none
listeners.ssl.1 = 127.0.0.1:{self.port}
ssl_options.cacertfile = {certs.ca}
ssl_options.certfile = {certs.server_cert}
ssl_options.keyfile = {certs.server_key}
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
loopback_users.guest = true
log.file.level = info
""")
        plugins = os.path.join(self.dir, "enabled_plugins")
        with open(plugins, "w") as f:
            f.write("[].\n")
        env_file = os.path.join(self.dir, "rabbitmq-env.conf")
        open(env_file, "w").close()
        self.env = dict(
            os.environ, HOME=self.dir, RABBITMQ_NODENAME=self.node,
            RABBITMQ_DIST_PORT=str(free_port()),
            RABBITMQ_CONFIG_FILE=conf, RABBITMQ_CONF_ENV_FILE=env_file,
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"),
            RABBITMQ_PID_FILE=os.path.join(self.dir, "rabbit.pid"),
            ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}",
            ERL_CRASH_DUMP=os.path.join(self.dir, "erl_crash.dump"))

    def start(self, timeout: float = 90) -> None:
        log = open(os.path.join(self.dir, "server.out"), "ab")
        self.proc = subprocess.Popen([_rabbit("rabbitmq-server")], env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:     # the node is known to rabbitmqctl only once it has registered
            try:
                self.ctl("await_startup", "--timeout", "10")
                return
            except AssertionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("private RabbitMQ did not start:\n"
                                         + self.log_tail()) from None
                time.sleep(1)

    def ctl(self, *args: str) -> str:
        return _run([_rabbit("rabbitmqctl"), "-n", self.node, *args], env=self.env).stdout

    def url(self, user: str = "guest", password: str = "guest") -> str:
        return f"rabbit://{user}:{password}@localhost:{self.port}/"

    def log_tail(self) -> str:
        out = []
        for root, _dirs, files in os.walk(self.dir):
            for name in files:
                if name.endswith(".log") or name == "server.out":
                    try:
                        with open(os.path.join(root, name), errors="replace") as f:
                            out.append(f"== {name}\n" + f.read()[-2000:])
                    except OSError:
                        pass
        return "\n".join(out)

    def stop(self) -> None:
        """Stop this node by the process group of the server started here (the
        node's own processes: beam, its epmd registration goes with it)."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.ctl("stop")
                except Exception:
                    pass
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
