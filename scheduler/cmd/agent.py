"""``berth-agent``: discover this compute host and keep Berth up to date.

``berth-agent --config-file /etc/berth/berth.conf`` runs until SIGTERM;
``--once`` sends one full report and exits; ``--dry-run`` prints what would be
reported (a table, or ``--json``) without sending anything.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

cli_opts = [
    cfg.BoolOpt("once", default=False, help="Send one full report, then exit."),
    cfg.BoolOpt("dry-run", default=False,
                help="Print what would be reported and send nothing (implies --once)."),
    cfg.BoolOpt("json", default=False, help="With --dry-run: print JSON, not tables."),
]

LOG = logging.getLogger("berth-agent")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2


def _cpus(cpus) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out) or "-"


def _pages(cell: int, page: dict, free: dict) -> str:
    """``2048kB:1024(900 free, 64 reserved)``: total, then what the kernel and the
    operator say about it."""
    notes = []
    if (cell, page["size_kb"]) in free:
        notes.append(f"{free[(cell, page['size_kb'])]} free")
    if page.get("reserved"):
        notes.append(f"{page['reserved']} reserved")
    return f"{page['size_kb']}kB:{page['total']}" + (f"({', '.join(notes)})" if notes else "")


def _inventories(invs: dict | None) -> str:
    """``VGPU:8 CUSTOM_X:4(reserved 1, ratio 2)``: totals, and fields off their defaults."""
    out = []
    for rc, inv in sorted((invs or {}).items()):
        notes = [f"reserved {inv['reserved']}"] if inv.get("reserved") else []
        if inv.get("allocation_ratio", 1.0) != 1.0:
            notes.append(f"ratio {inv['allocation_ratio']:g}")
        for key in ("min_unit", "step_size"):
            if inv.get(key, 1) != 1:
                notes.append(f"{key} {inv[key]}")
        if inv.get("max_unit", inv["total"]) != inv["total"]:
            notes.append(f"max_unit {inv['max_unit']}")
        out.append(f"{rc}:{inv['total']}" + (f"({', '.join(notes)})" if notes else ""))
    return " ".join(out) or "-"


def _from(name: str, report) -> str:
    """Where a provider comes from: its GPU's vGPU type, the config entry applied."""
    parts = []
    gpu = next((g for g in report.gpus if g.provider == name), None)
    if gpu is not None:
        t = gpu.mdev_type
        parts.append(f"{t.type}" + (f" ({t.name})" if t.name else "")
                     + f": {t.available} available + {len(t.created)} created")
    config = report.configured.get(name)
    if config is not None:
        parts.append(config.where)
    return "; ".join(parts) or "-"


def print_ledger(report) -> None:
    """The node's traits, its operator inventories and its child providers."""
    from scheduler.cmd import common

    node = report.node
    print(f"traits {' '.join(node.get('traits') or ()) or '-'}")
    root = report.configured.get(node["node"])
    print(f"inventories (besides the fields above) {_inventories(node.get('inventories'))}"
          + (f" (from {root.where})" if root is not None and root.inventories else ""))
    print()
    common.print_table(
        [{"name": p["name"], "uuid": p.get("uuid"),
          "inventories": _inventories(p.get("inventories")),
          "traits": " ".join(p.get("traits") or ()) or "-", "from": _from(p["name"], report)}
         for p in node.get("providers") or ()],
        [("PROVIDER", "name"), ("UUID", "uuid"), ("INVENTORIES", "inventories"),
         ("TRAITS", "traits"), ("FROM", "from")],
        empty=f"no child providers ({len(report.facts.mdev)} device(s) on the mdev bus)")


