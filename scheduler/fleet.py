"""The fleet file (doc/source/reference/file-formats.rst): hosts and aggregates an operator imports.

``load_fleet`` validates the whole document before anything is written and
raises :class:`InvalidFleet` naming the host (index and name), the field and
what was expected, e.g.
``hosts[3] (compute-004): memory_mb: expected an integer > 0, got -5``.
The records it returns are plain values; ``db.hosts.import_fleet`` writes them.
"""
from __future__ import annotations

import functools
import ipaddress
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from oslo_config import cfg

from db import inventory, limits
from db.records import (
    MEMPAGE_LAYOUT_KEYS,
    NUMA_CELL_LAYOUT_KEYS,
    AggregateRecord,
    Fleet,
    HostRecord,
    ProviderRecord,
)
from numa import errors as numa_errors
from numa import topology as numa_topology
from pci import device as pci_device
from pci import errors as pci_errors
from scheduler import exception, host_traits, validation
from scheduler.validation import expected, invalid, known_keys, optional, show

compute_opts = [
    cfg.FloatOpt("cpu_allocation_ratio",
                 default=4.0, min=0.0, max=limits.MAX_RATIO,
                 help="Virtual CPUs per physical CPU for hosts whose fleet entry or "
                      "report does not set cpu_allocation_ratio. An aggregate's "
                      "cpu_allocation_ratio metadata overrides it for "
                      "AggregateCoreFilter."),
    cfg.FloatOpt("ram_allocation_ratio",
                 default=1.0, min=0.0, max=limits.MAX_RATIO,
                 help="Virtual RAM per physical RAM for hosts whose fleet entry or "
                      "report does not set ram_allocation_ratio."),
    cfg.FloatOpt("disk_allocation_ratio",
                 default=1.0, min=0.0, max=limits.MAX_RATIO,
                 help="Virtual disk per physical disk for hosts whose fleet entry or "
                      "report does not set disk_allocation_ratio."),
]

cfg.CONF.register_opts(compute_opts, group="compute")

LIST_OPTS = [("compute", compute_opts)]

