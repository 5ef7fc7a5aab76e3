"""Read-your-writes on a 3-node MariaDB Galera cluster on loopback (``tox -e chaos``;
it leaves the shared MariaDB alone).

A scheduler per node (each its own Database, host cache and claims): a claim
committed through one node is confirmed through a second and released through
the third at once, while other threads claim and release through the first.
Every read that decides those answers waits for the cluster's earlier writes
(``[database] wsrep_sync_wait``), so none answers "unknown" or "held nothing"
for what another node just wrote. The same loop with the setting off is run to
show what it prevents (its misses are printed, not asserted: they depend on
timing). At the end every node holds the same consumers and the invariants hold
on each.
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time

import pytest
import sqlalchemy as sa
from oslo_config import cfg

from db import hosts as db_hosts
from db import migration, models
from db.api import Database
from scheduler import fleet as fleet_mod
from scheduler import simulate
from scheduler.filter_scheduler import FilterScheduler
from scheduler.host_manager import HostManager
from tests.galera import GaleraCluster

FLEET = {"hosts": [{"host": f"g{i}", "vcpus": 64, "memory_mb": 131072, "local_gb": 4000,
                    "cpu_allocation_ratio": 1.0} for i in range(8)]}
ONE = {"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1}, "project_id": "p1"}
ROUNDS = 60


@pytest.fixture(scope="module")
def cluster():
    # not under pytest's private temp directory: the nodes run as mysql
    base = tempfile.mkdtemp(prefix="berth-galera-")
    c = GaleraCluster(base, 3)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def schedulers(cluster):
    import uuid

    name = "berth_galera_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(cluster.nodes[0].url + "/")
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    dbs = [Database(f"{n.url}/{name}?charset=utf8mb4") for n in cluster.nodes]
    migration.db_sync(dbs[0])
    db_hosts.import_fleet(dbs[0], fleet_mod.load_fleet(FLEET))
    conf = cfg.CONF
    conf([], project="berth")
    try:
        yield [FilterScheduler(HostManager(db, conf), conf) for db in dbs]
    finally:
        for db in dbs:
            db.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def _place(sched, pending=True):
    return sched.select_destinations(sched.parse_request(ONE), None, pending=pending)[0][0]


def _consumers(db) -> set[str]:
    c = models.Consumer.__table__
    with db.causal_reader() as conn:
        return set(conn.execute(sa.select(c.c.uuid)).scalars())


def _rounds(a, b, c, n: int) -> dict:
    """Claim on a, confirm on b, release on c, release again on a; what each
    answered wrong and how long the confirms took."""
    wrong = {"confirm unknown": 0, "release held nothing": 0, "re-release": 0}
    took = []
    for _ in range(n):
        vm = _place(a).instance_uuid
        started = time.perf_counter()
        confirmed, unknown = b.confirm([vm])
        took.append((time.perf_counter() - started) * 1000)
        wrong["confirm unknown"] += bool(unknown)
        if unknown:                 # what the client does: give it back
            a.release(vm)
            continue
        wrong["release held nothing"] += not c.release(vm)
        wrong["re-release"] += not a.release(vm)
    return {"wrong": wrong, "confirm_ms_p50": round(statistics.median(took), 2),
            "confirm_ms_p99": round(sorted(took)[int(len(took) * 0.99) - 1], 2)}


def _noise(sched, stop: threading.Event) -> None:
    """Claims and releases through one node while the rounds run."""
    while not stop.is_set():
        sched.release(_place(sched, pending=False).instance_uuid)


@pytest.mark.parametrize("sync_wait", [0, 1])
def test_answers_read_the_other_nodes_writes(schedulers, sync_wait, capsys):
    a, b, c = schedulers
    for s in schedulers:
        s.db.sync_wait = sync_wait
        s.db.dispose()          # new connections with the setting
    stop = threading.Event()
    noise = [threading.Thread(target=_noise, args=(a, stop)) for _ in range(2)]
    for t in noise:
        t.start()
    try:
        result = _rounds(a, b, c, ROUNDS)
    finally:
        stop.set()
        for t in noise:
            t.join()
    with capsys.disabled():
        print(f"\nGalera, wsrep_sync_wait={sync_wait}, {ROUNDS} rounds: {result}")
    if sync_wait:
        assert result["wrong"] == {"confirm unknown": 0, "release held nothing": 0,
                                   "re-release": 0}, result
    # read what each node holds with the causal wait on: with it off (the
    # [0] case) a node may not have applied the last releases yet
    for s in schedulers:
        s.db.sync_wait = 1
        s.db.dispose()
    held = [_consumers(s.db) for s in schedulers]
    assert held[0] == held[1] == held[2] == set()
    for s in schedulers:
        with s.db.causal_reader() as conn:
            assert simulate.check_invariants(s.db, conn=conn) == []


# -- daemons, one per node, on one topic --------------------------------------------------

DAEMON_FLEET = {"hosts": [{"host": f"gd{i:02d}", "vcpus": 16, "memory_mb": 32768,
                           "local_gb": 400, "cpu_allocation_ratio": 1.0}
                          for i in range(24)]}
#: claim_ttl above what a confirm can take here (the client's 10 s timeout,
#: sent twice, while a node is frozen 8 s): a claim that expires before its
#: confirm got through is a true ClaimExpired, and with claim_ttl = 10 one did
#: (the first confirm waited 10 s on the frozen node's daemon). Within this
#: bound a ClaimExpired can only be a confirm that read a node behind the
#: claim: the spurious kind the test counts as wrong.
DAEMON_CONFIG = """[scheduler]
claim_ttl = 30
reaper_interval = 1
request_timeout = 10
"""


class _Clients:
    """Threads that place (plain and hard anti-affinity members, through the
    client library: confirmed automatically), keep a few each and release the
    oldest; every answer is recorded."""

    def __init__(self, api, threads: int) -> None:
        import collections

        self.api = api
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.held: set[str] = set()          # placed and confirmed, not released
        self.released: set[str] = set()
        self.uncertain: set[str] = set()     # a call on it got no answer
        self.outcomes: collections.Counter = collections.Counter()
        self.wrong: list[str] = []           # answers that contradict what happened
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def _run(self, index: int) -> None:
        import collections
        import uuid

        from scheduler import exception

        mine: collections.deque = collections.deque()
        group = str(uuid.uuid4())
        n = 0
        while not self.stop.is_set():
            n += 1
            spec = {"flavor": {"vcpus": 1, "memory_mb": 1024, "root_gb": 5},
                    "project_id": "p1"}
            if n % 3 == 0:
                spec["instance_group"] = {"uuid": group, "policy": "anti-affinity",
                                          "rules": {"max_server_per_host": 1}}
            uid = str(uuid.uuid4())
            try:
                self.api.select_destinations(None, spec, instance_uuids=[uid])
                self.api.wait_confirmed([uid])      # confirmed in the background
            except exception.BerthError as e:
                self._count(f"select:{type(e).__name__}")
                if isinstance(e, exception.ClaimExpired):
                    with self.lock:
                        self.wrong.append(f"ClaimExpired for {uid}")
                if isinstance(e, exception.ServiceUnavailable):
                    with self.lock:
                        self.uncertain.add(uid)
            except Exception as e:      # noqa: BLE001 - a timeout: uncertain
                self._count(f"select:{type(e).__name__}")
                with self.lock:
                    self.uncertain.add(uid)
            else:
                self._count("select:placed")
                with self.lock:
                    self.held.add(uid)
                mine.append(uid)
            if len(mine) > 6:
                self._release(mine.popleft())

    def _release(self, uid: str) -> None:
        try:
            answer = self.api.release(None, uid)
        except Exception as e:          # noqa: BLE001 - sent again at the end
            self._count(f"release:{type(e).__name__}")
            with self.lock:
                self.uncertain.add(uid)
            return
        self._count(f"release:{answer}")
        with self.lock:
            if not answer:
                self.wrong.append(f"release of held {uid} answered False")
            self.held.discard(uid)
            self.released.add(uid)
            self.uncertain.discard(uid)

    def _count(self, key: str) -> None:
        with self.lock:
            self.outcomes[key] += 1

    def resend(self) -> None:
        """Release, again, what got no answer (and what is held), as a client
        does once the service answers."""
        for uid in sorted(self.uncertain | self.held):
            for _ in range(20):
                try:
                    self.api.release(None, uid)
                    break
                except Exception:       # noqa: BLE001
                    time.sleep(0.5)
            self.held.discard(uid)
            self.released.add(uid)


def _wait_empty(db, timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = _consumers(db)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


@pytest.mark.parametrize("fault", ["killed", "frozen"])
def test_daemons_one_per_node_with_a_node_lost(cluster, tmp_path, monkeypatch, fault):
    """Three daemons, each on its own Galera node, serve one topic; 8 clients
    place (plain and hard anti-affinity members) and release; node 2 is
    SIGKILLed, then started again (it rejoins), or frozen (SIGSTOP) twice for
    8 s. No answer contradicts what was
    done (no release of a held instance answers False, no ClaimExpired); after
    the clients release what they hold and the reaper's claim_ttl, no
    allocation is left on any node, every node holds the same rows and the
    invariants hold on each."""
    from tests import services
    from tests.functional.daemon import Daemon

    monkeypatch.setattr(services, "MYSQL_URL", cluster.nodes[0].url)
    first_port = f"127.0.0.1:{cluster.nodes[0].port}/"
    daemons: list[Daemon] = []
    node_dbs: list[Database] = []
    try:
        for node in cluster.nodes:
            d = Daemon(tmp_path, workers=1, fleet=DAEMON_FLEET, extra=DAEMON_CONFIG,
                       share_with=daemons[0] if daemons else None)
            here = f"127.0.0.1:{node.port}/"
            d.config.write_text(d.config.read_text().replace(first_port, here))
            daemons.append(d)
            node_dbs.append(Database(d.db_url.replace(first_port, here)))
        for d in daemons:
            d.start(timeout=120)
        api = daemons[0].api(timeout=10)
        serving, deadline = set(), time.monotonic() + 120
        while serving != {d.proc.pid for d in daemons}:     # each consumes the topic
            assert time.monotonic() < deadline, [d.log_tail() for d in daemons]
            serving.add(api.ping()["pid"])
        clients = _Clients(api, threads=8)
        for t in clients.threads:
            t.start()
        try:
            time.sleep(10)
            t_kill = time.monotonic()
            node = cluster.nodes[2]
            if fault == "killed":
                node.kill()
                time.sleep(10)
                cluster.join(node)
            else:
                for _ in range(2):
                    node.freeze()
                    time.sleep(8)
                    node.thaw()
                    time.sleep(4)
                node.wait_synced()
            rejoined_s = time.monotonic() - t_kill
            time.sleep(10)
        finally:
            clients.stop.set()
            for t in clients.threads:
                t.join(120)
        clients.resend()
        left = [_wait_empty(db, 70) for db in node_dbs]     # claim_ttl + the reaper
        result = {"calls": sum(clients.outcomes.values()),
                  "outcomes": dict(sorted(clients.outcomes.items())),
                  "node_rejoined_after_s": round(rejoined_s, 1),
                  "wrong_answers": clients.wrong,
                  "left_per_node": [len(x) for x in left],
                  # the lost node's daemon noticed (its calls: ServiceUnavailable,
                  # or answered once its connections reached the node again)
                  "outage_logged_by_its_daemon":
                      "Database unavailable" in daemons[2].log.read_text()}
        print(f"\nGalera, a daemon per node, node 2 {fault}: {result}")
        assert f"127.0.0.1:{cluster.nodes[2].port}/" in daemons[2].config.read_text()
        assert clients.wrong == [], result
        assert left == [set(), set(), set()], result
        for db in node_dbs:
            with db.causal_reader() as conn:
                assert simulate.check_invariants(db, conn=conn) == []
        assert not [d.log.name for d in daemons if "Traceback" in d.log.read_text()], \
            [d.log_tail() for d in daemons]
    finally:
        for d in reversed(daemons):
            try:
                d.stop(timeout=30)
            except Exception:       # noqa: BLE001 - close() below
                pass
            d.close()
        for db in node_dbs:
            db.dispose()
