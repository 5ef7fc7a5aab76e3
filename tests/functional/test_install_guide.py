"""The install guide's commands, run as written, to a two-scheduler deployment
that places an instance.

The named shell blocks of ``doc/source/install/single-host.rst`` and
``multi-host.rst`` (``.. code-block:: shell`` with ``:name: install-...``) run
in bash in the guide's order, with three substitutions that keep the machine's
shared state alone: ``/etc/berth`` is a temporary directory, ``/opt/berth/bin``
is this environment's, and ``$(hostname --fqdn)`` is ``localhost`` (the name
the private servers' certificates carry). The guide's variables get unique
names. ``mysql`` and ``rabbitmqctl`` reach a private ``mariadbd`` and a private
RabbitMQ node (``tests/tls_servers.py``) that listen with TLS only and use the
certificates the guide's own ``openssl`` commands made: the server-side TLS
settings of the guide's steps 4 and 5 are what those servers are started with.
What is not run: package installation, ``useradd`` and ``chown`` (no system
user on a shared machine) and ``systemctl``; the daemons run the
``ExecStart`` line of ``etc/berth/berth-scheduler.service``.
"""
from __future__ import annotations

import configparser
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
import uuid

import pytest

from tests import tls_servers

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = [ROOT / "doc" / "source" / "install" / name
         for name in ("single-host.rst", "multi-host.rst")]
UNIT = ROOT / "etc" / "berth" / "berth-scheduler.service"
BIN = os.path.dirname(sys.executable)

#: Blocks the test does not run, and why.
NOT_RUN = {
    "install-variables": "the test sets the variables (unique names)",
    "install-berth": "installs packages and adds a system user",
    "install-mariadb-tls": "configures the machine's MariaDB (a private one runs instead)",
    "install-rabbitmq-tls": "configures the machine's RabbitMQ (a private one runs instead)",
    "install-config-owners": "needs the berth system user",
    "install-scheduler-unit": "systemctl (the unit's ExecStart runs instead)",
    "install-second-scheduler": "systemctl (the unit's ExecStart runs instead)",
}


def guide_blocks() -> dict[str, str]:
    """name -> shell text of every named shell block of the install guide."""
    blocks: dict[str, str] = {}
    pattern = re.compile(r"^\.\. code-block:: shell\n   :name: (\S+)\n\n((?:   .*\n|\n)+)",
                         re.MULTILINE)
    for path in GUIDE:
        for m in pattern.finditer(path.read_text()):
            assert m.group(1) not in blocks, f"{m.group(1)} named twice"
            blocks[m.group(1)] = textwrap.dedent(m.group(2)).strip() + "\n"
    return blocks


def test_every_named_block_is_run_or_said_why_not():
    """A new block of the guide is run here, unless it is listed in NOT_RUN."""
    names = set(guide_blocks())
    assert set(NOT_RUN) <= names, sorted(set(NOT_RUN) - names)
    assert names - set(NOT_RUN) == set(RUN_ORDER), sorted(names - set(NOT_RUN) ^ set(RUN_ORDER))


RUN_ORDER = ("install-certificates", "install-database", "install-rabbitmq-users",
             "install-config", "install-config-api", "install-policy", "install-db-sync",
             "install-import", "install-verify", "install-verify-two")


