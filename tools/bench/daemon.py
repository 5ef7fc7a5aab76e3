"""``berth-scheduler`` as a benchmark subprocess, and the service checks.

``Daemon`` writes a throwaway config (its own RPC topic, log file and the given
filters, weighers and PCI aliases) and starts ``python -m scheduler.cmd.scheduler``;
``running_daemon`` waits until it answers a ping and yields it with a client
(``scheduler.rpcapi.SchedulerAPI``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg

from tools.bench import fleet as bench_fleet

TRANSPORT_URL = os.environ.get("BERTH_BENCH_TRANSPORT_URL",
                               "rabbit://guest:guest@127.0.0.1:5672/")
SERVICE_DOWN_TIME = 86400


@dataclasses.dataclass
class Plugins:
    filters: list[str]
    weighers: list[str]
    missing: list[str]
    aliases: list[dict] = dataclasses.field(default_factory=list)


class Daemon:
    """``berth-scheduler`` as a subprocess with a throwaway config and topic."""

    def __init__(self, db_url: str, workers: int, plugins: Plugins, workdir: str,
                 concurrency: str = "eventlet", config_extra: str = "") -> None:
        """``config_extra``: more config text (sections of their own)."""
        self.tag = uuidlib.uuid4().hex[:8]
        self.topic = f"berth-bench-{self.tag}"
        self.workdir = workdir
        self.log = os.path.join(workdir, f"daemon-{self.tag}.log")
        self.config = os.path.join(workdir, f"berth-{self.tag}.conf")
        self.stderr = os.path.join(workdir, f"daemon-{self.tag}.stderr")
        aliases = "\n".join(f"alias = {json.dumps(a)}" for a in plugins.aliases)
        with open(self.config, "w") as f:
            f.write(f"""[DEFAULT]
transport_url = {TRANSPORT_URL}
host = bench-{self.tag}
concurrency_backend = {concurrency}
log_file = {self.log}
use_stderr = false
service_down_time = {SERVICE_DOWN_TIME}

[database]
connection = {db_url}

[scheduler]
workers = {workers}
topic = {self.topic}
graceful_shutdown_timeout = 10

[filter_scheduler]
enabled_filters = {",".join(plugins.filters)}
weight_classes = {",".join(plugins.weighers)}

[pci]
{aliases}
{config_extra}""")
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None     # start until the first ping answered

    def start(self) -> None:
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler.cmd.scheduler", "--config-file",
                 self.config], stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def pids(self) -> list[int]:
        """The daemon and its worker processes."""
        if self.proc is None:
            return []
        pids = [self.proc.pid]
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
        return pids

    def peak_rss_mib(self) -> dict[int, float]:
        """VmHWM per process, MiB."""
        out = {}
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            out[pid] = int(line.split()[1]) / 1024
            except OSError:
                pass
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_tail(self, lines: int = 8) -> str:
        """The last lines of the daemon's log file and of its stderr."""
        text = ""
        for path in (self.log, self.stderr):
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += "".join(f.readlines()[-lines:])
        return text


def mariadb_available() -> bool:
    try:
        engine = sa.create_engine(bench_fleet.MYSQL_URL + "/")
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:
        return False


def e2e_available() -> str | None:
    """None when the daemon and client can run, else why not."""
    for mod in ("scheduler.rpcapi", "scheduler.cmd.scheduler", "scheduler.service"):
        try:
            __import__(mod)
        except Exception as e:
            return f"{mod} not importable ({type(e).__name__})"
    import socket

    host, port = TRANSPORT_URL.rsplit("@", 1)[-1].strip("/").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return f"RabbitMQ not answering on {host}:{port}"
    return None


@contextlib.contextmanager
def running_daemon(db_url: str, workers: int, plugins: Plugins, workdir: str,
                   start_timeout: float, concurrency: str = "eventlet",
                   config_extra: str = "") -> Iterator[tuple[Daemon, Any]]:
    """A started daemon and a client on its topic; stopped afterwards."""
    from scheduler.rpcapi import SchedulerAPI

    daemon = Daemon(db_url, workers, plugins, workdir, concurrency, config_extra)
    started = time.monotonic()
    daemon.start()
    api = ping = None
    try:
        ping = SchedulerAPI(cfg.CONF, topic=daemon.topic, timeout=0.5, retry=0)
        deadline = time.monotonic() + start_timeout
        while True:
            if daemon.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {daemon.proc.returncode}:\n"
                                   f"{daemon.log_tail()}")
            try:
                ping.ping()
                daemon.ready_s = time.monotonic() - started
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daemon did not answer within {start_timeout:.0f} s"
                                       f":\n{daemon.log_tail()}") from None
        api = SchedulerAPI(cfg.CONF, topic=daemon.topic, timeout=120)
        yield daemon, api
    finally:
        for client in (api, ping):
            if client is not None:
                client.close()
        daemon.stop()


