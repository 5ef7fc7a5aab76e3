"""Operator-tool figures (issue 13): fleet import, simulate and trace replay at scale.

    python tools/ops_bench.py import --hosts 1000 10000 [--mariadb]
    python tools/ops_bench.py simulate --hosts 1000 [--steps 60]
    python tools/ops_bench.py replay --hosts 1000 10000 [--requests 500]
    python tools/ops_bench.py capacity --hosts 1000 10000

``fleet_document(n, seed)`` is a fleet *file* (the YAML document an operator
imports, not database rows): varied sizes, two zones, NUMA on half the hosts,
2 PFs with 9 VFs each on a fifth, an aggregate with every host. ``trace(n, seed)``
is a mixed request trace (plain, pinned NUMA, PCI, anti-affinity, releases).
Figures are wall-clock seconds of one run; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import tempfile
import time
import uuid as uuidlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from oslo_config import cfg  # noqa: E402

from db import hosts as db_hosts  # noqa: E402
from db import migration  # noqa: E402
from db.api import Database  # noqa: E402

VCPUS = (32, 48, 64, 96)
MEMORY_MB = (131072, 262144, 393216, 524288)
MARIADB = os.environ.get("BERTH_BENCH_MYSQL_URL", "mysql+pymysql://root:@127.0.0.1:3306")


@functools.cache
def _numa(vcpus: int, memory_mb: int) -> dict:
    """One object per layout, shared by its hosts: a YAML dump writes it once with an
    anchor and aliases, as an operator's file would."""
    half = vcpus // 2
    cells = []
    for c in range(2):
        cpus = list(range(c * half, (c + 1) * half))
        shared, dedicated = cpus[:half // 2], cpus[half // 2:]
        cells.append({"id": c, "socket": c, "cpuset": shared, "pcpuset": dedicated,
                      "siblings": [dedicated[i:i + 2] for i in range(0, len(dedicated), 2)],
                      "memory_mb": memory_mb // 2,
                      "mempages": [{"size_kb": 4, "total": memory_mb // 4 * 256},
                                   {"size_kb": 2048, "total": 1024}]})
    return {"cells": cells}


@functools.cache
def _pci() -> list[dict]:
    out = []
    for cell, bus in enumerate(("3b", "86")):
        pf = f"0000:{bus}:00.0"
        out.append({"address": pf, "vendor_id": "8086", "product_id": "1572",
                    "dev_type": "type-PF", "numa_node": cell, "physical_network": "physnet1"})
        for v in range(9):
            out.append({"address": f"0000:{bus}:{2 + v // 8:02x}.{v % 8}", "vendor_id": "8086",
                        "product_id": "154c", "dev_type": "type-VF", "parent_addr": pf,
                        "numa_node": cell, "physical_network": "physnet1"})
    return out


def fleet_document(n: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    hosts = []
    for i in range(n):
        vcpus, mem = rng.choice(VCPUS), rng.choice(MEMORY_MB)
        host = {"host": f"compute-{i:05d}", "vcpus": vcpus, "memory_mb": mem,
                "local_gb": rng.choice((1000, 2000, 4000)),
                "cpu_allocation_ratio": rng.choice((1.0, 4.0, 8.0)),
                "hypervisor_version": rng.choice((6002000, 8002000)),
                "stats": {"rack": f"r{i % 40}"}}
        if i % 2 == 0:
            host["numa_topology"] = _numa(vcpus, mem)
        if i % 5 == 0:
            host["pci_devices"] = _pci()
        hosts.append(host)
    names = [h["host"] for h in hosts]
    return {"hosts": hosts, "aggregates": [
        {"name": "az1", "availability_zone": "az1", "hosts": names[: n // 2]},
        {"name": "az2", "availability_zone": "az2", "hosts": names[n // 2:]},
        {"name": "all", "hosts": names, "metadata": {"pool": "general"}},
        {"name": "ssd", "hosts": names[::3], "metadata": {"ssd": "true"}}]}


PLAIN = {"vcpus": 4, "memory_mb": 8192, "root_gb": 40}
PINNED = {"vcpus": 4, "memory_mb": 8192, "root_gb": 20,
          "extra_specs": {"hw:cpu_policy": "dedicated"}}
SRIOV = {"vcpus": 2, "memory_mb": 4096, "root_gb": 20,
         "extra_specs": {"pci_passthrough:alias": "nic:1"}}
ALIAS = ('{"name": "nic", "vendor_id": "8086", "product_id": "154c", '
         '"device_type": "type-VF"}')


def trace(n: int, seed: int = 2) -> list[dict]:
    """``n`` lines: mostly plain boots, some pinned, PCI and grouped, and releases."""
    rng = random.Random(seed)
    lines: list[dict] = []
    live: list[str] = []
    group = str(uuidlib.UUID(int=rng.getrandbits(128)))
    for _ in range(n):
        roll = rng.random()
        if roll < 0.15 and live:
            lines.append({"release": live.pop(rng.randrange(len(live)))})
            continue
        uid = str(uuidlib.UUID(int=rng.getrandbits(128)))
        if roll < 0.55:
            spec = {"flavor": dict(PLAIN)}
        elif roll < 0.7:
            spec = {"flavor": dict(PINNED)}
        elif roll < 0.85:
            spec = {"flavor": dict(SRIOV)}
        else:
            spec = {"flavor": dict(PLAIN),
                    "instance_group": {"uuid": group, "policy": "anti-affinity"}}
        if rng.random() < 0.3:
            spec["availability_zone"] = rng.choice(("az1", "az2"))
        spec["instance_uuids"] = [uid]
        live.append(uid)
        lines.append(spec)
    return lines


def _database(kind: str, tmp: str):
    if kind == "sqlite":
        return Database(f"sqlite:///{tmp}/bench.sqlite"), None
    from tests import services

    name, url = services.create_mariadb_database()
    return Database(url), name


def _conf() -> cfg.ConfigOpts:
    from scheduler import opts

    opts.list_opts()
    conf = cfg.CONF
    conf([], project="berth", default_config_files=[])
    conf.set_override("alias", [ALIAS], group="pci")
    return conf


def bench_import(sizes: list[int], kinds: list[str]) -> None:
    from scheduler import fleet as fleet_mod
    from scheduler.host_manager import HostManager

    conf = _conf()
    for kind in kinds:
        for n in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                import yaml

                path = os.path.join(tmp, "fleet.json")
                doc = fleet_document(n)
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
                yaml_path = os.path.join(tmp, "fleet.yaml")
                with open(yaml_path, "w", encoding="utf-8") as f:
                    yaml.dump(doc, f, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                              default_flow_style=None)
                fleet_mod.forget_validated()
                t = time.perf_counter()
                fleet_mod.load_fleet_file(yaml_path)
                yaml_s = time.perf_counter() - t
                db, name = _database(kind, tmp)
                try:
                    migration.db_sync(db)
                    fleet_mod.forget_validated()
                    t0 = time.perf_counter()
                    fleet = fleet_mod.load_fleet_file(path)
                    t1 = time.perf_counter()
                    db_hosts.import_fleet(db, fleet)
                    t2 = time.perf_counter()
                    db_hosts.import_fleet(db, fleet)
                    t3 = time.perf_counter()
                    hm = HostManager(db, conf)
                    hm.load_pci_pools = True
                    hm.refresh()
                    t4 = time.perf_counter()
                    hm.close()
                    load = t4 - t3
                    print(f"{kind:7} {n:6} hosts: read+validate (JSON) {t1 - t0:5.2f}s  "
                          f"write {t2 - t1:6.2f}s  re-import (unchanged) {t3 - t2:6.2f}s  "
                          f"HostManager load {load:5.2f}s  import/load "
                          f"{(t2 - t0) / load:5.1f}x; read+validate as YAML (anchors) "
                          f"{yaml_s:5.2f}s -> {(yaml_s + t2 - t1) / load:5.1f}x", flush=True)
                finally:
                    db.dispose()
                    if name:
                        from tests import services
                        services.drop_mariadb_database(name)


def _scenario(n: int, steps: int) -> dict:
    doc = fleet_document(n)
    body = []
    for i, line in enumerate(trace(steps)):
        if "release" in line:
            body.append({"release": line["release"]})
        else:
            body.append({"select": line, "description": f"request {i}"})
    return {"fleet": doc, "steps": body, "config": {"pci": {"alias": [ALIAS]}}}


def bench_simulate(n: int, steps: int) -> None:
    from scheduler import simulate
    from scheduler.filter_scheduler import FilterScheduler
    from scheduler.host_manager import HostManager

    conf = _conf()
    data = _scenario(n, steps)
    t0 = time.perf_counter()
    result = simulate.run_scenario(data, conf)
    total = time.perf_counter() - t0
    timing = result.timing
    per_step = timing["steps_s"] / len(result.steps)
    # The scheduler alone: the same requests on the same fleet, no runner.
    from scheduler import fleet as fleet_mod
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{tmp}/s.sqlite")
        migration.db_sync(db)
        db_hosts.import_fleet(db, fleet_mod.load_fleet(data["fleet"]))
        sched = FilterScheduler(HostManager(db, conf), conf)
        sched.warm_up()
        t0 = time.perf_counter()
        for step in data["steps"]:
            try:
                if "release" in step:
                    sched.release(step["release"])
                else:
                    sched.select_destinations(sched.parse_request(step["select"]))
            except Exception:        # refusals cost what they cost
                pass
        own = (time.perf_counter() - t0) / len(data["steps"])
        sched.host_manager.close()
        db.dispose()
    print(f"simulate {n} hosts, {len(result.steps)} steps: total {total:.2f}s "
          f"(setup {timing['setup_s']:.2f}s, final check {timing['final_check_s']:.2f}s); "
          f"per step {per_step * 1000:.1f} ms vs scheduler alone {own * 1000:.1f} ms "
          f"({per_step / own:.2f}x)", flush=True)


def bench_replay(sizes: list[int], requests: int) -> None:
    from scheduler import replay

    conf = _conf()
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            lines = trace(requests)
            t0 = time.perf_counter()
            report = replay.replay(fleet_document(n), lines, conf)
            total = time.perf_counter() - t0
            t = report["timing"]
            print(f"replay {n} hosts, {len(lines)} lines: total {total:.2f}s (fleet "
                  f"validation {t['fleet_s']:.2f}s, import+load {t['setup_s']:.2f}s, replay "
                  f"{t['replay_s']:.2f}s = {t['replay_s'] / len(lines) * 1000:.1f} ms/line, "
                  f"report {t['report_s']:.2f}s); placed {report['placed']}, refused "
                  f"{report['refused']}", flush=True)
            del tmp


def bench_capacity(sizes: list[int]) -> None:
    from scheduler import capacity, simulate
    from scheduler import fleet as fleet_mod

    conf = _conf()
    for n in sizes:
        with simulate.throwaway_scheduler(fleet_mod.load_fleet(fleet_document(n)), conf) \
                as (_db, sched):
            for name, flavor in (("plain", PLAIN), ("pinned", PINNED), ("sriov", SRIOV)):
                [(_n, spec)] = capacity.parse_requests({"flavor": flavor}, sched.parse_request)
                t0 = time.perf_counter()
                fits = capacity.count(sched, spec)["fits"]
                took = time.perf_counter() - t0
                print(f"capacity {n} hosts, {name}: {fits} fit, {took:.2f}s "
                      f"({took / max(fits, 1) * 1000:.2f} ms per instance counted)",
                      flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    imp = sub.add_parser("import")
    imp.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    imp.add_argument("--mariadb", action="store_true", help="also on MariaDB")
    sim = sub.add_parser("simulate")
    sim.add_argument("--hosts", type=int, default=1000)
    sim.add_argument("--steps", type=int, default=60)
    rep = sub.add_parser("replay")
    rep.add_argument("--hosts", type=int, nargs="+", default=[1000, 10000])
    rep.add_argument("--requests", type=int, default=500)
    gen = sub.add_parser("fleet", help="write a fleet file (JSON if OUT ends in .json)")
    gen.add_argument("--hosts", type=int, default=1000)
    gen.add_argument("out")
    tr = sub.add_parser("trace", help="write a JSONL trace (its SR-IOV requests need the "
                                      "alias in ops_bench.ALIAS as [pci] alias)")
    tr.add_argument("--lines", type=int, default=300)
    tr.add_argument("out")
    cap = sub.add_parser("capacity")
    cap.add_argument("--hosts", type=int, nargs="+", default=[1000])
    args = parser.parse_args()
    if args.what == "import":
        bench_import(args.hosts, ["sqlite"] + (["mariadb"] if args.mariadb else []))
    elif args.what == "simulate":
        bench_simulate(args.hosts, args.steps)
    elif args.what == "replay":
        bench_replay(args.hosts, args.requests)
    elif args.what == "capacity":
        bench_capacity(args.hosts)
    elif args.what == "trace":
        with open(args.out, "w", encoding="utf-8") as f:
            for line in trace(args.lines):
                f.write(json.dumps(line) + "\n")
        print(json.dumps({"lines": args.lines, "file": args.out}))
    else:
        import yaml
        with open(args.out, "w", encoding="utf-8") as f:
            if args.out.endswith(".json"):
                json.dump(fleet_document(args.hosts), f)
            else:
                yaml.safe_dump(fleet_document(args.hosts), f, default_flow_style=None)
        print(json.dumps({"hosts": args.hosts, "file": args.out}))


if __name__ == "__main__":
    main()
