"""ImagePropertiesFilter: the host supports the image's architecture, hypervisor
type and VM mode, and its hypervisor version satisfies the image's requirement.

Image properties read: ``hw_architecture``, ``img_hv_type``, ``hw_vm_mode``
(canonicalised as Nova does: ``amd64`` is ``x86_64``, ``pv`` is ``xen``…), and
``img_hv_requested_version`` (older name: ``hypervisor_version_requires``), e.g.
``">=8.0, <9.0"``, compared with the host's hypervisor version (``8002000`` is
``8.2.0``). A host passes when one entry of its ``supported_instances`` contains
every requested value. No such property on the image: every host passes.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable

from scheduler.filters import SKIP, BaseHostFilter

_ARCH_ALIASES = {"i386": "i686", "i486": "i686", "i586": "i686", "x86_32": "i686",
                 "x86_32p": "i686", "amd64": "x86_64", "x64": "x86_64"}
_HV_TYPE_ALIASES = {"xapi": "xen"}
_VM_MODE_ALIASES = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}

_VERSION_OPS: dict[str, Callable[[tuple, tuple], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">=": operator.ge, ">": operator.gt,
}
_CLAUSE = re.compile(r"^\s*(<=|>=|==|!=|<|>)?\s*(\d+(?:\.\d+)*)\s*$")

VersionCheck = Callable[[int], bool]


def _canonical(value: str | None, aliases: dict[str, str]) -> str | None:
    if not value:
        return None
    value = value.strip().lower()
    return aliases.get(value, value)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def hypervisor_version_tuple(version: int) -> tuple[int, ...]:
    """``8002000`` -> ``(8, 2)``: three decimal digits per component, as Nova encodes."""
    parts = []
    while version:
        parts.insert(0, version % 1000)
        version //= 1000
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts) or (0,)


def parse_version_requirement(text: str) -> VersionCheck | None:
    """``">=8.0, <9"`` -> a check on an encoded hypervisor version; None if malformed."""
    clauses = []
    for raw in text.split(","):
        m = _CLAUSE.match(raw)
        if m is None:
            return None
        clauses.append((_VERSION_OPS[m.group(1) or "=="], _version_tuple(m.group(2))))

    def check(version: int) -> bool:
        have = hypervisor_version_tuple(version)
        return all(compare(have, wanted) for compare, wanted in clauses)
    return check


class ImageRequirement:
    """What one request's image asks of a host (parsed once per request)."""

    __slots__ = ("values", "version_check", "reason", "invalid", "key")

    def __init__(self, props) -> None:
        arch = _canonical(props.get("hw_architecture"), _ARCH_ALIASES)
        hv_type = _canonical(props.get("img_hv_type"), _HV_TYPE_ALIASES)
        vm_mode = _canonical(props.get("hw_vm_mode"), _VM_MODE_ALIASES)
        self.values = tuple(v for v in (arch, hv_type, vm_mode) if v)
        version_key = ("img_hv_requested_version" if props.get("img_hv_requested_version")
                       else "hypervisor_version_requires")
        version_req = props.get(version_key)
        self.version_check = None
        self.invalid = False
        asked = [f"{k}={v}" for k, v in (("hw_architecture", arch), ("img_hv_type", hv_type),
                                         ("hw_vm_mode", vm_mode)) if v]
        if version_req:
            self.version_check = parse_version_requirement(version_req)
            self.invalid = self.version_check is None
            asked.append(f"{version_key}={version_req}")
        if self.invalid:
            self.reason = f"invalid image property {version_key}: {version_req!r}"
        else:
            self.reason = "image properties not supported: " + ", ".join(asked)
        #: Everything the answer depends on in the request.
        self.key = (self.values, version_req, self.invalid)

    @property
    def empty(self) -> bool:
        return not self.values and self.version_check is None and not self.invalid


class ImagePropertiesFilter(BaseHostFilter):
    """Removes hosts that cannot run the image (architecture, hypervisor, VM mode,
    hypervisor version); hosts with the same supported instances and hypervisor
    version are asked once."""

    # A host's supported instances and hypervisor don't change within a request.
    run_filter_once_per_request = True

    def prepare(self, request):
        req = ImageRequirement(request.spec.image.properties)
        return SKIP if req.empty else req

    def class_key(self, host):
        return (tuple(tuple(inst) for inst in host.supported_instances),
                host.hypervisor_version)

    def memo_key(self, req: ImageRequirement):
        return req.key

    def host_passes(self, host, req: ImageRequirement) -> str | None:
        if req.invalid:
            return req.reason
        values = req.values
        if values:
            for inst in host.supported_instances:
                for value in values:
                    if value not in inst:
                        break
                else:
                    break
            else:
                return req.reason
        check = req.version_check
        if check is not None and host.hypervisor_version and not check(host.hypervisor_version):
            return req.reason
        return None
