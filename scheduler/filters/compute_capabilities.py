"""ComputeCapabilitiesFilter: flavor extra specs against host capabilities.

Which extra specs are checked (Nova's rules):

- ``capabilities:<name>[:<sub>...]``: ``<name>`` is a host attribute (table
  below) or else a key of the host's ``stats``; ``<sub>`` walks into a dict (or
  a JSON string holding one), e.g. ``capabilities:cpu_info:vendor``. A
  capability the host lacks fails the host.
- an unscoped key (no ``:``) is checked the same way only when it names a host
  attribute or a stats key of that host; otherwise it is ignored.
- ``hw:maxphysaddr_bits: N`` is checked as ``capabilities:cpu_info:maxphysaddr:bits``
  ``>= N`` (replacing a spec of that key): a host that does not report its
  physical address width fails.
- any other scope (``hw:``, ``pci_passthrough:``…) is ignored here.

The host value is compared as a string (Python ``str``; booleans as
``true``/``false``) with the operators of :mod:`scheduler.filters.extra_specs_ops`.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.filters.extra_specs_ops import Predicate, compile_requirement, numeric_requirement
from scheduler.host_classes import PASS, UNKNOWN
from scheduler.request_spec import address_bits

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

    __slots__ = ("spec", "first", "attribute", "rest", "unscoped", "check", "reason",
                 "numeric")

    def __init__(self, key: str, path: list[str], unscoped: bool, req: str) -> None:
        self.spec = (key, req)
        self.first = path[0]
        self.attribute = HOST_ATTRIBUTES.get(path[0])
        self.rest = tuple(path[1:])
        self.unscoped = unscoped
        self.check: Predicate = compile_requirement(req)
        self.reason = f"extra spec {key}='{req}' not satisfied"
        #: (compare, operand) for a numeric operator, else None.
        self.numeric = numeric_requirement(req)


#: A flavor's guest physical address width: the host's ``cpu_info`` must report
#: at least as many bits (it replaces a ``capabilities:`` spec of that path).
ADDRESS_BITS_SPEC = "hw:maxphysaddr_bits"
ADDRESS_BITS_PATH = ["cpu_info", "maxphysaddr", "bits"]


def parse_extra_specs(extra_specs) -> tuple[_Requirement, ...]:
    """The extra specs this filter checks, parsed (once per request). A scoped
    key with an empty name (``capabilities:``) names nothing a host has, so it
    fails every host."""
    out = []
    bits = address_bits(extra_specs.get(ADDRESS_BITS_SPEC))
    replaced = SCOPE + ":" + ":".join(ADDRESS_BITS_PATH) if bits is not None else None
    for key, req in extra_specs.items():
        path = key.split(":")
        if len(path) == 1:
            out.append(_Requirement(key, path, True, req))
        elif path[0] == SCOPE and key != replaced:
            out.append(_Requirement(key, path[1:], False, req))
    if bits is not None:
        item = _Requirement(ADDRESS_BITS_SPEC, ADDRESS_BITS_PATH, False, f">= {bits}")
        item.reason = f"extra spec {ADDRESS_BITS_SPEC}='{extra_specs[ADDRESS_BITS_SPEC]}' " \
                      f"not satisfied"
        out.append(item)
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


#: Usage counters (they change with placements), as HostColumns columns.
_COUNTERS: dict[str, Any] = {
    "vcpus_used": lambda cols: cols.vcpus_used,
    "free_vcpus": lambda cols: cols.vcpus_usable - cols.vcpus_used,
    "memory_mb_used": lambda cols: cols.memory_used,
    "free_ram_mb": lambda cols: cols.free_ram,
    "disk_mb_used": lambda cols: cols.disk_used,
    "free_disk_mb": lambda cols: cols.free_disk,
    "num_instances": lambda cols: cols.num_instances,
    "num_io_ops": lambda cols: cols.num_io_ops,
    "failed_builds": lambda cols: cols.failed_builds,
}
#: Values unique to each host: a request reading them is answered host by host.
_IDENTITY = frozenset({"host", "nodename", "uuid", "host_ip"})


class _Request:
    """The checked extra specs of one request, parsed once."""

    __slots__ = ("items", "key")

    def __init__(self, items: tuple[_Requirement, ...], key: tuple) -> None:
        self.items = items
        self.key = key


class ComputeCapabilitiesFilter(BaseHostFilter):
    """Removes hosts whose capabilities don't satisfy the flavor's extra specs.
    Hosts with the same static capabilities are asked once; usage counters are
    compared as columns."""

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
        """Everything but the usage counters and the per-host names."""
        return (host.hypervisor_type, host.hypervisor_version,
                json.dumps(host.cpu_info, sort_keys=True, default=str),
                tuple(tuple(inst) for inst in host.supported_instances),
                host.availability_zone, json.dumps(host.stats, sort_keys=True, default=str),
                json.dumps(host.metrics, sort_keys=True, default=str), host.vcpus,
                host.memory_mb, host.local_gb, host.cpu_allocation_ratio,
                host.ram_allocation_ratio, host.disk_allocation_ratio)

    def class_for(self, req: _Request) -> str | None:
        """The class key covers the request unless it reads usage or names."""
        per_host = _IDENTITY.union(_COUNTERS)
        return None if any(item.attribute in per_host for item in req.items) else ""

    def refusals(self, cols, req: _Request):
        """One mask per checked extra spec, in order (a host gets the first
        failing spec's reason): usage counters with a numeric operator compare
        their column; the other specs are asked of one host per class (equal
        static capabilities); per-host names, host by host."""
        static: list[int] = []
        masks: list[Any] = []
        for item in req.items:
            column = _COUNTERS.get(item.attribute) if not item.rest else None
            if column is not None and item.numeric is not None:
                compare, wanted = item.numeric
                masks.append(True if wanted is None else ~compare(column(cols), wanted))
            elif item.attribute in _IDENTITY or item.attribute in _COUNTERS:
                masks.append(np.fromiter((self.host_passes_one(h, item) is not None
                                          for h in cols.hosts), dtype=bool, count=cols.n))
            else:
                static.append(len(masks))
                masks.append(None)
        if static:
            for k, mask in zip(static, self._per_class(cols, [req.items[k] for k in static]),
                               strict=True):
                masks[k] = mask
        return [(item.reason, mask) for item, mask in zip(req.items, masks, strict=True)]

    def _per_class(self, cols, items: list[_Requirement]) -> list[np.ndarray]:
        """Each item's refused-rows mask, from one host of each class. A class's
        answer is remembered across requests (it depends on the spec and the
        class's content only); a class whose host changed since its row was
        written is asked host by host and not remembered."""
        name = self.class_column("")
        codes = cols.class_codes(name)
        hosts = cols.hosts
        versions = cols.versions
        masks = []
        for item in items:
            answers = cols.classes.answers(name, ("spec", item.spec))
            known = answers.known(codes)
            todo = np.flatnonzero(known == UNKNOWN)
            if len(todo):
                _, first = np.unique(codes[todo], return_index=True)
                for r in todo[first].tolist():
                    host = hosts[r]
                    seen = host.version
                    reason = self.host_passes_one(host, item)
                    if seen % 2 == 0 and versions[r] == seen and host.version == seen:
                        answers.remember(int(codes[r]), reason)
                known = answers.known(codes)
                for r in np.flatnonzero(known == UNKNOWN).tolist():
                    known[r] = answers.code_of(self.host_passes_one(hosts[r], item))
            masks.append(known != PASS)
        return masks

    @staticmethod
    def host_passes_one(host, item: _Requirement) -> str | None:
        """One extra spec on one host."""
        if item.unscoped and item.attribute is None and item.first not in host.stats:
            return None
        value = _lookup(host, item)
        if value is None or not item.check(_as_text(value)):
            return item.reason
        return None

    def host_passes(self, host, req: _Request) -> str | None:
        for item in req.items:
            reason = self.host_passes_one(host, item)
            if reason is not None:
                return reason
        return None