class Deployment:
    """The guide's shell, the private servers and the daemons of one run."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp
        self.etc = tmp / "etc-berth"
        self.wrappers = tmp / "bin"
        self.wrappers.mkdir()
        suffix = uuid.uuid4().hex[:8]
        self.env = dict(
            os.environ, PATH=f"{self.wrappers}:{BIN}:{os.environ.get('PATH', '')}",
            BERTH_DB=f"berth_guide_{suffix}", BERTH_DB_USER=f"berth_guide_{suffix}",
            BERTH_DB_PASSWORD=uuid.uuid4().hex, BERTH_VHOST=f"berth-guide-{suffix}",
            BERTH_MQ_USER=f"berth-guide-{suffix}", BERTH_MQ_PASSWORD=uuid.uuid4().hex,
            BERTH_API_USER=f"compute-api-{suffix}", BERTH_API_PASSWORD=uuid.uuid4().hex)
        self.blocks = guide_blocks()
        self.daemons: list[tuple[subprocess.Popen, pathlib.Path]] = []
        self.servers: list = []

    def text(self, name: str, etc: pathlib.Path | None = None) -> str:
        return (self.blocks[name].replace("/etc/berth", str(etc or self.etc))
                .replace("/opt/berth/bin/", BIN + "/")
                .replace("$(hostname --fqdn)", "localhost"))

    def run(self, name: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", self.text(name)], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert done.returncode == 0, (name, done.stdout[-3000:], done.stderr[-3000:])
        return done

    def start_servers(self) -> None:
        tls = self.etc / "tls"
        certs = types.SimpleNamespace(ca=str(tls / "ca.pem"), server_cert=str(tls / "server.pem"),
                                      server_key=str(tls / "server.key"))
        mariadb = tls_servers.PrivateMariaDB(certs)
        self.servers.append(mariadb)
        mariadb.start()
        rabbit = tls_servers.PrivateRabbitMQ(certs)
        self.servers.append(rabbit)
        rabbit.start()
        self.env["BERTH_DB_ADDRESS"] = f"localhost:{mariadb.port}"
        self.env["BERTH_MQ_ADDRESS"] = f"localhost:{rabbit.port}"
        self._wrapper("mysql", {}, ["/usr/bin/mysql", "--no-defaults",
                                    f"--socket={mariadb.socket}", "-uroot"])
        rabbit_env = {k: v for k, v in rabbit.env.items()
                      if k == "HOME" or k.startswith(("RABBITMQ_", "ERL_"))}
        self._wrapper("rabbitmqctl", rabbit_env,
                      [tls_servers._rabbit("rabbitmqctl"), "-n", rabbit.node])

    def _wrapper(self, name: str, env: dict[str, str], argv: list[str]) -> None:
        path = self.wrappers / name
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        path.write_text(f"#!/bin/sh\n{exports}exec {shlex.join(argv)} \"$@\"\n")
        path.chmod(0o755)

    def start_scheduler(self, host: str) -> pathlib.Path:
        """The unit's ExecStart on a copy of the configuration naming ``host``
        (two schedulers on one machine need two names)."""
        etc = self.tmp / f"etc-{host}"
        shutil.copytree(self.etc, etc)
        conf = etc / "berth.conf"
        conf.write_text(conf.read_text().replace("[DEFAULT]\n", f"[DEFAULT]\nhost = {host}\n",
                                                 1))
        unit = configparser.ConfigParser(interpolation=None, strict=False)
        unit.read(UNIT)
        argv = shlex.split(unit["Service"]["ExecStart"].replace("/etc/berth", str(etc))
                           .replace("/opt/berth/bin/", BIN + "/"))
        log = self.tmp / f"{host}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, cwd=self.tmp, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.daemons.append((proc, log))
        return log

    def pings(self, count: int) -> set[str]:
        hosts = set()
        for _ in range(count):
            done = subprocess.run(["berth", "--config-file", str(self.etc / "berth.conf"),
                                   "--timeout", "10", "--json", "ping"], env=self.env,
                                  capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                hosts.add(json.loads(done.stdout)["host"])
        return hosts

    def stop(self, proc: subprocess.Popen) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        return proc.returncode

    def close(self) -> None:
        for proc, _ in self.daemons:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for server in reversed(self.servers):
            server.stop()


@pytest.fixture
def deployment(tmp_path):
    tls_servers.require("openssl", "mariadbd", "mariadb-install-db", "rabbitmq-server",
                        "rabbitmqctl")
    d = Deployment(tmp_path)
    try:
        yield d
    finally:
        d.close()


def test_the_install_guide_makes_a_two_scheduler_deployment(deployment):
    d = deployment
    d.run("install-certificates")
    d.start_servers()
    for name in ("install-database", "install-rabbitmq-users", "install-config",
                 "install-config-api", "install-policy", "install-db-sync"):
        d.run(name)
    imported = d.run("install-import")
    assert "hosts: 10 created" in imported.stdout, imported.stdout

    logs = [d.start_scheduler("guide-sched-1"), d.start_scheduler("guide-sched-2")]
    deadline = time.monotonic() + 120
    seen: set[str] = set()
    while seen != {"guide-sched-1", "guide-sched-2"}:
        assert time.monotonic() < deadline, (seen, [log.read_text()[-2000:] for log in logs])
        assert all(p.poll() is None for p, _ in d.daemons), \
            [log.read_text()[-2000:] for log in logs]
        seen |= d.pings(4)
        time.sleep(0.5)

    # step 10: the compute API's user places an instance and may not list hosts
    verified = d.run("install-verify")
    out = verified.stdout + verified.stderr
    assert "refused, as it should be" in verified.stdout, out
    assert "ACCESS_REFUSED - access to exchange 'admin_berth'" \
        in verified.stderr, out
    held = subprocess.run(["berth-manage", "--config-file", str(d.etc / "berth.conf"),
                           "allocations", "list", "--json"],
                          env=d.env, capture_output=True, text=True, timeout=60)
    assert held.returncode == 0, held.stderr
    allocations = json.loads(held.stdout)
    assert len(allocations) == 1 and allocations[0]["host"].startswith("compute-0"), \
        allocations

    # both schedulers consume the shared topic queue, and both answer
    two = d.run("install-verify-two")
    consumers = int(two.stdout.splitlines()[0])
    assert consumers >= 2, two.stdout
    assert {"guide-sched-1", "guide-sched-2"} <= set(re.findall(r'"host": "([^"]+)"',
                                                               two.stdout)), two.stdout

    # one scheduler stops (drains, exits 0); the other goes on placing
    first, first_log = d.daemons[0]
    assert d.stop(first) == 0, first_log.read_text()[-3000:]
    again = d.run("install-verify")
    assert "refused, as it should be" in again.stdout
    assert d.pings(4) == {"guide-sched-2"}
    for proc, log in d.daemons:
        assert d.stop(proc) == 0, log.read_text()[-3000:]
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
