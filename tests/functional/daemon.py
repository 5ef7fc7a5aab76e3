"""A real berth-scheduler subprocess for functional tests, and its clients.

Each daemon gets its own MariaDB database (migrated, with a fleet imported),
its own exchange and topic on the local RabbitMQ (so runs never see each
other's messages) and a temp config file. Queues are auto-deleted when the
daemon goes away, so nothing piles up in the broker.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import rpc
from scheduler.rpcapi import SchedulerAPI
from scheduler.simulate import check_invariants
from tests import services

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def small_fleet(n: int = 8, vcpus: int = 16, memory_mb: int = 32768,
                local_gb: int = 400) -> dict:
    return {"hosts": [{"host": f"fc{i:02d}", "vcpus": vcpus, "memory_mb": memory_mb,
                       "local_gb": local_gb, "cpu_allocation_ratio": 1.0,
                       "ram_allocation_ratio": 1.0, "reserved_host_memory_mb": 512}
                      for i in range(n)]}


class Daemon:
    """One berth-scheduler process (possibly a supervisor with workers)."""

    def __init__(self, tmp_path, backend: str = "eventlet", workers: int = 1,
                 fleet: dict | None = None, extra: str = "",
                 share_with: Daemon | None = None,
                 pythonpath: str | None = None,
                 transport_url: str | None = None) -> None:
        """``share_with``: another daemon of the same deployment (its database,
        exchange and topic; the one that made them drops the database).
        ``pythonpath``: put first on the daemon's PYTHONPATH (e.g. a directory
        with a third-party plugin's distribution). ``transport_url``: the daemon's
        broker user and vhost (default: the shared broker's guest)."""
        services.require_rabbitmq()
        self.transport_url = transport_url or services.RABBIT_URL
        self.tmp_path = tmp_path
        self.pythonpath = pythonpath
        self.backend = backend
        self.workers = workers
        self.run_id = uuid.uuid4().hex[:10]
        self.owns_database = share_with is None
        if share_with is None:
            self.topic = f"berth_ft_{self.run_id}"
            self.exchange = f"berth_ft_{self.run_id}"
            self.db_name, self.db_url = services.create_mariadb_database()
        else:
            self.topic, self.exchange = share_with.topic, share_with.exchange
            self.db_name, self.db_url = share_with.db_name, share_with.db_url
        self.db = Database(self.db_url)
        if share_with is None:
            migration.db_sync(self.db)
            db_hosts.import_fleet(self.db, fleet_mod.load_fleet(fleet or small_fleet()))
        self.config = tmp_path / f"berth-{self.run_id}.conf"
        self.config.write_text(f"""[DEFAULT]
host = ft-{self.run_id}
transport_url = {self.transport_url}
control_exchange = {self.exchange}
concurrency_backend = {backend}
# Hosts were heartbeaten once, at import; keep them "up" for the whole run.
service_down_time = 3600
debug = false
[scheduler]
topic = {self.topic}
workers = {workers}
graceful_shutdown_timeout = 20
auto_db_sync = never
[database]
connection = {self.db_url}
[oslo_messaging_rabbit]
amqp_auto_delete = true
{extra}
""")
        self.log = tmp_path / f"berth-{self.run_id}.log"
        self.proc: subprocess.Popen | None = None
        self._transports: dict[str, object] = {}

    # -- process ----------------------------------------------------------------------
    def start(self, timeout: float = 60) -> None:
        env = None
        if self.pythonpath:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (self.pythonpath, ROOT, env.get("PYTHONPATH")) if p)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler.cmd.scheduler",
                 "--config-file", str(self.config)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.wait_until_answering(timeout)

    def wait_until_answering(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pids: set[int] = set()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n"
                                     + self.log_tail())
            try:
                pid = self.api(timeout=2).ping()["pid"]
            except Exception:
                time.sleep(0.2)
                continue
            # a daemon sharing its topic with another: the other may answer
            if self._mine(pid):
                pids.add(pid)
            else:
                time.sleep(0.05)
            if len(pids) >= self.workers or (self.workers == 1 and pids):
                return
        raise AssertionError("daemon did not answer ping in time:\n" + self.log_tail())

    def _mine(self, pid: int) -> bool:
        """Whether ``pid`` is this daemon's process or one of its workers."""
        if pid == self.proc.pid:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return False
        return int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon ignored SIGTERM:\n" + self.log_tail()) from None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        finally:
            for transport in self._transports.values():
                transport.cleanup()
            self.db.dispose()
            if self.owns_database:
                services.drop_mariadb_database(self.db_name)

    # -- clients ----------------------------------------------------------------------
    def transport(self, url: str | None = None):
        """A transport to this daemon's broker and exchange, as ``url``'s user
        (default: the daemon's own); one per URL, reused."""
        url = url or self.transport_url
        if url not in self._transports:
            cfg.CONF.set_override("control_exchange", self.exchange)
            cfg.CONF.set_override("transport_url", url)
            try:
                self._transports[url] = rpc.get_transport(cfg.CONF)
                # Must match the daemon's, or RabbitMQ refuses the second
                # declaration of the exchange. Read when connections open (lazily).
                cfg.CONF.set_override("amqp_auto_delete", True, group="oslo_messaging_rabbit")
            finally:
                cfg.CONF.clear_override("control_exchange")
                cfg.CONF.clear_override("transport_url")
        return self._transports[url]

    def api(self, timeout: float = 30, url: str | None = None, topic: str | None = None,
            exchange: str | None = None) -> SchedulerAPI:
        """A client on this daemon's exchange and topic (or ``topic`` on
        ``exchange``), as ``url``'s user."""
        return SchedulerAPI(cfg.CONF, transport=self.transport(url), topic=topic or self.topic,
                            timeout=timeout, exchange=exchange)

    # -- what the database holds ------------------------------------------------------
    def allocations(self) -> dict[str, int]:
        """instance_uuid -> compute_node_id, read from MariaDB directly."""
        with self.db.reader_connection() as conn:
            rows = conn.execute(sa.select(models.Consumer.uuid,
                                          models.Consumer.compute_node_id))
            return {u: n for u, n in rows}

    def pending(self) -> set[str]:
        """Instances whose claim is pending (not confirmed yet)."""
        with self.db.reader_connection() as conn:
            return {u for (u,) in conn.execute(
                sa.select(models.Consumer.uuid)
                .where(models.Consumer.pending == sa.true()))}

    def usage(self) -> dict[str, tuple]:
        """host -> (VCPU used, MEMORY_MB used, DISK_GB used, running_vms)."""
        from db import invariants

        with self.db.reader_connection() as conn:
            return {host: (u["vcpus_used"], u["memory_mb_used"], u["local_gb_used"],
                           u["running_vms"])
                    for host, u in invariants.usage_by_host(conn).items()}

    def snapshot(self) -> tuple:
        """Everything a refused request must leave untouched."""
        with self.db.reader_connection() as conn:
            nodes = [tuple(r) for r in conn.execute(sa.select(
                models.ComputeNode.host, models.ComputeNode.generation,
                models.ComputeNode.running_vms).order_by(models.ComputeNode.id))]
            inv = models.ProviderInventory
            nodes.append(tuple(tuple(r) for r in conn.execute(sa.select(
                inv.provider_id, inv.resource_class, inv.total, inv.used).order_by(inv.id))))
            allocs = sorted(conn.execute(sa.select(models.Consumer.uuid)).scalars())
            aggs = conn.execute(sa.select(sa.func.count(models.Aggregate.id))).scalar()
            devs = conn.execute(sa.select(sa.func.count(models.PciDevice.id))).scalar()
        return nodes, allocs, aggs, devs

    def assert_consistent(self) -> None:
        """No over-commit and usage == sum of allocations (checked twice: the
        simulator's invariant check and a plain GROUP BY here)."""
        assert check_invariants(self.db) == []
        with self.db.reader_connection() as conn:
            a, inv = models.Allocation, models.ProviderInventory
            sums = {(r[0], r[1]): int(r[2]) for r in conn.execute(
                sa.select(a.provider_id, a.resource_class, sa.func.sum(a.amount))
                .group_by(a.provider_id, a.resource_class))}
            for row in conn.execute(sa.select(inv)):
                assert row.used == sums.get((row.provider_id, row.resource_class), 0), row
                assert row.used <= (row.total - row.reserved) * row.allocation_ratio, row
