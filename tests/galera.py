"""A MariaDB Galera cluster on loopback, for tests: ``n`` mariadbd processes of
this machine's MariaDB with the galera-4 provider, each with its own data
directory, SQL port and group-communication port under a temporary directory;
the first bootstraps the cluster, the others join it by state transfer (rsync).

Skips (fails under CI) when MariaDB's server binary, the Galera provider or
rsync is missing. Nothing of the shared MariaDB on port 3306 is touched.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time

import pytest

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
MARIADBD = "/usr/sbin/mariadbd"


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port() -> int:
    """A free port below the kernel's ephemeral range: a port the kernel hands
    out to outgoing connections can be taken between this pick and the node's
    bind (under load, a node's group-communication port was), one below the
    range cannot."""
    rng = random.Random()
    high = max(_ephemeral_low(), 12000)
    for _ in range(200):
        port = rng.randrange(10000, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_galera() -> None:
    missing = [p for p in (PROVIDER, MARIADBD) if not os.path.exists(p)]
    missing += [b for b in ("rsync", "mariadb-install-db") if shutil.which(b) is None]
    if missing:
        msg = f"Galera cluster not available: missing {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


class Node:
    def __init__(self, base: str, index: int, gcomm_ports: list[int]) -> None:
        self.index = index
        self.dir = os.path.join(base, f"node{index}")
        self.datadir = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.gcomm = gcomm_ports[index]
        self.cnf = os.path.join(self.dir, "my.cnf")
        self.log = os.path.join(self.dir, "error.log")
        self.proc: subprocess.Popen | None = None
        os.makedirs(self.datadir, exist_ok=True)
        # the server and its rsync daemon run as mysql (rsync as root would
        # drop to nobody and could not write the data directory)
        os.chmod(base, 0o755)
        shutil.chown(self.dir, "mysql", "mysql")
        shutil.chown(self.datadir, "mysql", "mysql")
        peers = ",".join(f"127.0.0.1:{p}" for p in gcomm_ports)
        with open(self.cnf, "w") as f:
            f.write(f"""[mysqld]
user=mysql
datadir={self.datadir}
socket={self.dir}/mysqld.sock
pid-file={self.dir}/mysqld.pid
log-error={self.log}
port={self.port}
bind-address=127.0.0.1
skip-name-resolve
innodb_buffer_pool_size=32M
innodb_log_file_size=16M
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider={PROVIDER}
wsrep_cluster_name=berth_test
wsrep_cluster_address=gcomm://{peers}
wsrep_node_name=node{index}
wsrep_node_address=127.0.0.1:{self.gcomm}
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm};ist.recv_addr=127.0.0.1:{_free_port()};gcache.size=32M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT5S"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:{_free_port()}
""")

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root:@127.0.0.1:{self.port}"

    def start(self, bootstrap: bool = False) -> None:
        args = [MARIADBD, f"--defaults-file={self.cnf}"]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def status(self, name: str) -> str | None:
        out = subprocess.run(
            ["mysql", "-uroot", "-h127.0.0.1", f"-P{self.port}", "-N", "-B",
             "--connect-timeout=2", "-e", f"SHOW STATUS LIKE '{name}'"],
            capture_output=True, text=True, timeout=10)
        if out.returncode != 0 or not out.stdout.strip():
            return None
        return out.stdout.split("\t", 1)[1].strip()

    def wait_synced(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"node{self.index} exited:\n{self.log_tail()}")
            if self.status("wsrep_local_state_comment") == "Synced":
                return
            time.sleep(0.5)
        raise AssertionError(f"node{self.index} not synced:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def freeze(self) -> None:
        """Stop the process (SIGSTOP): it holds its connections and answers nothing."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


class GaleraCluster:
    """``n`` nodes; ``start`` bootstraps the first and joins the others."""

    def __init__(self, base: str, n: int = 3) -> None:
        require_galera()
        self.base = base
        gcomm = [_free_port() for _ in range(n)]
        self.nodes = [Node(base, i, gcomm) for i in range(n)]

    def start(self) -> None:
        first = self.nodes[0]
        subprocess.run(["mariadb-install-db", f"--defaults-file={first.cnf}",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=120)
        first.start(bootstrap=True)
        first.wait_synced()
        for node in self.nodes[1:]:
            self.join(node)

    def join(self, node: Node, tries: int = 3) -> None:
        """Start ``node`` and wait until it is synced; a failed state transfer
        (its rsync daemon's port taken meanwhile) is tried again."""
        for attempt in range(tries):
            node.start()
            try:
                node.wait_synced()
                return
            except AssertionError:
                node.kill()
                if attempt == tries - 1:
                    raise
                if not os.path.exists(os.path.join(node.datadir, "mysql")):
                    for name in os.listdir(node.datadir):
                        os.remove(os.path.join(node.datadir, name))
                time.sleep(1)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
