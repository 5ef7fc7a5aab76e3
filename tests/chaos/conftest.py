"""The fault suite's fixtures: a deployment of real daemons on a generated fleet
in MariaDB, and the report every experiment adds its figures to.

Run alone (``tox -e chaos``): it stops this machine's MariaDB and RabbitMQ, so
any other test using them at the same time fails. Both are started again after
every experiment and at the end, whatever happened.
"""
from __future__ import annotations

import json
import os
import socket

import psutil
import pytest

from tests import services
from tests.chaos import faults
from tests.functional.daemon import Daemon
from tools.bench import fleet as bench_fleet
from tools.bench import replay as bench_replay

#: Hosts in the experiments' fleet (the issue's 200), and the clients' threads.
FLEET_SIZE = int(os.environ.get("BERTH_CHAOS_HOSTS", "200"))
CLIENTS = int(os.environ.get("BERTH_CHAOS_CLIENTS", "16"))
#: Short enough to see the reaper act within an experiment, well above the
#: requests' own deadline (as doc/source/admin/concepts/claims.rst asks of
#: claim_ttl and request_timeout).
CLAIM_TTL = 30
REQUEST_TIMEOUT = 10
REAPER_INTERVAL = 1.0
REPORT = os.environ.get("BERTH_CHAOS_REPORT", "/tmp/berth-chaos-report.json")

_results: list[dict] = []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def services_running():
    """Both services up before the suite, and again after it."""
    faults.ensure_running()
    services.require_mariadb()
    services.require_rabbitmq()
    yield
    faults.ensure_running()




@pytest.fixture(scope="session")
def report():
    """``report(dict)`` adds one experiment's figures; all are printed and written
    to ``BERTH_CHAOS_REPORT`` at the end."""
    yield _results.append
    with open(REPORT, "w") as f:
        json.dump(_results, f, indent=1, default=sorted)


def pytest_terminal_summary(terminalreporter):
    if _results:
        terminalreporter.section(f"fault suite figures (also in {REPORT})")
        for r in _results:
            terminalreporter.write_line(json.dumps(r, default=sorted))


@pytest.fixture(scope="session")
def fleet() -> bench_fleet.BenchFleet:
    """Seven hardware models with usage already on them (pinned CPUs and pages,
    claimed VFs and GPUs, server groups with members)."""
    return bench_fleet.generate_fleet(FLEET_SIZE, seed=17)


def daemon_config(metrics_port: int, metrics_dir, extra: str = "") -> str:
    plugins = bench_replay.realistic_plugins()
    aliases = "\n".join(f"alias = {json.dumps(a)}" for a in plugins.aliases)
    return f"""[scheduler]
claim_ttl = {CLAIM_TTL}
reaper_interval = {REAPER_INTERVAL}
request_timeout = {REQUEST_TIMEOUT}
[filter_scheduler]
enabled_filters = {",".join(plugins.filters)}
weight_classes = {",".join(plugins.weighers)}
[pci]
{aliases}
[metrics]
enabled = true
port = {metrics_port}
status_interval = 1
multiprocess_dir = {metrics_dir}
{extra}
"""


def fault_problems(dep, load) -> list[str]:
    """Faults of the daemon itself, whatever the experiment: a call answered
    InternalError (or an untyped RemoteError), a traceback in a daemon's log."""
    problems = [f"{k} x{n}" for k, n in load.outcomes().items()
                if "InternalError" in k or "RemoteError" in k]
    for d in dep.daemons:
        text = d.log.read_text(errors="replace")
        at = text.find("Traceback")
        if at >= 0:
            problems.append(f"{d.log.name}: " + text[max(0, at - 300):at + 2500])
    return problems


class Deployment:
    """One or more daemons serving one topic on one MariaDB database."""

    def __init__(self, tmp_path, fleet, workers: int = 1, daemons: int = 1,
                 extra: str = "") -> None:
        self.daemons: list[Daemon] = []
        self.metrics_ports: list[int] = []
        for i in range(daemons):
            port = _free_port()
            mdir = tmp_path / f"metrics-{i}"
            mdir.mkdir()
            d = Daemon(tmp_path, workers=workers, fleet={"hosts": []},
                       extra=daemon_config(port, mdir, extra),
                       share_with=self.daemons[0] if self.daemons else None)
            if i == 0:
                bench_fleet.load_fleet(d.db, fleet)
            self.daemons.append(d)
            self.metrics_ports.append(port)
        self.db = self.daemons[0].db

    def start(self) -> None:
        for d in self.daemons:
            d.start(timeout=120)
        for port in self.metrics_ports:     # each daemon's own port, not just the topic
            faults.wait_for_http(f"http://127.0.0.1:{port}/healthz", 60)

    def api(self, timeout: float = 10):
        return self.daemons[0].api(timeout=timeout)

    def worker_pids(self, daemon: int = 0) -> list[int]:
        proc = self.daemons[daemon].proc
        return [c.pid for c in psutil.Process(proc.pid).children()]

    def close(self) -> None:
        """Stop every daemon (killed if it does not stop) and drop the database,
        whatever fails on the way."""
        for d in reversed(self.daemons):
            try:
                d.stop(timeout=30)
            except Exception:       # noqa: BLE001 - close() kills it below
                pass
        for d in reversed(self.daemons):
            try:
                d.close()
            except Exception:       # noqa: BLE001 - the others still get closed
                if d.proc is not None and d.proc.poll() is None:
                    d.proc.kill()


@pytest.fixture
def deploy(tmp_path, fleet):
    """``deploy(workers=, daemons=, extra=)`` -> a started Deployment."""
    made: list[Deployment] = []

    def make(**kw) -> Deployment:
        dep = Deployment(tmp_path, fleet, **kw)
        made.append(dep)
        dep.start()
        return dep
    yield make
    try:
        started = faults.ensure_running()
    finally:
        for dep in made:
            dep.close()
    assert not started, f"the experiment left {started} stopped"
