"""What the daemon and the CLIs print cannot be forged by a caller, and the
daemon and ``berth`` fail in one clear line or stop when told: against the real
daemon, MariaDB and RabbitMQ."""
from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from oslo_context import context as oslo_context

from scheduler import exception
from tests import services
from tests.functional.daemon import ROOT, Daemon

FORGED = "FORGED 2026-01-01 00:00:00.000 1 ERROR scheduler.manager pwned"


def _forged_lines(text: str) -> list[str]:
    return re.findall(r"^FORGED.*$", text, re.M)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("output"), extra="[DEFAULT]\ndebug = true\n")
    try:
        d.start()
        yield d
    finally:
        d.close()


def test_hostile_values_do_not_forge_log_lines(daemon):
    api = daemon.api(timeout=20)
    evil = "\n" + FORGED
    flavor = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    attempts = [
        lambda: api.select_destinations(None, {"flavor": flavor,
                                               "availability_zone": "az" + evil},
                                        dry_run=True),
        lambda: api.select_destinations(None, {"flavor": dict(flavor, extra_specs={
            "capabilities:hypervisor_type": "QEMU" + evil})}, dry_run=True),
        lambda: api.select_destinations(
            oslo_context.RequestContext(request_id="req-1" + evil, user_id="u" + evil,
                                        project_id="p" + evil, roles=["admin"]),
            {"flavor": flavor}, dry_run=True),
        lambda: api._call(None, "ping", **{"x" + evil: 1}),
        lambda: api._call(None, "release", **{"instance_uuid" + evil: "x"}),
        lambda: api._call(None, "no_such" + evil),
    ]
    for attempt in attempts:
        try:
            attempt()
        except (exception.BerthError, Exception):  # noqa: B014 (refusals are fine)
            pass
    assert daemon.api(timeout=10).ping()
    time.sleep(0.5)
    log = daemon.log.read_text(errors="replace")
    assert _forged_lines(log) == [], _forged_lines(log)
    assert "\\x0aFORGED" in log         # the values were logged, escaped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", ["eventlet", "threading"])
def test_sigterm_stops_a_daemon_waiting_for_an_unreachable_broker(tmp_path, backend):
    services.require_mariadb()
    name, url = services.create_mariadb_database()
    try:
        from db import migration
        from db.api import Database

        db = Database(url)
        migration.db_sync(db)
        db.dispose()
        conf = tmp_path / "berth.conf"
        log = tmp_path / "berth.log"
        conf.write_text(f"""[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:{_free_port()}/
concurrency_backend = {backend}
log_file = {log}
[scheduler]
auto_db_sync = never
[database]
connection = {url}
""")
        proc = subprocess.Popen([sys.executable, "-m", "scheduler.cmd.scheduler",
                                 "--config-file", str(conf)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while "waiting for it" not in (log.read_text() if log.exists() else ""):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    log.read_text() if log.exists() else proc.stdout.read()
                time.sleep(0.2)
            time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        assert "Traceback" not in log.read_text()
    finally:
        services.drop_mariadb_database(name)


def test_berth_with_a_wrong_broker_password_prints_one_line(tmp_path):
    services.require_rabbitmq()
    conf = tmp_path / "berth.conf"
    host = services.RABBIT_URL.split("@", 1)[1].split("/", 1)[0]
    conf.write_text(f"[DEFAULT]\ntransport_url = rabbit://guest:not-the-password@{host}/\n")
    proc = subprocess.run([sys.executable, "-m", "scheduler.cmd.client", "--config-file",
                           str(conf), "hosts"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("berth: cannot use the message broker")
    assert "ACCESS_REFUSED" in lines[0] and "not-the-password" not in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
