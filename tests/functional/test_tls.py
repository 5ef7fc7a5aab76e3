"""TLS to the database and to the broker, and broker permissions, proven on
private throwaway servers (``tests/tls_servers.py``: a mariadbd and a RabbitMQ
node of their own, with certificates made by openssl for the run). The shared
MariaDB and RabbitMQ are not used. These tests skip only when a server binary
is missing (also under CI).

What doc/source/admin/security.rst says about TLS is what these tests show:

* ``[database] connection = mysql+pymysql://...?ssl_ca=CA``: the session is
  encrypted (``Ssl_cipher``) on every connection Berth opens, the server's
  certificate is checked against CA and its name against the URL's host; a
  wrong CA or a name the certificate does not carry is refused with a clear
  error (berth-scheduler: one line, exit 3); ``ssl_check_hostname=false`` keeps
  the CA check only; ``ssl_cert``/``ssl_key`` send a client certificate (a
  ``REQUIRE X509`` user needs one). Without any ``ssl_*`` argument PyMySQL still
  encrypts when the server offers TLS, but checks nothing.
* ``ssl_verify_cert``/``ssl_verify_identity`` together with those arguments
  would silently drop the CA (SQLAlchemy passes them to PyMySQL in a form these
  replace): Berth refuses such a URL, naming ``database.connection``.
* the RabbitMQ permission lines of the docs: a compute-API user places instances,
  and the broker refuses its admin calls (the admin topic).
* ``[oslo_messaging_rabbit] ssl = true`` with ``ssl_ca_file`` (and
  ``ssl_cert_file``/``ssl_key_file``) on a TLS-only listener: the daemon,
  ``berth`` and ``berth-manage`` work over TLS (RabbitMQ lists the
  connections as TLS, with the client certificate); a wrong CA is refused.
"""
from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa
from oslo_db import exception as db_exc

from db import migration
from db.api import Database
from scheduler import exception
from tests import tls_servers
from tests.functional.daemon import ROOT