#: libyaml's safe loader when PyYAML was built with it (10-20x faster on a big
#: fleet file), else the pure-Python one; never a loader that builds objects.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(stream) -> Any:
    """Parse YAML with :data:`SAFE_LOADER` (fleet files, scenarios)."""
    return yaml.load(stream, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader


class InvalidFleet(exception.InvalidRequest):
    """A fleet document failed validation; the message names host, field and expectation."""


def compute_defaults(conf: cfg.ConfigOpts = cfg.CONF) -> dict[str, float]:
    """The allocation ratio defaults of ``[compute]``, as ``parse_host`` takes them."""
    return {o.dest: conf.compute[o.dest] for o in compute_opts}


# -- hosts ------------------------------------------------------------------------------

def _stored_mapping(value: Any, field: str) -> dict:
    """A mapping stored as JSON: string keys without control characters."""
    return validation.name_keys(validation.mapping(value, field), field)


def _ip(value: Any, field: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise expected(field, "an IPv4 or IPv6 address", value) from None


def _supported_instances(value: Any, field: str) -> list:
    ok = isinstance(value, list) and all(
        isinstance(t, list) and len(t) == 3 and all(isinstance(s, str) for s in t)
        for t in value)
    if not ok:
        raise expected(field, "a list of [arch, hypervisor_type, vm_mode] string triples",
                       value)
    return [list(t) for t in value]


def _stats(value: Any, field: str) -> dict:
    return {k: validation.scalar_text(v, f"{field}.{k}")
            for k, v in _stored_mapping(value or {}, field).items()}


def _metrics(value: Any, field: str) -> dict:
    value = _stored_mapping(value or {}, field)
    for k, v in value.items():
        validation.finite(v, f"{field}.{k}")
    return dict(value)


def _bounded(check: Callable[..., Any], *args: Any) -> Callable[[Any, str], Any]:
    return lambda value, field: check(value, field, *args)


def _or_none(check: Callable[..., Any], *args: Any) -> Callable[[Any, str], Any]:
    return lambda value, field: optional(check, value, field, *args)


# field -> (checker, required). Checkers take (value, field) and return the clean value.
_HOST_FIELDS: dict[str, tuple[Callable[[Any, str], Any], bool]] = {
    "host": (validation.name, True),
    "node": (validation.name, False),
    "vcpus": (_bounded(validation.integer, 1, limits.MAX_VCPUS), True),
    "memory_mb": (_bounded(validation.integer, 1, limits.MAX_CAPACITY), True),
    "local_gb": (_bounded(validation.integer, 0, limits.MAX_CAPACITY), True),
    "cpu_allocation_ratio": (validation.ratio, False),
    "ram_allocation_ratio": (validation.ratio, False),
    "disk_allocation_ratio": (validation.ratio, False),
    "reserved_host_memory_mb": (_bounded(validation.integer, 0, limits.MAX_INT32), False),
    "reserved_host_disk_mb": (_bounded(validation.integer, 0, limits.MAX_INT32), False),
    "reserved_host_cpus": (_bounded(validation.integer, 0, limits.MAX_INT32), False),
    "hypervisor_type": (_or_none(validation.name), False),
    "hypervisor_version": (_or_none(validation.integer, 0, limits.MAX_BIGINT), False),
    "host_ip": (_or_none(_ip), False),
    "cpu_info": (_or_none(_stored_mapping), False),
    "supported_instances": (_or_none(_supported_instances), False),
    "stats": (_stats, False),
    "metrics": (_metrics, False),
    "disabled": (validation.boolean, False),
    "disabled_reason": (_or_none(validation.note), False),
    "numa_topology": (lambda v, f: _numa_topology_memo(v, f), False),
    "pci_devices": (lambda v, f: _pci_devices_memo(v, f), False),
    "traits": (lambda v, f: _traits(v, f), False),
    "inventories": (lambda v, f: _inventories(v, f), False),
    "providers": (lambda v, f: _providers(v, f), False),
}
#: Fields a host entry may leave out when it gives ``inventories:`` (a
#: baremetal node, say, has only a CUSTOM_ class): their classes then have none.
_CLASSIC_FIELDS = ("vcpus", "memory_mb", "local_gb")


def _host_prefix(index: int, data: Any) -> str:
    name = data.get("host") if isinstance(data, dict) else None
    return f"hosts[{index}] ({name})" if isinstance(name, str) and name else f"hosts[{index}]"


def parse_host(data: dict, index: int = 0, defaults: Mapping[str, Any] | None = None,
               *, where: str | None = None) -> HostRecord:
    """Validate one fleet host entry (or one host report) and return its record.

    ``defaults`` supplies values for absent optional fields (the allocation
    ratios at least); ``None`` means the ``[compute]`` options. Errors name
    ``hosts[index].<field>``, or ``<where>.<field>`` when ``where`` is given
    (``node`` for ``report_compute_node``).
    """
    prefix = _host_prefix(index, data) if where is None else where
    field_prefix = f"hosts[{index}]" if where is None else where
    try:
        _check_values(data, field_prefix, MAX_HOST_VALUES)
        return _parse_host(data, defaults)
    except exception.InvalidRequest as e:
        raise InvalidFleet(f"{prefix}: {e.field}: {e.reason}",
                           field=f"{field_prefix}.{e.field}", reason=e.reason) from None


#: Values (counted as import would write them: a YAML alias counts each time it is
#: used) in one host entry, and in a whole fleet document.
MAX_HOST_VALUES = 200_000
MAX_FLEET_VALUES = 4_000_000
MAX_DEPTH = 32


def _check_values(data: Any, field_prefix: str, budget: int) -> None:
    """Walk ``data`` as import would write it, without recursion: at most ``budget``
    values and ``MAX_DEPTH`` levels; only JSON values (strings, numbers, booleans,
    null, lists, mappings with string keys: no binary, timestamp or set a YAML tag
    makes); integers within BIGINT, floats finite. This is what bounds a YAML
    alias bomb (a few hundred bytes that expand to billions of values): it is
    refused here, by ``--dry-run`` and import alike."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise invalid(path.lstrip(".") or "document",
                          "fewer values (YAML aliases count each time they are used)")
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                raise invalid(path.lstrip("."), f"nesting of at most {MAX_DEPTH} levels")
            for k in value:
                if not isinstance(k, str):
                    raise expected(path.lstrip(".") or "document",
                                   "a mapping with string keys", k)
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            if depth >= MAX_DEPTH:
                raise invalid(path.lstrip("."), f"nesting of at most {MAX_DEPTH} levels")
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        elif limits.is_int(value):
            if abs(value) > limits.MAX_BIGINT:
                raise expected(path.lstrip("."), f"an integer of at most "
                                                 f"{limits.MAX_BIGINT}", value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise expected(path.lstrip("."), "a finite number", value)
        elif not (value is None or isinstance(value, str | bool)):
            raise expected(path.lstrip(".") or "document",
                           "a JSON value (string, number, boolean, null, list or "
                           "mapping)", f"a {type(value).__name__}")


def _parse_host(data: Any, defaults: Mapping[str, Any] | None) -> HostRecord:
    known_keys(validation.mapping(data, "host entry"), _HOST_FIELDS)
    values = dict(compute_defaults() if defaults is None else defaults)
    unknown_defaults = set(values) - set(_HOST_FIELDS)
    if unknown_defaults:
        raise ValueError(f"unknown host defaults: {sorted(unknown_defaults)}")
    overrides = "inventories" in data
    for field, (check, required) in _HOST_FIELDS.items():
        if field in data:
            values[field] = check(data[field], field)
        elif required and not (overrides and field in _CLASSIC_FIELDS):
            raise invalid(field, "required field is missing")
    for field in _CLASSIC_FIELDS:
        values.setdefault(field, 0)
    values.setdefault("node", values["host"])
    if values.get("numa_topology") is not None:
        _check_numa_layout(values["numa_topology"], values["memory_mb"])
    for field in ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio"):
        if field not in values:
            raise invalid(field, "no value given and no default configured")
        values[field] = validation.ratio(values[field], field)
    _check_reserved(values)
    values["inventories"] = _root_inventories(values, values.get("inventories") or {})
    values["traits"] = frozenset(values.get("traits") or ()) | frozenset(
        host_traits.derived(values.get("cpu_info"), values.get("numa_topology")))
    values.setdefault("providers", ())
    return HostRecord(**values)


# -- the ledger: traits, inventories, child providers -------------------------------------

MAX_TRAITS = 1000
MAX_PROVIDERS = 64


def _ledger(check: Callable, value: Any, field: str) -> Any:
    """A ``db.inventory`` check, its InventoryError named by its field."""
    try:
        return check(value, field)
    except inventory.InventoryError as e:
        raise invalid(e.field, e.reason) from None


def _traits(value: Any, field: str) -> frozenset[str]:
    names = validation.sequence(value if value is not None else [], field)
    if len(names) > MAX_TRAITS:
        raise expected(field, f"at most {MAX_TRAITS} traits", len(names))
    return frozenset(_ledger(inventory.check_trait, name, f"{field}[{i}]")
                     for i, name in enumerate(names))


def _inventories(value: Any, field: str) -> dict[str, dict]:
    """Class -> the entry as written (checked; made Inventory objects later, over
    the defaults of the classic fields)."""
    raw = _stored_mapping(value if value is not None else {}, field)
    out = {}
    for rc, entry in raw.items():
        _ledger(inventory.check_class, rc, f"{field}.{rc}")
        if limits.is_int(entry):
            entry = {"total": entry}
        _ledger(lambda v, f: inventory.Inventory.from_primitive(
            v, f, defaults=inventory.Inventory(total=0)), entry, f"{field}.{rc}")
        out[rc] = entry
    return out


def _root_inventories(values: dict, given: dict[str, dict]) -> dict[str, inventory.Inventory]:
    """The classic fields as classes, with ``inventories:`` over them (a class
    given ``total: 0`` has none)."""
    topology = values.get("numa_topology") or {}
    dedicated = sum(len(cell.get("pcpuset") or ()) for cell in topology.get("cells") or ())
    out = inventory.node_inventories(
        vcpus=values["vcpus"], memory_mb=values["memory_mb"], local_gb=values["local_gb"],
        cpu_allocation_ratio=values["cpu_allocation_ratio"],
        ram_allocation_ratio=values["ram_allocation_ratio"],
        disk_allocation_ratio=values["disk_allocation_ratio"],
        reserved_host_cpus=values.get("reserved_host_cpus", 0),
        reserved_host_memory_mb=values.get("reserved_host_memory_mb", 0),
        reserved_host_disk_mb=values.get("reserved_host_disk_mb", 0),
        dedicated_cpus=dedicated)
    for rc, entry in given.items():
        inv = _ledger(lambda v, f, base=out.get(rc): inventory.Inventory.from_primitive(
            v, f, defaults=base), entry, f"inventories.{rc}")
        if inv.total == 0:
            out.pop(rc, None)
        else:
            out[rc] = inv
    return out


_PROVIDER_KEYS = frozenset({"name", "uuid", "parent", "traits", "inventories"})


def _providers(value: Any, field: str) -> tuple[ProviderRecord, ...]:
    entries = validation.sequence(value if value is not None else [], field)
    if len(entries) > MAX_PROVIDERS:
        raise expected(field, f"at most {MAX_PROVIDERS} providers", len(entries))
    out: list[ProviderRecord] = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        pf = f"{field}[{i}]"
        entry = _stored_mapping(entry, pf)
        known_keys(entry, _PROVIDER_KEYS, pf)
        if "name" not in entry:
            raise invalid(f"{pf}.name", "required field is missing")
        name = validation.name(entry["name"], f"{pf}.name")
        if name in names:
            raise expected(f"{pf}.name", "a name no other provider of the host has", name)
        parent = optional(validation.name, entry.get("parent"), f"{pf}.parent")
        if parent is not None and parent not in names:
            raise expected(f"{pf}.parent", "the name of a provider listed before this one",
                           parent)
        uuid = optional(validation.uuid, entry.get("uuid"), f"{pf}.uuid")
        invs = {rc: _ledger(lambda v, f: inventory.Inventory.from_primitive(v, f),
                            inv, f"{pf}.inventories.{rc}")
                for rc, inv in _inventories(entry.get("inventories"),
                                            f"{pf}.inventories").items()}
        names.add(name)
        out.append(ProviderRecord(name=name, traits=_traits(entry.get("traits"), f"{pf}.traits"),
                                  inventories={rc: inv for rc, inv in invs.items() if inv.total},
                                  parent=parent, uuid=uuid))
    return tuple(out)


def _check_reserved(v: dict) -> None:
    limits = (("reserved_host_cpus", v["vcpus"], "vcpus"),
              ("reserved_host_memory_mb", v["memory_mb"], "memory_mb"),
              ("reserved_host_disk_mb", v["local_gb"] * 1024, "local_gb * 1024"))
    for field, limit, what in limits:
        if v.get(field, 0) > limit:
            raise expected(field, f"an integer between 0 and {what} ({limit})", v[field])


# -- NUMA -------------------------------------------------------------------------------

def _content_key(field: str, value: Any) -> str | None:
    """A text naming ``value`` by content (None when it is not plain JSON)."""
    try:
        return field + "\0" + json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None


def _memoised(check: Callable[[Any, str], Any], copy: Callable[[Any], Any]):
    """``check`` remembered by the content of its value: the hosts of a fleet share a
    few NUMA layouts and device lists (YAML anchors), and validating one is costly.
    Only successful answers are kept; ``copy`` gives each host its own value."""
    @functools.lru_cache(maxsize=1024)
    def cached(key: str) -> Any:
        field, text = key.split("\0", 1)
        return check(json.loads(text), field)

    def run(value: Any, field: str) -> Any:
        key = _content_key(field, value)
        return check(value, field) if key is None else copy(cached(key))
    run.cache_clear = cached.cache_clear
    return run


def _numa_topology(value: Any, field: str) -> dict | None:
    """The fleet's layout keys only (usage is Berth's), then the NUMA package's checks."""
    if value is None:
        return None
    known_keys(_stored_mapping(value, field), {"cells"}, field)
    for i, cell in enumerate(validation.sequence(value.get("cells"), f"{field}.cells")):
        cf = f"{field}.cells.{i}"
        known_keys(_stored_mapping(cell, cf), NUMA_CELL_LAYOUT_KEYS, cf)
        pages = cell.get("mempages")
        for j, page in enumerate(pages if isinstance(pages, list) else []):
            if isinstance(page, dict):
                known_keys(page, MEMPAGE_LAYOUT_KEYS, f"{cf}.mempages.{j}")
    try:
        topology = numa_topology.HostTopology.from_primitive(value, field)
    except numa_errors.NumaError as e:
        raise invalid(e.field, e.reason) from None
    for i, cell in enumerate(topology.cells):
        if not cell.cpuset and not cell.pcpuset:
            raise invalid(f"{field}.cells.{i}", "at least one CPU in cpuset or pcpuset")
        if cell.memory_mb <= 0:
            raise expected(f"{field}.cells.{i}.memory_mb", "an integer > 0", cell.memory_mb)
        for j, page in enumerate(cell.mempages):
            if page.reserved > page.total:
                raise expected(f"{field}.cells.{i}.mempages.{j}.reserved",
                               f"an integer between 0 and total ({page.total})", page.reserved)
    return topology.to_primitive()


def _check_numa_layout(topology: dict, memory_mb: int) -> None:
    """The topology against the host's own memory (``numa.topology``); remembered
    by content, as the hosts of a fleet share a few layouts."""
    error = _numa_layout_error(json.dumps(topology, sort_keys=True), memory_mb)
    if error is not None:
        raise invalid(*error)


@functools.lru_cache(maxsize=1024)
def _numa_layout_error(text: str, memory_mb: int) -> tuple[str, str] | None:
    try:
        numa_topology.check_host_layout(
            numa_topology.HostTopology.from_primitive(json.loads(text)), memory_mb)
    except numa_errors.NumaError as e:
        return e.field, e.reason
    return None


# -- PCI --------------------------------------------------------------------------------

def _pci_devices(value: Any, field: str) -> list[pci_device.PciDevice]:
    devices: list[pci_device.PciDevice] = []
    for i, dev in enumerate(validation.sequence(value if value is not None else [], field)):
        try:
            devices.append(pci_device.validate_device(dev, f"{field}[{i}]"))
        except pci_errors.PciError as e:
            reason = "required field is missing" if e.reason == "required" else e.reason
            raise invalid(e.field, reason) from None
    by_addr: dict[str, pci_device.PciDevice] = {}
    for i, dev in enumerate(devices):
        if dev.address in by_addr:
            raise expected(f"{field}[{i}].address", "an address not used by another device",
                           dev.address)
        by_addr[dev.address] = dev
    for i, dev in enumerate(devices):
        if dev.dev_type != pci_device.TYPE_VF:
            continue
        parent = by_addr.get(dev.parent_addr)
        if parent is None or parent.dev_type != pci_device.TYPE_PF:
            raise expected(f"{field}[{i}].parent_addr",
                           "the address of a type-PF device listed for this host",
                           dev.parent_addr)
    return devices


# Kept as JSON text: json.loads gives each host its own dicts ~10x faster than deepcopy.
_numa_topology_memo = _memoised(lambda v, f: json.dumps(_numa_topology(v, f)), json.loads)
# PciDevice records are frozen: a new list of the same records is enough.
_pci_devices_memo = _memoised(_pci_devices, list)


def forget_validated() -> None:
    """Drop the remembered NUMA and PCI validations (benchmarks measure cold)."""
    _numa_topology_memo.cache_clear()
    _pci_devices_memo.cache_clear()
    _numa_layout_error.cache_clear()


def parse_pci_devices(value: Any, field: str = "devices") -> list[pci_device.PciDevice]:
    """A node's whole device list as a report gives it, held to the fleet file's
    rules (unique addresses, every VF's PF listed); raises InvalidRequest."""
    return _pci_devices(value, field)


# -- aggregates and the fleet -----------------------------------------------------------

_AGGREGATE_KEYS = frozenset({"name", "availability_zone", "hosts", "metadata"})


def _parse_aggregate(data: Any, known_hosts: set[str]) -> AggregateRecord:
    agg = validation.name_keys(validation.mapping(data, "aggregate entry"), "aggregate entry")
    known_keys(agg, _AGGREGATE_KEYS)
    if "name" not in agg:
        raise invalid("name", "required field is missing")
    agg_name = validation.name(agg["name"], "name")
    az = optional(validation.name, agg.get("availability_zone"), "availability_zone")
    metadata = validation.metadata(agg.get("metadata") or {}, "metadata")
    # the zone is a name however it is given (metadata values may be blank)
    meta_az = optional(validation.name, metadata.pop("availability_zone", None),
                       "metadata.availability_zone")
    if meta_az is not None and az is not None and meta_az != az:
        raise expected("metadata.availability_zone",
                       f"the same zone as availability_zone ({az!r})", meta_az)
    az = az or meta_az
    hosts = validation.names(agg.get("hosts") or [], "hosts")
    seen: set[str] = set()
    for i, host in enumerate(hosts):
        if host not in known_hosts:
            raise expected(f"hosts[{i}]", "a host defined under hosts:", host)
        if host in seen:
            raise expected(f"hosts[{i}]", "a host listed once per aggregate", host)
        seen.add(host)
    return AggregateRecord(name=agg_name, availability_zone=az, hosts=tuple(hosts),
                           metadata=metadata)


def load_fleet(data: dict, defaults: Mapping[str, Any] | None = None) -> Fleet:
    """Validate a whole fleet document and return it; raises InvalidFleet."""
    if not isinstance(data, dict):
        raise InvalidFleet(f"fleet: expected a mapping with hosts:, got {show(data)}",
                           field="fleet", reason="expected a mapping")
    try:
        _check_values(data, "", MAX_FLEET_VALUES)
    except exception.InvalidRequest as e:
        raise InvalidFleet(f"{e.field}: {e.reason}", field=e.field, reason=e.reason) from None
    unknown = sorted(str(k) for k in data if k not in ("hosts", "aggregates"))
    if unknown:
        raise InvalidFleet(f"{unknown[0]}: unknown key (known keys: aggregates, hosts)",
                           field=unknown[0], reason="unknown key")
    raw_hosts = data.get("hosts")
    if not isinstance(raw_hosts, list):
        raise InvalidFleet(f"hosts: expected a list of hosts, got {show(raw_hosts)}",
                           field="hosts", reason="expected a list")
    if defaults is None:
        defaults = compute_defaults()
    hosts: list[HostRecord] = []
    by_host: dict[str, int] = {}
    by_node: dict[str, int] = {}
    for i, entry in enumerate(raw_hosts):
        rec = parse_host(entry, i, defaults)
        for name, seen, what in ((rec.host, by_host, "host"), (rec.node, by_node, "node")):
            if name in seen:
                reason = (f"expected a unique {what} name, got {name!r} "
                          f"(also hosts[{seen[name]}])")
                raise InvalidFleet(f"{_host_prefix(i, entry)}: {what}: {reason}",
                                   field=f"hosts[{i}].{what}", reason=reason)
            seen[name] = i
        hosts.append(rec)

    raw_aggs = data.get("aggregates") or []
    if not isinstance(raw_aggs, list):
        raise InvalidFleet(f"aggregates: expected a list of aggregates, got {show(raw_aggs)}",
                           field="aggregates", reason="expected a list")
    aggregates: list[AggregateRecord] = []
    names: dict[str, int] = {}
    zone_of: dict[str, tuple[str, str]] = {}
    for i, entry in enumerate(raw_aggs):
        name = entry.get("name") if isinstance(entry, dict) else None
        prefix = f"aggregates[{i}] ({name})" if isinstance(name, str) else f"aggregates[{i}]"
        try:
            agg = _parse_aggregate(entry, set(by_host))
            if agg.name in names:
                raise expected("name", f"a unique aggregate name (also aggregates"
                                       f"[{names[agg.name]}])", agg.name)
            names[agg.name] = i
            if agg.availability_zone:
                for host in agg.hosts:
                    other = zone_of.get(host)
                    if other and other[0] != agg.availability_zone:
                        raise invalid(
                            "availability_zone",
                            f"host {host} already in zone {other[0]} (aggregate {other[1]});"
                            " a host is in one availability zone only")
                    zone_of[host] = (agg.availability_zone, agg.name)
        except exception.InvalidRequest as e:
            raise InvalidFleet(f"{prefix}: {e.field}: {e.reason}",
                               field=f"aggregates[{i}].{e.field}", reason=e.reason) from None
        aggregates.append(agg)
    return Fleet(hosts=tuple(hosts), aggregates=tuple(aggregates))


def load_fleet_file(path: str, defaults: Mapping[str, Any] | None = None) -> Fleet:
    """Read and validate a fleet file: YAML, or JSON (which is YAML too).

    A document that starts with ``{`` is read by the JSON parser: the same
    document, 30-50x faster than any YAML loader (a 10,000-host fleet with NUMA
    topologies takes ~1 s as JSON against tens of seconds as YAML).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidFleet(f"{path}: cannot read: {e.strerror}", field="file",
                           reason=str(e.strerror)) from None
    except UnicodeDecodeError as e:
        raise InvalidFleet(f"{path}: not UTF-8 text (byte {e.start})", field="file",
                           reason="not UTF-8 text") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidFleet(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): "
                               f"{e.msg}", field="file", reason="not valid JSON") from None
        except RecursionError:
            raise InvalidFleet(f"{path}: nested too deeply", field="file",
                               reason=f"nesting of at most {MAX_DEPTH} levels") from None
        except ValueError as e:         # e.g. an integer of more than 4,300 digits
            raise _unparsable(path, "JSON", e) from None
        return load_fleet(data, defaults)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        problem = getattr(e, "problem", None) or str(e)
        raise InvalidFleet(f"{path}: not valid YAML{at}: {problem}", field="file",
                           reason="not valid YAML") from None
    except UnicodeDecodeError as e:
        raise InvalidFleet(f"{path}: not UTF-8 text (byte {e.start})", field="file",
                           reason="not UTF-8 text") from None
    except RecursionError:
        raise InvalidFleet(f"{path}: nested too deeply", field="file",
                           reason=f"nesting of at most {MAX_DEPTH} levels") from None
    except ValueError as e:             # e.g. an integer of more than 4,300 digits
        raise _unparsable(path, "YAML", e) from None
    return load_fleet(data, defaults)


def _unparsable(path: str, kind: str, error: ValueError) -> InvalidFleet:
    """A value the parser itself cannot build (Python refuses to convert an integer
    of more than 4,300 digits), named as invalid input."""
    text = str(error).split(":")[0][:120]
    return InvalidFleet(f"{path}: not valid {kind}: {text}", field="file",
                        reason=f"not valid {kind}: {text}")