def print_report(report) -> None:
    """The report as an operator reads it: host lines, ledger, NUMA cells, PCI devices."""
    from scheduler.cmd import common

    node, facts = report.node, report.facts
    cpu = node["cpu_info"]
    topo = cpu["topology"]
    print(f"host {node['host']}  node {node['node']}  (dry run: nothing sent)")
    print(f"vcpus {node['vcpus']} (online {_cpus(facts.cpus.online)}, offline "
          f"{_cpus(facts.cpus.offline)}; reserved {node['reserved_host_cpus']}; "
          f"ratio {node['cpu_allocation_ratio']:g})")
    print(f"memory_mb {node['memory_mb']} (reserved {node['reserved_host_memory_mb']}; "
          f"ratio {node['ram_allocation_ratio']:g})")
    print(f"local_gb {node['local_gb']} ({facts.disk.path}, {facts.disk.free_gb} GB free; "
          f"reserved {node['reserved_host_disk_mb']} MB)")
    print(f"cpu {cpu['arch']} {cpu['vendor'] or '-'} {cpu['model'] or '-'}: "
          f"{topo['sockets']} socket(s) x {topo['cores']} core(s) x {topo['threads']} "
          f"thread(s), {len(cpu['features'])} flags")
    print(f"hypervisor {node['hypervisor_type']} {node['hypervisor_version'] or '-'} "
          f"(from {report.hypervisor_version_source}); "
          f"supported {node['supported_instances']}")
    print_ledger(report)
    cells = (node.get("numa_topology") or {}).get("cells", [])
    free = {(n, h.size_kb): h.free for n, m in facts.memory.nodes.items()
            for h in m.hugepages}
    print()
    common.print_table(
        [{"cell": c["id"], "socket": c["socket"], "cpuset": _cpus(c["cpuset"]),
          "pcpuset": _cpus(c["pcpuset"]),
          "siblings": " ".join(_cpus(s) for s in c["siblings"]) or "-",
          "memory_mb": c["memory_mb"],
          "pages": " ".join(_pages(c["id"], p, free) for p in c["mempages"])}
         for c in cells],
        [("CELL", "cell"), ("SOCKET", "socket"), ("CPUSET", "cpuset"),
         ("PCPUSET", "pcpuset"), ("SIBLINGS", "siblings"), ("MEMORY_MB", "memory_mb"),
         ("PAGES (size:total)", "pages")],
        empty="no NUMA cells")
    print()
    common.print_table(
        [{"address": d.address, "id": f"{d.vendor_id}:{d.product_id}", "class": d.class_code,
          "type": d.dev_type, "parent": d.parent_addr, "numa": d.numa_node,
          "physnet": d.physical_network, "status": d.status, "tags": dict(d.tags)}
         for d in report.devices],
        [("ADDRESS", "address"), ("VENDOR:PRODUCT", "id"), ("CLASS", "class"),
         ("TYPE", "type"), ("PARENT", "parent"), ("NUMA", "numa"),
         ("PHYSNET", "physnet"), ("STATUS", "status"), ("TAGS", "tags")],
        empty=f"no passthrough PCI devices ({len(facts.pci)} on the bus, "
              f"none matched by [pci] device_spec)")
    for warning in report.warnings:
        print(f"warning: {warning}")


def report_json(report) -> dict:
    return {"node": report.node, "pci_devices": report.pci_devices,
            "warnings": report.warnings}


def run(argv: list[str] | None = None, conf: cfg.ConfigOpts = cfg.CONF) -> int:
    import oslo_messaging

    from scheduler import exception
    from scheduler.agent import host as host_mod
    from scheduler.agent.reporter import Reporter
    from scheduler.cmd.client import CliError as BrokerUnreachable

    conf.register_cli_opts(cli_opts)
    logging.register_options(conf)
    conf(argv if argv is not None else sys.argv[1:], project="berth", prog="berth-agent")
    if not conf.dry_run:
        logging.setup(conf, "berth-agent")
        from scheduler import log_escape

        log_escape.install()
    try:
        # Options and provider config files are read once, here: a bad one stops
        # the agent before it reports anything.
        settings = host_mod.settings_from_conf(conf)
        if conf.dry_run:
            report = host_mod.report_from_conf(conf, settings=settings)
            if conf.json:
                print(json.dumps(report_json(report), indent=2))
            else:
                print_report(report)
            return EXIT_OK
        from scheduler.cmd.client import check_broker
        from scheduler.rpcapi import SchedulerAPI

        api = SchedulerAPI(conf, timeout=conf.agent.rpc_timeout, retry=0)
        reporter = Reporter(api, lambda: host_mod.report_from_conf(conf, settings=settings),
                            conf,
                            probe=lambda: check_broker(conf.transport_url,
                                                       conf.agent.rpc_timeout))
        if conf.once:
            reporter.report()
            api.close()
            return EXIT_OK
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        LOG.info("berth-agent starting for host %s (report every %ds, heartbeat every %ds)",
                 conf.agent.host, conf.agent.report_interval, conf.agent.heartbeat_interval)
        reporter.run(stop)
        LOG.info("berth-agent stopping")
        api.close()
        return EXIT_OK
    except exception.InvalidRequest as e:
        print(f"berth-agent: {e.message}", file=sys.stderr)
        return EXIT_INVALID
    except exception.BerthError as e:
        print(f"berth-agent: {e.message}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokerUnreachable as e:
        print(f"berth-agent: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except oslo_messaging.MessagingTimeout:
        print(f"berth-agent: no scheduler answered on topic {conf.scheduler.topic!r} within "
              f"{conf.agent.rpc_timeout:g}s", file=sys.stderr)
        return EXIT_FAILURE
    except oslo_messaging.MessagingException as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"berth-agent: messaging error: {first}", file=sys.stderr)
        return EXIT_FAILURE


def main() -> None:
    rc = run()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: oslo.messaging's threads may still be retrying.
    os._exit(rc)


if __name__ == "__main__":
    main()