FLEET = """hosts:
  - {host: tls-1, vcpus: 8, memory_mb: 16384, local_gb: 100}
  - {host: tls-2, vcpus: 8, memory_mb: 16384, local_gb: 100}
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    tls_servers.require("openssl")
    return tls_servers.Certificates(str(tmp_path_factory.mktemp("certs")))


def _running(server):
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mariadb(certs):
    tls_servers.require("mariadbd", "mariadb-install-db")
    yield from _running(tls_servers.PrivateMariaDB(certs))


@pytest.fixture(scope="module")
def rabbitmq(certs):
    tls_servers.require("rabbitmq-server", "rabbitmqctl")
    yield from _running(tls_servers.PrivateRabbitMQ(certs))


def _status(conn, name: str) -> str:
    return conn.execute(sa.text(f"SHOW SESSION STATUS LIKE '{name}'")).one()[1]


def _connect_error(url: str) -> str:
    """The error a Database on ``url`` meets at its first statement (oslo.db's
    connection retries off)."""
    db = Database(url, max_retries=0)
    try:
        with pytest.raises((db_exc.DBError, sa.exc.SQLAlchemyError)) as caught:
            migration.db_version(db)
        return str(caught.value)
    finally:
        db.dispose()


# -- the database -----------------------------------------------------------------------

def test_berth_database_over_verified_tls(mariadb, certs):
    """ssl_ca: Berth migrates and uses the schema over TLS; its session reader,
    session writer and kept claim connections are all encrypted."""
    db = Database(mariadb.url(f"ssl_ca={certs.ca}", host="localhost"))
    try:
        migration.db_sync(db)
        with db.reader_connection() as conn:
            assert _status(conn, "Ssl_cipher")
            assert _status(conn, "Ssl_version").startswith("TLSv1.")
        with db.writer() as session:
            assert session.execute(sa.text("SHOW SESSION STATUS LIKE 'Ssl_cipher'")).one()[1]
        with db.hot_writer() as conn:
            assert _status(conn, "Ssl_cipher")
    finally:
        db.dispose()
    # the server refuses this user without TLS (REQUIRE SSL): the test's own check
    # that the sessions above could not have been plain text
    assert "Access denied" in _connect_error(mariadb.url("ssl_disabled=true"))


def test_wrong_ca_is_refused_with_a_clear_error(mariadb, certs, tmp_path):
    error = _connect_error(mariadb.url(f"ssl_ca={certs.wrong_ca}", host="localhost"))
    assert "CERTIFICATE_VERIFY_FAILED" in error
    conf = tmp_path / "berth.conf"
    conf.write_text(f"""[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:{tls_servers.free_port()}/
[scheduler]
auto_db_sync = never
[database]
connection = {mariadb.url(f"ssl_ca={certs.wrong_ca}", host="localhost")}
max_retries = 0
""")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cmd.scheduler",
                           "--config-file", str(conf)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(
        "berth-scheduler: cannot use the database ([database] connection): ")
    assert "certificate verify failed" in lines[0]
    assert mariadb.PASSWORD not in proc.stdout + proc.stderr


def test_host_name_is_checked_unless_turned_off(mariadb, certs):
    """The server's certificate names localhost only: 127.0.0.1 is refused with
    ssl_ca alone, accepted with ssl_check_hostname=false (the CA still checked)."""
    error = _connect_error(mariadb.url(f"ssl_ca={certs.ca}", host="127.0.0.1"))
    assert "CERTIFICATE_VERIFY_FAILED" in error and "127.0.0.1" in error
    db = Database(mariadb.url(f"ssl_ca={certs.ca}&ssl_check_hostname=false"))
    try:
        with db.reader_connection() as conn:
            assert _status(conn, "Ssl_cipher")
    finally:
        db.dispose()
    error = _connect_error(mariadb.url(f"ssl_ca={certs.wrong_ca}&ssl_check_hostname=false"))
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_client_certificate(mariadb, certs):
    """A REQUIRE X509 user is refused without a client certificate and accepted
    with ssl_cert and ssl_key."""
    plain = mariadb.url(f"ssl_ca={certs.ca}", user="berth_x509", host="localhost")
    assert "Access denied" in _connect_error(plain)
    db = Database(plain + f"&ssl_cert={certs.client_cert}&ssl_key={certs.client_key}")
    try:
        with db.reader_connection() as conn:
            assert conn.execute(sa.text("SELECT CURRENT_USER()")).scalar() \
                == "berth_x509@127.0.0.1"
            assert _status(conn, "Ssl_cipher")
    finally:
        db.dispose()


def test_without_ssl_arguments_encrypted_but_unverified(mariadb, certs):
    """PyMySQL's default when the server offers TLS: an encrypted session,
    though nothing told it which CA to trust (so no protection against a
    server in the middle): ssl_ca is what makes it verified."""
    db = Database(mariadb.url())
    try:
        with db.reader_connection() as conn:
            assert _status(conn, "Ssl_cipher")
    finally:
        db.dispose()


@pytest.mark.parametrize("extra", ["ssl_verify_cert=true", "ssl_verify_identity=true",
                                   "ssl_verify_cert=false"])
def test_verify_options_that_would_drop_the_ca_are_refused(mariadb, certs, extra):
    """Straight through SQLAlchemy, ssl_ca + ssl_verify_cert=true fails although
    the CA is right (PyMySQL rebuilds its TLS settings without the CA), and
    ssl_verify_cert=false would quietly not verify: Berth refuses both up front."""
    url = mariadb.url(f"ssl_ca={certs.ca}&{extra}", host="localhost")
    if extra == "ssl_verify_cert=true":
        engine = sa.create_engine(url)
        try:
            with pytest.raises(sa.exc.OperationalError, match="CERTIFICATE_VERIFY_FAILED"):
                engine.connect()
        finally:
            engine.dispose()
    with pytest.raises(exception.InvalidRequest) as caught:
        Database(url)
    assert caught.value.field == "database.connection"
    assert extra.split("=")[0] in caught.value.reason and "ssl_ca" in caught.value.reason
    assert mariadb.PASSWORD not in str(caught.value)


# -- the broker (and the database) ------------------------------------------------------

def _config(path, rabbitmq, mariadb, certs, ca=None, client_cert=True, topic="tls") -> str:
    client = (f"ssl_cert_file = {certs.client_cert}\nssl_key_file = {certs.client_key}\n"
              if client_cert else "")
    path.write_text(f"""[DEFAULT]
host = berth-tls
transport_url = {rabbitmq.url()}
control_exchange = berth_tls
concurrency_backend = eventlet
service_down_time = 3600
[scheduler]
topic = {topic}
auto_db_sync = never
[database]
connection = {mariadb.url(f"ssl_ca={certs.ca}", host="localhost")}
[oslo_messaging_rabbit]
ssl = true
ssl_ca_file = {ca or certs.ca}
{client}""")
    return str(path)


def _tool(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@contextlib.contextmanager
def _daemon(conf: str, tmp_path, client_conf: str | None = None):
    """berth-manage db sync and host import, then berth-scheduler on ``conf``,
    answering ``berth ping`` (run with ``client_conf``); SIGTERM at the end."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    for argv in (("db", "sync"), ("host", "import", str(fleet))):
        done = _tool("scheduler.cmd.manage", "--config-file", conf, *argv)
        assert done.returncode == 0, done.stderr
    log_path = tmp_path / "daemon.log"
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "scheduler.cmd.scheduler",
                                   "--config-file", conf], cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            ping = _tool("scheduler.cmd.client", "--config-file", client_conf or conf,
                         "--timeout", "5", "ping")
            if ping.returncode == 0:
                break
            assert daemon.poll() is None and time.monotonic() < deadline, \
                (ping.stderr, log_path.read_text()[-3000:])
            time.sleep(1)
        yield
    finally:
        daemon.terminate()
        try:
            code = daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            raise
    assert code == 0, log_path.read_text()[-3000:]
    assert "Traceback" not in log_path.read_text()


