"""ImagePropertiesFilter: the host supports the image's architecture, hypervisor
type and VM mode, its hypervisor version satisfies the image's requirement, and
its CPUs address as much physical memory as the image asks.

Image properties read (the older names, still set by old images, count when the
current one is absent):

=============================  ================================  ===============
property                       older name                        host value
=============================  ================================  ===============
``hw_architecture``            ``architecture``                  ``supported_instances``
``img_hv_type``                ``hypervisor_type``               ``supported_instances``
``hw_vm_mode``                 ``vm_mode``                       ``supported_instances``
``img_hv_requested_version``   ``hypervisor_version_requires``   ``hypervisor_version``
``hw_maxphysaddr_bits``                                          ``cpu_info.maxphysaddr.bits``
=============================  ================================  ===============

Architecture, hypervisor type and VM mode are canonicalised on both sides as
Nova does (lower case; ``amd64`` is ``x86_64``, ``xapi`` is ``xen``, ``pv`` is
``xen``, ``hv`` is ``hvm``…); a host passes when one entry of its
``supported_instances`` holds every requested value. The version requirement is
a comma-separated list of ``<op> version`` clauses (``>=8.0, <9``; ops ``<``
``<=`` ``==`` ``!=`` ``>=`` ``>``, no op meaning ``==``) with versions as Python
packaging reads them (``v8``, ``8.2rc1``, ``1.0.post1``), compared with the
host's hypervisor version (``8002000`` is ``8.2.0``); a host that reports no
version passes it. A host that reports no address width passes
``hw_maxphysaddr_bits`` (Nova's rule; a flavor's ``hw:maxphysaddr_bits`` is
stricter, see ComputeCapabilitiesFilter). No such property on the image: every
host passes.
"""
from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from scheduler.filters import SKIP, BaseHostFilter
from scheduler.request_spec import address_bits

_ARCH_ALIASES = {"i386": "i686", "i486": "i686", "i586": "i686", "x86_32": "i686",
                 "x86_32p": "i686", "amd64": "x86_64", "x64": "x86_64"}
_HV_TYPE_ALIASES = {"xapi": "xen"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}
#: The aliases of each position of a ``supported_instances`` entry.
_ENTRY_ALIASES = (_ARCH_ALIASES, _HV_TYPE_ALIASES, _VM_MODE_ALIASES)

#: (current name, older name, aliases) of the values matched against
#: ``supported_instances``, in the order of its entries.
_INSTANCE_PROPERTIES = (("hw_architecture", "architecture", _ARCH_ALIASES),
                        ("img_hv_type", "hypervisor_type", _HV_TYPE_ALIASES),
                        ("hw_vm_mode", "vm_mode", _VM_MODE_ALIASES))
_VERSION_PROPERTY = ("img_hv_requested_version", "hypervisor_version_requires")
_BITS_PROPERTY = "hw_maxphysaddr_bits"

_VERSION_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">=": operator.ge, ">": operator.gt,
}
_CLAUSE = re.compile(r"^\s*(<=|>=|==|!=|<|>)?\s*(\S+)\s*$")

VersionCheck = Callable[[int], bool]


def canonical(value: Any, aliases: Mapping[str, str]) -> str | None:
    """A supported-instance value as Nova compares it (None for none or blank)."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip().lower()
    return aliases.get(value, value)


@functools.lru_cache(maxsize=1024)
def canonical_instances(supported: tuple[tuple, ...]) -> tuple[frozenset, ...]:
    """A host's ``supported_instances``, each entry the set of its canonical values."""
    return tuple(frozenset(canonical(v, aliases)
                           for v, aliases in zip(entry, _ENTRY_ALIASES, strict=False))
                 for entry in supported)


def _property(props: Mapping[str, str], current: str, older: str) -> tuple[str, str | None]:
    """(name, value) of a property the image gives under its current or older name."""
    if props.get(current):
        return current, props[current]
    return older, props.get(older) or None


