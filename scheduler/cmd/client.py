"""``berth``: the scheduler's RPC client for people and scripts.

Readable tables by default, JSON with ``--json``. Exit status: 0 success,
1 no valid host (the per-filter explanation is printed), 2 invalid input,
unknown host, or no answer from the broker or the daemon within ``--timeout``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

EXIT_OK, EXIT_NO_VALID_HOST, EXIT_ERROR = 0, 1, 2
DEFAULT_TIMEOUT = 30.0


class CliError(Exception):
    """A failure reported as one line on stderr, exit status 2."""


# -- formatting ---------------------------------------------------------------------

def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table; numbers right-aligned; control, line-separator
    and bidi characters of a value written as escapes."""
    from db.limits import escape_controls

    cells = [[("-" if v is None else escape_controls(str(v))) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _used(used: Any, total: Any) -> str:
    return f"{used}/{total}"


def _numa_cell(cell: Any) -> str:
    """``cell1:8-11`` for a guest cell on host cell 1 pinned to host CPUs 8-11."""
    if not isinstance(cell, dict):
        return str(cell)
    text = f"cell{cell.get('host_cell_id', '?')}"
    pinned = sorted((cell.get("cpu_pinning") or {}).values())
    if pinned:
        text += ":" + ",".join(str(c) for c in pinned)
    if cell.get("pagesize_kb"):
        text += f"@{cell['pagesize_kb']}K"
    return text


def format_selections(result: list[list[dict]], dry_run: bool = False) -> str:
    """One row per selection; alternates are marked and follow their instance."""
    rows = []
    for alternatives in result:
        for rank, s in enumerate(alternatives):
            held = s.get("resources") or {}
            numa = s.get("numa_cells") or {}
            cells = numa.get("cells", []) if isinstance(numa, dict) else numa
            pci = s.get("pci_devices") or []
            rows.append([
                s.get("instance_uuid") if rank == 0 else "  alternate",
                s.get("host"), s.get("node"),
                " ".join(f"{rc}={n}" for rc, n in sorted(held.items())) or None,
                " ".join(_numa_cell(c) for c in cells) or None,
                ",".join(str(d.get("address", d)) if isinstance(d, dict) else str(d)
                         for d in pci) or None,
                None if s.get("weight") is None else round(float(s["weight"]), 3),
            ])
    text = format_table(["INSTANCE", "HOST", "NODE", "RESOURCES", "NUMA", "PCI", "WEIGHT"],
                        rows)
    victims = [(alternatives[0].get("instance_uuid"), v) for alternatives in result
               if alternatives for v in alternatives[0].get("preempted") or ()]
    if victims:
        text += "\n" + format_table(
            ["PREEMPTED", "BY", "HOST", "PRIORITY"],
            [[v.get("instance_uuid"), by, v.get("host"), v.get("priority")]
             for by, v in victims])
        if not dry_run:
            text += "\n(delete the preempted instances, then release them)"
    if dry_run:
        text += "\n(dry run: nothing was claimed)"
    return text


def format_no_valid_host(exc: Exception) -> str:
    """The daemon's explanation: the summary line, then one line per filter."""
    reason = getattr(exc, "reason", "") or getattr(exc, "message", "") or str(exc)
    lines = [f"No valid host: {reason}".rstrip()]
    summary = getattr(exc, "summary", None) or {}
    for f in summary.get("filters") or []:
        reasons = f.get("reasons") or {}
        detail = "; ".join(f"{text} ({n})" for text, n in reasons.items())
        lines.append(f"  {f.get('filter')}: removed {f.get('removed')}"
                     + (f" - {detail}" if detail else ""))
    return "\n".join(lines)


def format_hosts(hosts: list[dict], now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    rows = []
    for h in hosts:
        pci = h.get("pci_devices") or {}
        state = "disabled" if h.get("disabled") else "enabled"
        rows.append([h.get("host"), h.get("node"), h.get("availability_zone"),
                     _used(h.get("vcpus_used"), h.get("vcpus")),
                     _used(h.get("pcpus_used"), h.get("pcpus")) if h.get("pcpus") else None,
                     _used(h.get("memory_mb_used"), h.get("memory_mb")),
                     _used(h.get("local_gb_used"), h.get("local_gb")),
                     h.get("running_vms"),
                     _used(pci.get("available", 0), pci.get("total", 0)),
                     state, _age(h.get("last_seen_up"), now)])
    return format_table(["HOST", "NODE", "ZONE", "VCPUS", "PCPUS", "RAM_MB", "DISK_GB", "VMS",
                         "PCI_FREE", "STATE", "LAST_SEEN"], rows)


def _age(timestamp: str | None, now: datetime.datetime) -> str | None:
    """``12s ago`` from a naive-UTC ISO timestamp (the daemon's clock)."""
    if not timestamp:
        return None
    try:
        seen = datetime.datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    seconds = max(0, int((now - seen).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def format_mapping(data: dict, indent: int = 0) -> str:
    """``key: value`` lines; nested mappings indented, lists of scalars joined."""
    pad = " " * indent
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.append(f"{pad}{key}:")
            out.append(format_mapping(value, indent + 2))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out.append(f"{pad}{key}:")
            out.extend(f"{pad}  - {json.dumps(v, sort_keys=True)}" for v in value)
        elif isinstance(value, list):
            out.append(f"{pad}{key}: {', '.join(map(str, value)) or '-'}")
        else:
            out.append(f"{pad}{key}: {'-' if value is None else value}")
    return "\n".join(out)


# -- commands -----------------------------------------------------------------------

def _read_json(path: str) -> Any:
    try:
        with (sys.stdin if path == "-" else open(path, encoding="utf-8")) as f:
            return json.load(f)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CliError(f"{path}: not valid JSON: {e}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None
    except RecursionError:
        raise CliError(f"{path}: nested too deeply") from None


def _read_host_yaml(path: str) -> dict:
    """One host in the fleet format: a host mapping, or a fleet with one host."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise CliError(f"{path}: not valid YAML: {e}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None
    except RecursionError:
        raise CliError(f"{path}: nested too deeply") from None
    if isinstance(data, dict) and "hosts" in data and "host" not in data:
        hosts = data.get("hosts")
        if not isinstance(hosts, list) or len(hosts) != 1:
            raise CliError(f"{path}: expected one host, found "
                           f"{len(hosts) if isinstance(hosts, list) else 'no list of'} hosts")
        data = hosts[0]
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a host mapping (fleet format)")
    from scheduler.exception import InvalidRequest
    from scheduler.rpc import check_json

    try:   # as the daemon will: bounded before it is sent (a YAML alias bomb is not)
        check_json(data, "node")
    except InvalidRequest as e:
        raise CliError(f"{path}: {e.field}: {e.reason}") from None
    return data


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def cmd_select(api, args) -> int:
    spec = _read_json(args.request)
    kw = {"allow_preemption": True} if args.allow_preemption else {}
    # confirmed before the command ends: its exit status says whether it holds
    result = api.select_destinations(None, spec, return_alternates=args.alternates,
                                     dry_run=args.dry_run, confirm="sync", **kw)
    if args.json:
        _print_json(result)
    else:
        print(format_selections(result, args.dry_run))
    return EXIT_OK


def cmd_release(api, args) -> int:
    released = api.release(None, args.instance_uuid)
    if args.json:
        _print_json({"instance_uuid": args.instance_uuid, "released": released})
    elif released:
        print(f"Released {args.instance_uuid}")
    else:
        print(f"{args.instance_uuid} held nothing (already released)")
    return EXIT_OK


def cmd_reschedule(api, args) -> int:
    result = api.reschedule(None, args.instance_uuid, args.failed_host)
    if args.json:
        _print_json(result)
    else:
        print(format_selections([result]))
    return EXIT_OK


def cmd_move(api, args) -> int:
    """resize, migrate, live-migrate, evacuate, rebuild, unshelve."""
    move: dict[str, Any] = {"instance_uuid": args.instance_uuid, "kind": args.command}
    if getattr(args, "migration_uuid", None):
        move["migration_uuid"] = args.migration_uuid
    if getattr(args, "destination", None):
        move["destination"] = args.destination
    if getattr(args, "force", False):
        move["force"] = True
    if getattr(args, "availability_zone", None):
        move["availability_zone"] = args.availability_zone
    if args.command == "resize":
        move["flavor"] = _read_json(args.flavor)
    elif args.command == "rebuild":
        move["image"] = _read_json(args.image)
    elif args.command == "unshelve":
        move["request_spec"] = _read_json(args.request)
    result = api.move_instance(None, move, return_alternates=args.alternates)
    if args.json:
        _print_json(result)
    else:
        print(format_selections([result]))
        migration = result[0].get("migration_uuid") if result else None
        if migration and args.command not in ("rebuild", "unshelve"):
            print(f"Move {migration}: confirm it with `berth confirm-move "
                  f"{args.instance_uuid} {migration}` (or revert-move)")
    return EXIT_OK


def cmd_end_move(api, args) -> int:
    how = "confirm" if args.command == "confirm-move" else "revert"
    done = getattr(api, f"{how}_move")(None, args.instance_uuid, args.migration_uuid)
    if args.json:
        _print_json({"instance_uuid": args.instance_uuid,
                     "migration_uuid": args.migration_uuid, f"{how}ed": done})
    else:
        print(f"{how.capitalize()}ed move {args.migration_uuid} of {args.instance_uuid}")
    return EXIT_OK


def cmd_hosts(api, args) -> int:
    hosts = api.list_hosts(None)
    if args.json:
        _print_json(hosts)
    else:
        print(format_hosts(hosts))
    return EXIT_OK


def format_inventories(host: dict) -> str:
    """Every provider's inventories of a host (``show_host``), a row each."""
    rows = []
    providers = [(host.get("node"), host.get("resources") or {}, None)]
    providers += [(p.get("name"), p.get("resources") or {}, p.get("traits"))
                  for p in host.get("providers") or ()]
    for name, resources, traits in providers:
        for rc, inv in sorted(resources.items()):
            rows.append([name, rc, inv.get("total"), inv.get("reserved"),
                         inv.get("allocation_ratio"), inv.get("used"), inv.get("free"),
                         inv.get("max_unit"), ", ".join(traits) if traits else None])
            traits = None           # a child's traits on its first row
    return format_table(["PROVIDER", "CLASS", "TOTAL", "RESERVED", "RATIO", "USED", "FREE",
                         "MAX_UNIT", "CHILD TRAITS"], rows)


def cmd_host_show(api, args) -> int:
    host = api.show_host(None, args.name)
    if args.json:
        _print_json(host)
    else:
        print(format_mapping({k: v for k, v in host.items()
                              if k not in ("resources", "providers")}))
        print()
        print(format_inventories(host))
    return EXIT_OK


def format_aggregates(aggregates: list[dict]) -> str:
    rows = []
    for a in aggregates:
        hosts = a.get("hosts") or []
        metadata = {k: v for k, v in (a.get("metadata") or {}).items()
                    if k != "availability_zone"}
        rows.append([a.get("name"), a.get("availability_zone"), len(hosts),
                     ", ".join(f"{k}={v}" for k, v in sorted(metadata.items())) or None])
    return format_table(["NAME", "ZONE", "HOSTS", "METADATA"], rows)


def cmd_aggregate_list(api, args) -> int:
    aggregates = api.aggregate_list(None)
    if args.json:
        _print_json(aggregates)
    else:
        print(format_aggregates(aggregates))
    return EXIT_OK


def _membership(api, args, method: str, verb: str) -> int:
    """Add or remove every host named, in one call (one transaction: all or none)."""
    aggregate = getattr(api, method)(None, args.name, hosts=args.hosts)
    if args.json:
        _print_json(aggregate)
    else:
        print(f"{verb} {len(args.hosts)} host(s); aggregate {aggregate.get('name')} now "
              f"has {len(aggregate.get('hosts') or [])}")
    return EXIT_OK


def cmd_aggregate_add_host(api, args) -> int:
    return _membership(api, args, "aggregate_add_host", "Added")


def cmd_aggregate_remove_host(api, args) -> int:
    return _membership(api, args, "aggregate_remove_host", "Removed")


def cmd_report_host(api, args) -> int:
    host = api.report_compute_node(None, _read_host_yaml(args.file))
    if args.json:
        _print_json(host)
    else:
        print(f"Reported {host.get('host')} (node {host.get('node')}, "
              f"generation {host.get('generation')})")
    return EXIT_OK


def cmd_ping(api, args) -> int:
    started = time.monotonic()
    info = api.ping(None)
    info["round_trip_ms"] = round((time.monotonic() - started) * 1000, 2)
    if args.json:
        _print_json(info)
    else:
        print(f"berth-scheduler on {info.get('host')} answered in "
              f"{info['round_trip_ms']} ms (pid {info.get('pid')}, worker "
              f"{info.get('worker')}, {info.get('backend')} backend, "
              f"API {info.get('version')})")
    return EXIT_OK


def _duration(seconds: Any) -> str | None:
    if not _is_number(seconds):
        return None
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_status(status: dict, where: str) -> str:
    """The daemon's /readyz report: a summary line, then one row per worker."""
    workers = status.get("workers") or []
    ready = sum(1 for w in workers if w.get("ready"))
    lines = [f"berth-scheduler at {where}: "
             f"{'ready' if status.get('ready') else 'NOT READY'} "
             f"({ready}/{len(workers)} workers ready)"]
    rows = []
    for w in workers:
        checks = w.get("checks") or {}
        failing = "; ".join(f"{k}: {v}" for k, v in checks.items() if v != "ok")
        rows.append([w.get("worker"), w.get("pid"), "yes" if w.get("ready") else "no",
                     w.get("release"), w.get("api_version"), w.get("backend"),
                     w.get("hosts"), _duration(w.get("uptime_s")), failing or "all ok"])
    lines.append(format_table(["WORKER", "PID", "READY", "RELEASE", "API", "BACKEND",
                               "HOSTS", "UPTIME", "CHECKS"], rows))
    return "\n".join(lines)


def status_url(args) -> str | None:
    """The monitoring port to ask: ``--url``, else ``[metrics]`` when enabled."""
    if args.url:
        return args.url.rstrip("/")
    from oslo_config import cfg

    from scheduler import monitoring  # noqa: F401  (registers [metrics])

    m = cfg.CONF.metrics
    if not m.enabled:
        return None
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(m.bind_host,
                                                                        m.bind_host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{m.port}"


def fetch_status(url: str, timeout: float) -> dict:
    """GET ``url``/readyz: the JSON report (a 503 carries it too)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/readyz", timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise CliError(f"cannot reach the monitoring port at {url} ({reason}) - is "
                       f"berth-scheduler running with [metrics] enabled?") from None
    try:
        return json.loads(body)
    except ValueError:
        raise CliError(f"{url}/readyz did not answer JSON") from None


def cmd_status(args) -> int:
    """Every worker's readiness and version, from the daemon's monitoring port;
    without one, the worker that answers ping."""
    url = status_url(args)
    if url is None:
        from oslo_config import cfg

        from scheduler.rpcapi import SchedulerAPI

        check_broker(cfg.CONF.transport_url, args.timeout)
        api = SchedulerAPI(cfg.CONF, timeout=args.timeout, retry=1)
        try:
            info = api.ping(None)
        finally:
            api.close()
        if args.json:
            _print_json(info)
        else:
            print("[metrics] enabled is false: no per-worker report; the worker that "
                  "answered ping:")
            print(format_table(["WORKER", "PID", "RELEASE", "API", "BACKEND", "UPTIME"],
                               [[info.get("worker"), info.get("pid"), info.get("release"),
                                 info.get("version"), info.get("backend"),
                                 _duration(info.get("uptime_s"))]]))
        return EXIT_OK
    status = fetch_status(url, args.timeout)
    if args.json:
        _print_json(status)
    else:
        print(format_status(status, url))
    return EXIT_OK if status.get("ready") else EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of a table")
    p = argparse.ArgumentParser(
        prog="berth", description="Talk to the berth-scheduler daemon over RPC.",
        epilog="Exit status: 0 ok, 1 no valid host, 2 invalid input or no answer.")
    p.add_argument("--config-file", action="append", default=[], metavar="PATH",
                   help="berth.conf to read [DEFAULT] transport_url and [scheduler] "
                        "topic from (repeatable; default: the usual oslo.config places)")
    p.add_argument("--config-dir", action="append", default=[], metavar="DIR")
    p.add_argument("--transport-url", metavar="URL",
                   help="override [DEFAULT] transport_url")
    p.add_argument("--topic", help="override [scheduler] topic")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"give up when the broker or the daemon has not answered "
                        f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--debug", action="store_true", help="log the messaging library's chatter")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("select", parents=[common], help="place instances (request spec JSON)")
    s.add_argument("request", metavar="REQUEST.json", help="request spec file, or - for stdin")
    s.add_argument("--alternates", action="store_true", help="also return alternate hosts")
    s.add_argument("--dry-run", action="store_true", help="choose hosts but claim nothing")
    s.add_argument("--allow-preemption", action="store_true",
                   help="an instance that fits nowhere may preempt instances of lower "
                        "priority: the reply names them, and you delete and release "
                        "them (API 1.3)")
    s.set_defaults(func=cmd_select)

    s = sub.add_parser("release", parents=[common], help="free what an instance holds")
    s.add_argument("instance_uuid", metavar="UUID")
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("reschedule", parents=[common],
                       help="move an instance's claim off a host that failed to build it")
    s.add_argument("instance_uuid", metavar="UUID")
    s.add_argument("failed_host", metavar="HOST")
    s.set_defaults(func=cmd_reschedule)

    moves = {"resize": "place an instance again with a new flavor (FLAVOR.json)",
             "migrate": "move an instance to another host (cold)",
             "live-migrate": "move a running instance to another host",
             "evacuate": "place again an instance whose host is down or disabled",
             "rebuild": "check the instance's host takes a new image (IMAGE.json)",
             "unshelve": "place again an instance that holds nothing (REQUEST.json)"}
    for name, help_text in moves.items():
        s = sub.add_parser(name, parents=[common], help=help_text)
        s.add_argument("instance_uuid", metavar="UUID")
        if name == "resize":
            s.add_argument("flavor", metavar="FLAVOR.json", help="the new flavor, or - for stdin")
        elif name == "rebuild":
            s.add_argument("image", metavar="IMAGE.json", help="the new image, or - for stdin")
        elif name == "unshelve":
            s.add_argument("request", metavar="REQUEST.json",
                           help="the instance's request spec, or - for stdin")
            s.add_argument("--availability-zone", metavar="ZONE")
        if name != "rebuild":
            s.add_argument("--destination", metavar="HOST",
                           help="consider only this host or node (every filter still runs)")
        if name == "live-migrate":
            s.add_argument("--force", action="store_true",
                           help="skip the filters (the claim still refuses an over-commit)")
        s.add_argument("--migration-uuid", metavar="UUID",
                       help="the move's id (picked when not given; send the same one to "
                            "retry a move whose answer was lost)")
        s.add_argument("--alternates", action="store_true", help="also return alternate hosts")
        s.set_defaults(func=cmd_move)
    for name, help_text in (("confirm-move", "end a move: release its source"),
                            ("revert-move", "undo a move: release its destination")):
        s = sub.add_parser(name, parents=[common], help=help_text)
        s.add_argument("instance_uuid", metavar="UUID")
        s.add_argument("migration_uuid", metavar="MIGRATION_UUID")
        s.set_defaults(func=cmd_end_move)

    s = sub.add_parser("hosts", parents=[common], help="list hosts with capacity and usage")
    s.set_defaults(func=cmd_hosts)

    s = sub.add_parser("host", help="one host")
    hs = s.add_subparsers(dest="host_command", required=True, metavar="COMMAND")
    h = hs.add_parser("show", parents=[common], help="show one host (host or node name)")
    h.add_argument("name", metavar="NAME")
    h.set_defaults(func=cmd_host_show)

    s = sub.add_parser("aggregate", help="host aggregates (admin topic)")
    ags = s.add_subparsers(dest="aggregate_command", required=True, metavar="COMMAND")
    a = ags.add_parser("list", parents=[common], help="aggregates with zone and host count")
    a.set_defaults(func=cmd_aggregate_list)
    for name, func, help_text in (
            ("add-host", cmd_aggregate_add_host,
             "add hosts in one call (all of them, or none if one is unknown, a member "
             "already or would be in a second zone)"),
            ("remove-host", cmd_aggregate_remove_host,
             "remove hosts in one call (all of them, or none if one is not a member)")):
        a = ags.add_parser(name, parents=[common], help=help_text)
        a.add_argument("name", metavar="AGGREGATE")
        a.add_argument("hosts", nargs="+", metavar="HOST")
        a.set_defaults(func=func)

    s = sub.add_parser("report", help="report to the scheduler as a compute host would")
    rs = s.add_subparsers(dest="report_command", required=True, metavar="WHAT")
    r = rs.add_parser("host", parents=[common],
                      help="upsert one host from a YAML file in the fleet format")
    r.add_argument("file", metavar="FILE.yaml")
    r.set_defaults(func=cmd_report_host)

    s = sub.add_parser("ping", parents=[common], help="check that a scheduler answers")
    s.set_defaults(func=cmd_ping)

    s = sub.add_parser("status", parents=[common],
                       help="each worker's readiness and version (exit 2 if not ready)")
    s.add_argument("--url", help="the daemon's monitoring port, e.g. "
                                 "http://127.0.0.1:9393 (default: from [metrics])")
    s.set_defaults(func=cmd_status, no_rpc=True)
    return p


# -- plumbing -----------------------------------------------------------------------

def _configure(args) -> None:
    from oslo_config import cfg

    from scheduler import rpc  # noqa: F401  (registers the options read below)

    conf_args = [f"--config-file={f}" for f in args.config_file]
    conf_args += [f"--config-dir={d}" for d in args.config_dir]
    cfg.CONF(conf_args, project="berth", prog="berth")
    if args.transport_url:
        cfg.CONF.set_override("transport_url", args.transport_url)
    if args.topic:
        cfg.CONF.set_override("topic", args.topic, group="scheduler")


def check_broker(url: str, timeout: float) -> None:
    """Fail fast, with one line, when no broker of ``url`` accepts a connection.

    oslo.messaging retries a refused reply-queue connection forever; checking the
    socket first turns the common "RabbitMQ is not running" case into a message.
    With ``[oslo_messaging_rabbit] ssl`` and a CA the TLS handshake is made too
    (``scheduler.rpc.check_broker_tls``), so a wrong CA is said, not retried.
    """
    from oslo_config import cfg

    from scheduler import rpc

    addresses = rpc.broker_addresses(cfg.CONF, url)
    if not addresses:
        return
    errors = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=min(timeout, 5.0)):
                break
        except OSError as e:
            errors.append(f"{host}:{port} ({e.strerror or e})")
    else:
        raise CliError("cannot reach the message broker at " + ", ".join(errors)
                       + " - is RabbitMQ running? (see [DEFAULT] transport_url)")
    try:
        rpc.check_broker_tls(cfg.CONF, url, timeout)
    except rpc.BrokerTLSError as e:
        raise CliError(f"cannot use the message broker: {e}") from None


def _run_with_deadline(fn: Callable[[], int], deadline: float) -> int:
    """Run ``fn`` but return ``EXIT_ERROR`` with a message if it outlives ``deadline``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["rc"] = fn()
        except BaseException as e:  # re-raised in the main thread
            box["exc"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(deadline)
    if t.is_alive():
        raise CliError(f"no answer within {deadline:g}s (broker or berth-scheduler "
                       f"unreachable)")
    if "exc" in box:
        raise box["exc"]
    return box["rc"]


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.debug:
        warnings.filterwarnings("ignore")
        logging.basicConfig(level=logging.CRITICAL)
    else:
        logging.basicConfig(level=logging.DEBUG)
    from scheduler import exception

    try:
        import oslo_messaging

        _configure(args)
        from oslo_config import cfg

        from scheduler.rpcapi import SchedulerAPI

        if getattr(args, "no_rpc", False):
            return _run_with_deadline(lambda: args.func(args), args.timeout + 5)
        check_broker(cfg.CONF.transport_url, args.timeout)
        api = SchedulerAPI(cfg.CONF, timeout=args.timeout, retry=1)
        rc = _run_with_deadline(lambda: args.func(api, args), args.timeout + 5)
        api.close()
        return rc
    except exception.NoValidHost as e:
        if args.json:
            _print_json({"error": "NoValidHost", "reason": e.reason, "summary": e.summary})
        else:
            print(format_no_valid_host(e), file=sys.stderr)
        return EXIT_NO_VALID_HOST
    except exception.BerthError as e:
        if args.json:
            _print_json({"error": type(e).__name__.removesuffix("_Remote"),
                         "message": e.message, **e.kwargs})
        else:
            print(f"berth: {e.message}", file=sys.stderr)
        return EXIT_ERROR
    except oslo_messaging.MessagingTimeout:
        from oslo_config import cfg

        print(f"berth: no scheduler answered on topic {cfg.CONF.scheduler.topic!r} within "
              f"{args.timeout:g}s - is berth-scheduler running?", file=sys.stderr)
        return EXIT_ERROR
    except oslo_messaging.MessagingException as e:
        print(f"berth: messaging error: {str(e).splitlines()[0] if str(e) else type(e)}",
              file=sys.stderr)
        return EXIT_ERROR
    except CliError as e:
        print(f"berth: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        # The broker refused the connection (a wrong password: AccessRefused from
        # py-amqp), or another error of the broker's client libraries: one line.
        from scheduler.cmd.scheduler import startup_failure

        line = startup_failure(e)
        if line is None:
            raise
        from db.limits import escape_controls

        print(f"berth: {escape_controls(line)}", file=sys.stderr)
        return EXIT_ERROR


def main() -> None:
    rc = run()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: oslo.messaging's threads may still be retrying.
    os._exit(rc)


if __name__ == "__main__":
    main()
