"""``berth-manage host import|list|show|delete``: the fleet's compute nodes."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from typing import TextIO

from db import hosts as db_hosts
from scheduler import fleet as fleet_mod
from scheduler.cmd import common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("host", help="compute hosts")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    imp = commands.add_parser("import", help="create or update hosts and aggregates from a "
                                             "fleet YAML file (idempotent)")
    imp.add_argument("file", metavar="FILE.yaml",
                     help="fleet file; JSON (the same document) reads much faster for "
                          "thousands of hosts")
    imp.add_argument("--dry-run", action="store_true",
                     help="run the whole import, every check against the stored hosts, "
                          "allocations, devices and aggregates included, then roll it "
                          "back: write nothing")
    common.add_json_flag(imp)
    imp.set_defaults(func=do_import)

    lst = commands.add_parser("list", help="hosts with capacity, usage and zone")
    common.add_json_flag(lst)
    lst.set_defaults(func=do_list)

    show = commands.add_parser("show", help="one host in full")
    show.add_argument("name", help="host or node name")
    common.add_json_flag(show)
    show.set_defaults(func=do_show)

    delete = commands.add_parser("delete", help="delete a host (refused while it has "
                                                "allocations, unless --force)")
    delete.add_argument("name", help="host or node name")
    delete.add_argument("--force", action="store_true",
                        help="also delete the host's allocations and in-use devices")
    delete.set_defaults(func=do_delete)


def do_import(args: argparse.Namespace) -> int:
    fleet = fleet_mod.load_fleet_file(args.file)
    result = db_hosts.import_fleet(common.database(), fleet,
                                   progress=terminal_progress(sys.stderr),
                                   dry_run=args.dry_run)
    if args.json:
        common.print_json(dict(dataclasses.asdict(result), dry_run=args.dry_run))
    elif args.dry_run:
        print(f"{common.printable(args.file)}: valid ({len(fleet.hosts)} hosts, "
              f"{len(fleet.aggregates)} aggregates); would import: {result.summary()}; "
              f"nothing written")
    else:
        print(f"imported {common.printable(args.file)}: {result.summary()}")
    for warning in result.warnings:
        print(f"warning: {common.printable(warning)}", file=sys.stderr)
    return common.EXIT_OK


def terminal_progress(stream: TextIO) -> Callable[[str, int, int], None] | None:
    """A progress line rewritten in place on ``stream``, only when it is a terminal
    (a pipe or a log file gets nothing)."""
    if not stream.isatty():
        return None
    started = time.monotonic()

    def show(phase: str, done: int, total: int) -> None:
        count = f" {done}/{total}" if total else ""
        stream.write(f"\r\x1b[K{time.monotonic() - started:6.1f}s {phase}{count}")
        if phase == "committing":
            stream.write("\n")
        stream.flush()
    return show


def _used_of(used: str, total: str) -> Callable[[dict], str]:
    return lambda row: f"{row[used]}/{row[total]}"


HOST_COLUMNS: list[common.Column] = [
    ("HOST", "host"),
    ("NODE", "node"),
    ("AZ", "availability_zone"),
    ("VCPUS", _used_of("vcpus_used", "vcpus")),
    ("PCPUS", lambda r: _used_of("pcpus_used", "pcpus")(r) if r["pcpus"] else None),
    ("RAM_MB", _used_of("memory_mb_used", "memory_mb")),
    ("DISK_GB", _used_of("local_gb_used", "local_gb")),
    ("VMS", "running_vms"),
    ("PCI", lambda r: (f"{r['pci_devices']['available']}/{r['pci_devices']['total']}"
                       if r["pci_devices"]["total"] else None)),
    ("NUMA", lambda r: r["numa_cells"] or None),
    ("OTHER", lambda r: " ".join(
        f"{rc}={inv['used']}/{inv['total']}" for rc, inv in r["resources"].items()
        if rc not in ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")) or None),
    ("CHILDREN", lambda r: len(r["providers"]) or None),
    ("STATE", lambda r: "disabled" if r["disabled"] else "enabled"),
    ("AGGREGATES", "aggregates"),
]


def do_list(args: argparse.Namespace) -> int:
    hosts = db_hosts.list_hosts(common.database())
    if args.json:
        common.print_json(hosts)
    else:
        common.print_table(hosts, HOST_COLUMNS, empty="no hosts")
    return common.EXIT_OK


_SHOW_KEYS = (
    "host", "node", "uuid", "availability_zone", "aggregates", "disabled",
    "disabled_reason", "running_vms", "current_workload", "traits", "allocations",
    "pci_devices", "hypervisor_type", "hypervisor_version", "host_ip", "cpu_info",
    "supported_instances", "stats", "metrics", "last_seen_up", "generation",
    "created_at", "updated_at",
)

_INVENTORY_COLUMNS: list[common.Column] = [
    ("PROVIDER", "provider"), ("CLASS", "resource_class"), ("TOTAL", "total"),
    ("RESERVED", "reserved"), ("RATIO", "allocation_ratio"), ("USED", "used"),
    ("FREE", "free"), ("MIN", "min_unit"), ("MAX", "max_unit"), ("STEP", "step_size"),
]

_NUMA_COLUMNS: list[common.Column] = [
    ("CELL", "id"),
    ("SOCKET", "socket"),
    ("CPUSET", "cpuset"),
    ("PCPUSET", "pcpuset"),
    ("MEMORY_MB", "memory_mb"),
    ("HUGEPAGES", lambda c: ",".join(
        f"{_page_size(p['size_kb'])}x{p['total']}"
        + (f"({p['reserved']} reserved)" if p.get("reserved") else "")
        for p in c.get("mempages") or [] if p["size_kb"] != 4)),
]


def _page_size(size_kb: int) -> str:
    for unit, kb in (("G", 1 << 20), ("M", 1 << 10)):
        if size_kb % kb == 0:
            return f"{size_kb // kb}{unit}"
    return f"{size_kb}K"


def do_show(args: argparse.Namespace) -> int:
    host = db_hosts.get_host(common.database(), args.name)
    if args.json:
        common.print_json(host)
        return common.EXIT_OK
    common.print_fields(host, [k for k in _SHOW_KEYS if k in host])
    inventories = [dict(inv, provider=host["node"], resource_class=rc)
                   for rc, inv in host["resources"].items()]
    for child in host.get("providers") or ():
        inventories += [dict(inv, provider=child["name"], resource_class=rc)
                        for rc, inv in child["resources"].items()]
    if inventories:
        print()
        common.print_table(inventories, _INVENTORY_COLUMNS)
    for child in host.get("providers") or ():
        print(f"provider {child['name']} ({child['uuid']}), parent {child['parent']}: "
              f"traits {', '.join(child['traits']) or '-'}")
    cells = (host.get("numa_topology") or {}).get("cells") or []
    if cells:
        print()
        common.print_table(cells, _NUMA_COLUMNS)
    return common.EXIT_OK


def do_delete(args: argparse.Namespace) -> int:
    result = db_hosts.delete_host(common.database(), args.name, force=args.force)
    print(f"deleted host {args.name} (nodes: {', '.join(result['nodes'])}; "
          f"{result['allocations_deleted']} allocation(s), "
          f"{result['pci_devices_deleted']} PCI device(s) removed)")
    return common.EXIT_OK