def hypervisor_version_tuple(version: int) -> tuple[int, ...]:
    """``8002000`` -> ``(8, 2)``: three decimal digits per component, as Nova encodes."""
    parts = []
    while version:
        parts.insert(0, version % 1000)
        version //= 1000
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts) or (0,)


@functools.lru_cache(maxsize=1024)
def _host_version(version: int) -> Version:
    return Version(".".join(str(p) for p in hypervisor_version_tuple(version)))


def parse_version_requirement(text: str) -> VersionCheck | None:
    """``">=8.0, <9"`` -> a check on an encoded hypervisor version; None if malformed."""
    clauses = []
    for raw in text.split(","):
        m = _CLAUSE.match(raw)
        if m is None:
            return None
        try:
            wanted = Version(m.group(2))
        except InvalidVersion:
            return None
        clauses.append((_VERSION_OPS[m.group(1) or "=="], wanted))

    def check(version: int) -> bool:
        have = _host_version(version)
        return all(compare(have, wanted) for compare, wanted in clauses)
    return check


def host_address_bits(host) -> float | None:
    """``cpu_info.maxphysaddr.bits`` of a host as a number, None when not reported."""
    info = host.cpu_info
    found = info.get("maxphysaddr") if isinstance(info, Mapping) else None
    bits = found.get("bits") if isinstance(found, Mapping) else None
    if isinstance(bits, bool) or not isinstance(bits, int | float | str):
        return None
    try:
        return float(bits) or None
    except ValueError:
        return None


class ImageRequirement:
    """What one request's image asks of a host (parsed once per request)."""

    __slots__ = ("values", "version_check", "bits", "reason", "invalid", "key")

    def __init__(self, props: Mapping[str, str]) -> None:
        asked = []
        values = []
        for current, older, aliases in _INSTANCE_PROPERTIES:
            name, raw = _property(props, current, older)
            value = canonical(raw, aliases)
            if value:
                values.append(value)
                asked.append(f"{name}={value}")
        self.values = tuple(values)
        version_key, version_req = _property(props, *_VERSION_PROPERTY)
        self.version_check = None
        self.invalid = False
        if version_req:
            self.version_check = parse_version_requirement(version_req)
            self.invalid = self.version_check is None
            asked.append(f"{version_key}={version_req}")
        self.bits = address_bits(props.get(_BITS_PROPERTY))
        if self.bits is not None:
            asked.append(f"{_BITS_PROPERTY}={self.bits}")
        if self.invalid:
            self.reason = f"invalid image property {version_key}: {version_req!r}"
        else:
            self.reason = "image properties not supported: " + ", ".join(asked)
        #: Everything the answer depends on in the request (the reason too: it
        #: names the properties as the image gave them).
        self.key = (self.reason, self.values, version_req, self.invalid, self.bits)

    @property
    def empty(self) -> bool:
        return not self.values and self.version_check is None and not self.invalid \
            and self.bits is None


class ImagePropertiesFilter(BaseHostFilter):
    """Removes hosts that cannot run the image (architecture, hypervisor, VM mode,
    hypervisor version, physical address bits); hosts with the same supported
    instances, hypervisor version and address bits are asked once."""

    # A host's supported instances and hypervisor don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        props = request.spec.image.properties
        if not props:
            return SKIP         # an image without properties asks nothing
        req = ImageRequirement(props)
        return SKIP if req.empty else req

    def class_key(self, host):
        return (tuple(tuple(inst) for inst in host.supported_instances),
                host.hypervisor_version, host_address_bits(host))

    def memo_key(self, req: ImageRequirement):
        return req.key

    def host_passes(self, host, req: ImageRequirement) -> str | None:
        if req.invalid:
            return req.reason
        values = req.values
        if values:
            supported = canonical_instances(tuple(tuple(i) for i in host.supported_instances))
            if not any(entry.issuperset(values) for entry in supported):
                return req.reason
        check = req.version_check
        if check is not None and host.hypervisor_version and not check(host.hypervisor_version):
            return req.reason
        if req.bits is not None:
            have = host_address_bits(host)
            if have is not None and have < req.bits:
                return req.reason
        return None
