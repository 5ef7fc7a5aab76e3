"""CPU of ``db.claims.claim`` alone: the claim transaction of a plain placement.

    python tools/bench/claim_cpu.py --backend mariadb --claims 2000 --rounds 5

A throwaway database (``tools/bench/fleet.create_database``: a SQLite file, or
a uniquely named MariaDB database at ``BERTH_BENCH_MYSQL_URL``) gets ``--hosts``
plain hosts. Each round makes ``--claims`` claims of what a one-instance
request with the daemon's defaults writes (three amounts of the node's root
provider, its spec on its own row, pending, the node change journal), one host
after the other, and times each ``claim`` call with ``time.process_time``;
every claim is released right after (timed apart), so the tables keep their size.
Prints the CPU per claim of each round and their median (ms), the median
CPU per release, and with
``--cprofile PATH`` the profile of one more round's claims. With
``--server-cpu`` (MariaDB on this machine) also the database server's CPU
spent during the claims (its ``/proc`` user and system time read before and
after each claim: what other clients make it do meanwhile counts too, so
compare alternating runs on a quiet server).

CPU time, not wall-clock: the figure holds on a shared machine better than
rates do, but its load still moves it by a few per cent; compare two trees
with alternating runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid as uuidlib

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))

#: The spec a one-instance request stores with its claim (about its size).
SPEC = json.dumps({"flavor": {"vcpus": 1, "memory_mb": 512, "root_gb": 1,
                              "extra_specs": {}}, "image": {"properties": {}},
                   "num_instances": 1, "project_id": "p" * 32, "user_id": "u" * 32,
                   "scheduler_hints": {}, "availability_zone": None}, sort_keys=True)


def _hosts(db, count: int) -> list[tuple[int, int, str]]:
    """(node id, root provider id, host) of ``count`` new hosts."""
    import sqlalchemy as sa

    from db import hosts as db_hosts
    from db import models
    from scheduler import fleet as fleet_mod

    db_hosts.import_fleet(db, fleet_mod.load_fleet({"hosts": [
        {"host": f"h{i:05d}", "vcpus": 4096, "memory_mb": 4096 * 1024, "local_gb": 100000}
        for i in range(count)]}))
    cn, rp = models.ComputeNode.__table__, models.ResourceProvider.__table__
    with db.reader_connection() as conn:
        return [tuple(row) for row in conn.execute(
            sa.select(cn.c.id, rp.c.id, cn.c.host)
            .join(rp, sa.and_(rp.c.compute_node_id == cn.c.id, rp.c.parent_id.is_(None)))
            .order_by(cn.c.id))]


def _server_pid() -> int:
    """The pid of the local MariaDB (or MySQL) server."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() in ("mariadbd", "mysqld"):
                        return int(entry)
            except OSError:
                continue
    raise SystemExit("--server-cpu: no mariadbd or mysqld process here")


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU of process ``pid`` so far (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(backend: str, hosts: int, claims_per_round: int, rounds: int,
        cprofile: str | None, server: list[float] | None = None,
        releases: list[float] | None = None) -> list[float]:
    """CPU per claim (ms) of each round; ``server``: gets the database
    server's CPU per claim (ms) of each round; ``releases``: the CPU per
    release (ms) of each round."""
    import sqlalchemy as sa

    from db import claims, models
    from tools.bench import fleet as bench_fleet

    bdb = bench_fleet.create_database(backend)
    try:
        db = bdb.db
        nodes = _hosts(db, hosts)
        cn = models.ComputeNode.__table__
        with db.reader_connection() as conn:
            generation = dict(conn.execute(sa.select(cn.c.id, cn.c.generation)).all())
        per_round = []
        pid = _server_pid() if server is not None else None
        profiler = None
        # round 0 warms up and the profiled round comes last: neither is reported
        for r in range(rounds + 1 + bool(cprofile)):
            if r > rounds:
                import cProfile

                profiler = cProfile.Profile()
            spent = server_spent = released = 0.0
            for i in range(claims_per_round):
                node, root, host = nodes[i % len(nodes)]
                uuid = str(uuidlib.uuid4())
                rec = claims.ClaimRecord(
                    instance_uuid=uuid, node_id=node, seen_generation=generation[node],
                    items=((root, "VCPU", 1), (root, "MEMORY_MB", 512), (root, "DISK_GB", 1)),
                    project_id="p" * 32, user_id="u" * 32, request_spec=SPEC,
                    share_spec=False, pending=True, host=host)
                if profiler is not None:
                    profiler.enable()
                s0 = _cpu_seconds(pid) if pid else 0.0
                t0 = time.process_time()
                result = claims.claim(db, rec)
                spent += time.process_time() - t0
                if pid:
                    server_spent += _cpu_seconds(pid) - s0
                if profiler is not None:
                    profiler.disable()
                t0 = time.process_time()
                generation[node] = claims.release(db, uuid).generation
                released += time.process_time() - t0
                assert result.generation + 1 == generation[node]
            if 0 < r <= rounds:
                per_round.append(spent / claims_per_round * 1000)
                if server is not None:
                    server.append(server_spent / claims_per_round * 1000)
                if releases is not None:
                    releases.append(released / claims_per_round * 1000)
        if profiler is not None:
            profiler.dump_stats(cprofile)
        return per_round
    finally:
        bdb.drop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--backend", choices=("sqlite", "mariadb"), default="mariadb")
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--claims", type=int, default=1000, help="claims per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cprofile", metavar="PATH", help="profile one more round's claims")
    p.add_argument("--server-cpu", action="store_true",
                   help="also the local MariaDB server's CPU per claim")
    args = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.WARNING)
    server: list[float] | None = [] if args.server_cpu else None
    releases: list[float] = []
    per_round = run(args.backend, args.hosts, args.claims, args.rounds, args.cprofile,
                    server, releases)
    print(f"claim CPU per call ({args.backend}, {args.claims} claims a round), ms: "
          + " ".join(f"{v:.3f}" for v in per_round)
          + f"; median {statistics.median(per_round):.3f}; load {os.getloadavg()[0]:.1f}")
    print(f"release CPU per call, ms: median {statistics.median(releases):.3f}")
    if server:
        print("server CPU per claim, ms: " + " ".join(f"{v:.3f}" for v in server)
              + f"; median {statistics.median(server):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
