"""ComputeCapabilitiesFilter: flavor extra specs against host capabilities.

Which extra specs are checked (Nova's rules):

- ``capabilities:<name>[:<sub>...]``: ``<name>`` is a host attribute (table
  below) or else a key of the host's ``stats``; ``<sub>`` walks into a dict (or
  a JSON string holding one), e.g. ``capabilities:cpu_info:vendor``. A
  capability the host lacks fails the host.
- an unscoped key (no ``:``) is checked the same way only when it names a host
  attribute or a stats key of that host; otherwise it is ignored.
- any other scope (``hw:``, ``pci_passthrough:``…) is ignored here.

The host value is compared as a string (Python ``str``; booleans as
``true``/``false``) with the operators of :mod:`scheduler.filters.extra_specs_ops`.
"""
from __future__ import annotations

import json
from typing import Any

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.filters.extra_specs_ops import Predicate, compile_requirement

SCOPE = "capabilities"

#: Capability name -> HostState attribute. Includes Nova's names for the same
#: values so that existing flavors keep working.
HOST_ATTRIBUTES: dict[str, str] = {
    "host": "host",
    "nodename": "nodename",
    "hypervisor_hostname": "nodename",
    "uuid": "uuid",
    "host_ip": "host_ip",
    "hypervisor_type": "hypervisor_type",
    "hypervisor_version": "hypervisor_version",
    "cpu_info": "cpu_info",
    "supported_instances": "supported_instances",
    "availability_zone": "availability_zone",
    "stats": "stats",
    "metrics": "metrics",
    "vcpus": "vcpus",
    "vcpus_total": "vcpus",
    "vcpus_used": "vcpus_used",
    "free_vcpus": "free_vcpus",
    "memory_mb": "memory_mb",
    "total_usable_ram_mb": "memory_mb",
    "memory_mb_used": "memory_mb_used",
    "free_ram_mb": "free_ram_mb",
    "local_gb": "local_gb",
    "total_usable_disk_gb": "local_gb",
    "disk_mb_used": "disk_mb_used",
    "free_disk_mb": "free_disk_mb",
    "num_instances": "num_instances",
    "num_io_ops": "num_io_ops",
    "failed_builds": "failed_builds",
    "cpu_allocation_ratio": "cpu_allocation_ratio",
    "ram_allocation_ratio": "ram_allocation_ratio",
    "disk_allocation_ratio": "disk_allocation_ratio",
}


class _Requirement:
    """One parsed extra spec: where to look on the host and what must hold."""

    __slots__ = ("first", "attribute", "rest", "unscoped", "check", "reason")

    def __init__(self, key: str, path: list[str], unscoped: bool, req: str) -> None:
        self.first = path[0]
        self.attribute = HOST_ATTRIBUTES.get(path[0])
        self.rest = tuple(path[1:])
        self.unscoped = unscoped
        self.check: Predicate = compile_requirement(req)
        self.reason = f"extra spec {key}='{req}' not satisfied"


def parse_extra_specs(extra_specs) -> tuple[_Requirement, ...]:
    """The extra specs this filter checks, parsed (once per request)."""
    out = []
    for key, req in extra_specs.items():
        path = key.split(":")
        if len(path) == 1:
            out.append(_Requirement(key, path, True, req))
        elif path[0] == SCOPE and len(path) > 1 and path[1]:
            out.append(_Requirement(key, path[1:], False, req))
    return tuple(out)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _lookup(host, item: _Requirement) -> Any:
    """The host's value for ``item``, or None when the host lacks it."""
    value = None
    if item.attribute is not None:
        value = getattr(host, item.attribute)
    if value is None:
        value = host.stats.get(item.first)
    for name in item.rest:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


#: Host attributes that change with placements or are unique per host: a
#: request reading them is answered host by host, not per class.
_PER_HOST = frozenset({"host", "nodename", "uuid", "host_ip", "vcpus_used", "free_vcpus",
                       "memory_mb_used", "free_ram_mb", "disk_mb_used", "free_disk_mb",
                       "num_instances", "num_io_ops", "failed_builds"})


class _Request:
    """The checked extra specs of one request, parsed once."""

    __slots__ = ("items", "key", "per_host")

    def __init__(self, items: tuple[_Requirement, ...], key: tuple) -> None:
        self.items = items
        self.key = key
        self.per_host = any(item.attribute in _PER_HOST for item in items)


class ComputeCapabilitiesFilter(BaseHostFilter):
    """Removes hosts whose capabilities don't satisfy the flavor's extra specs.
    Hosts with the same static capabilities are asked once, unless the request
    reads a usage counter or a per-host name."""

    # Capabilities may name usage counters (num_instances, free_ram_mb…) that
    # change as earlier instances of the request are placed.
    run_filter_once_per_request = False

    def prepare(self, request):
        specs = request.spec.extra_specs
        items = parse_extra_specs(specs)
        if not items:
            return SKIP
        return _Request(items, tuple(sorted(specs.items())))

    def class_key(self, host):
        return (host.hypervisor_type, host.hypervisor_version,
                json.dumps(host.cpu_info, sort_keys=True, default=str),
                tuple(tuple(inst) for inst in host.supported_instances),
                host.availability_zone, json.dumps(host.stats, sort_keys=True, default=str),
                json.dumps(host.metrics, sort_keys=True, default=str), host.vcpus,
                host.memory_mb, host.local_gb, host.cpu_allocation_ratio,
                host.ram_allocation_ratio, host.disk_allocation_ratio)

    def class_for(self, req: _Request) -> str | None:
        return None if req.per_host else ""

    def memo_key(self, req: _Request):
        return req.key

    def host_passes(self, host, req: _Request) -> str | None:
        for item in req.items:
            if item.unscoped and item.attribute is None and item.first not in host.stats:
                continue
            value = _lookup(host, item)
            if value is None or not item.check(_as_text(value)):
                return item.reason
        return None