def test_daemon_and_tools_over_tls_broker_and_database(rabbitmq, mariadb, certs, tmp_path):
    conf = _config(tmp_path / "berth.conf", rabbitmq, mariadb, certs)
    with _daemon(conf, tmp_path):
        request = tmp_path / "request.json"
        request.write_text('{"flavor": {"vcpus": 2, "memory_mb": 1024, "root_gb": 10}}')
        placed = _tool("scheduler.cmd.client", "--config-file", conf, "--json",
                       "select", str(request))
        assert placed.returncode == 0, placed.stderr
        assert '"host": "tls-' in placed.stdout
        added = _tool("scheduler.cmd.client", "--config-file", conf, "aggregate",
                      "add-host", "none-yet", "tls-1")
        assert added.returncode == 2 and "Aggregate none-yet not found" in added.stderr
        connections = rabbitmq.ctl("list_connections", "--no-table-headers", "--silent",
                                   "ssl", "ssl_protocol", "peer_cert_subject")
        rows = [line.split("\t") for line in connections.splitlines() if line.strip()]
        assert rows and all(r[0] == "true" and r[1].startswith("tlsv1.") for r in rows), rows
        assert all("CN=berth-client" in r[2] for r in rows), rows
        # a client that trusts another CA is refused, with the reason said
        wrong = _config(tmp_path / "wrong.conf", rabbitmq, mariadb, certs,
                        ca=certs.wrong_ca, client_cert=False)
        refused = _tool("scheduler.cmd.client", "--config-file", wrong, "--timeout", "5",
                        "ping")
        assert refused.returncode == 2
        assert refused.stderr.startswith("berth: cannot use the message broker: localhost:")
        assert "certificate verify failed" in refused.stderr, refused.stderr
        # and so is a daemon: one line, exit 3 (the driver would retry for ever)
        started = _tool("scheduler.cmd.scheduler", "--config-file", wrong)
        lines = [line for line in started.stderr.splitlines() if line.strip()]
        assert started.returncode == 3, started.stderr[-3000:]
        assert len(lines) == 1 and lines[0].startswith(
            "berth-scheduler: cannot use the message broker ([DEFAULT] transport_url): "
            "localhost:"), lines
        assert "certificate verify failed" in lines[0]


def test_broker_permissions_keep_a_compute_api_off_the_admin_topic(rabbitmq, mariadb, certs,
                                                                   tmp_path):
    """The docs' permission lines, run as written on the private node: Berth's
    own user and vhost, the admin calls on their own topic, and a compute-API
    user that may place instances but whose admin calls the broker refuses."""
    rabbitmq.ctl("add_vhost", "berth")
    rabbitmq.ctl("add_user", "berth", "berth-pw")
    rabbitmq.ctl("set_permissions", "-p", "berth", "berth", ".*", ".*", ".*")
    rabbitmq.ctl("add_user", "nova-api", "nova-pw")
    rabbitmq.ctl("set_permissions", "-p", "berth", "nova-api", r"^reply_nova-api\.",
                 "^berth$", r"^reply_nova-api\.")
    rabbitmq.ctl("set_topic_permissions", "-p", "berth", "nova-api", "berth",
                 r"^scheduler(\..+)?$", ".*")

    def config(name: str, user: str, password: str) -> str:
        path = _config(tmp_path / f"{name}.conf", rabbitmq, mariadb, certs,
                       topic="scheduler")
        text = open(path).read().replace(
            rabbitmq.url(), rabbitmq.url(user, password) + "berth").replace(
            "control_exchange = berth_tls", "control_exchange = berth").replace(
            "topic = scheduler\n", "topic = scheduler\nadmin_topic = scheduler_admin\n")
        open(path, "w").write(text)
        return path

    berth, nova = config("berth", "berth", "berth-pw"), config("nova", "nova-api", "nova-pw")
    with _daemon(berth, tmp_path, client_conf=nova):
        request = tmp_path / "request.json"
        request.write_text('{"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}}')
        placed = _tool("scheduler.cmd.client", "--config-file", nova, "--json", "select",
                       str(request))
        assert placed.returncode == 0, placed.stderr
        assert _tool("scheduler.cmd.client", "--config-file", berth, "hosts").returncode == 0
        refused = _tool("scheduler.cmd.client", "--config-file", nova, "--timeout", "10",
                        "hosts")
        assert refused.returncode == 2, refused.stdout
        assert "ACCESS_REFUSED - access to exchange 'admin_berth' in vhost 'berth'" \
            in refused.stderr, refused.stderr
