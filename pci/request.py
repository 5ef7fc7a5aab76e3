"""PCI requests of a boot: from flavor aliases or from explicit ``pci_requests``.

An alias names a kind of device (``[pci] alias``, Nova-style JSON); a flavor asks
for aliases with ``pci_passthrough:alias = "nic:2,gpu:1"``. Each request wants
``count`` devices, each matching at least one of its ``specs``; ``numa_policy``
says how close to the instance's NUMA cells they must be (see ``pci.matching``).

A spec key that is not a device field (``vendor_id``, ``product_id``,
``dev_type``, ``physical_network``) names a device tag (``[pci] device_spec``):
``{"vendor_id": "8086", "trusted": "true"}`` wants an Intel device tagged
``trusted: true``. Tag values and ``physical_network`` compare case-insensitively
(``True`` = ``true``, ``PHYSNET2`` = ``physnet2``), and a
device without the tag does not match. A device tagged ``remote_managed: true``
(a SmartNIC port managed by its DPU) is handed out only to a spec that asks for
``remote_managed: true``, as Nova keeps such devices from plain SR-IOV requests.
"""
from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from pci.device import (
    RESERVED_TAG_KEYS,
    TYPE_PF,
    is_tag_key,
    normalize_dev_type,
    normalize_hex_id,
    normalize_physical_network,
    normalize_tags,
)
from pci.errors import PciError

POLICY_REQUIRED = "required"
POLICY_LEGACY = "legacy"
POLICY_PREFERRED = "preferred"
POLICY_SOCKET = "socket"
NUMA_POLICIES = (POLICY_REQUIRED, POLICY_LEGACY, POLICY_PREFERRED, POLICY_SOCKET)
DEFAULT_NUMA_POLICY = POLICY_LEGACY

EXTRA_SPEC_FIELD = "flavor.extra_specs.pci_passthrough:alias"
# Device fields a spec may constrain: the pool key fields other than the NUMA node
# and the tags (any other spec key is a tag).
SPEC_KEYS = ("vendor_id", "product_id", "dev_type", "physical_network")
REMOTE_MANAGED_TAG = "remote_managed"
_TRUE = frozenset({"true", "1", "yes", "on"})


@dataclasses.dataclass(frozen=True)
class PciRequest:
    """``count`` devices, each matching one of ``specs``.

    A spec is a dict over ``SPEC_KEYS`` and tag names; a missing key matches
    anything, except that a spec without ``dev_type`` never matches a PF (a PF is
    handed out only when asked for by type, so VFs and PFs of one product stay
    apart) and one without ``remote_managed: true`` never matches a device with
    that tag.
    """

    count: int
    specs: tuple[dict, ...]
    alias_name: str | None = None
    numa_policy: str = DEFAULT_NUMA_POLICY
    request_id: str = ""

    @property
    def label(self) -> str:
        """How reasons name this request: ``alias nic`` or ``pci request 8086:154c``."""
        if self.alias_name:
            return f"alias {self.alias_name}"
        spec = self.specs[0] if self.specs else {}
        return "pci request {}:{}".format(spec.get("vendor_id", "*"),
                                          spec.get("product_id", "*"))

    def match_memo(self) -> dict:
        """Pool key -> ``matches(key)`` answers so far (read it before calling ``matches``).

        The filter asks the same question for every host, and hosts share
        their pool keys, so answers are kept on the request.
        """
        memo = self.__dict__.get("_match_memo")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_match_memo", memo)
        return memo

    def matches(self, key: Any) -> bool:
        """Whether a pool key (or device) satisfies one of the specs (memoised)."""
        memo = self.match_memo()
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = any(spec_matches(spec, key) for spec in self.specs)
        return hit

    def to_primitive(self) -> dict:
        """The request-spec form, accepted back by ``requests_from_primitive``."""
        prim: dict[str, Any] = {"count": self.count, "spec": [dict(s) for s in self.specs],
                                "numa_policy": self.numa_policy,
                                "request_id": self.request_id}
        if self.alias_name:
            prim["alias_name"] = self.alias_name
        return prim


@dataclasses.dataclass(frozen=True)
class Alias:
    """A named device kind from ``[pci] alias``; repeated names add specs."""

    name: str
    specs: tuple[dict, ...]
    numa_policy: str = DEFAULT_NUMA_POLICY
    device_type: str | None = None


def new_request_id() -> str:
    return str(uuid.uuid4())


def _numa_policy(value: Any, field: str) -> str:
    if value not in NUMA_POLICIES:
        raise PciError(field, f"expected one of {', '.join(NUMA_POLICIES)}, got {value!r}")
    return value


def _spec(data: Any, field: str) -> dict:
    """A normalized spec dict (``device_type`` accepted for ``dev_type``); keys that
    are no device field are tags, held to the device tags' rules."""
    if not isinstance(data, Mapping):
        raise PciError(field, f"expected a mapping, got {type(data).__name__}")
    spec: dict[str, str] = {}
    tags = {}
    for key, value in data.items():
        name = "dev_type" if key == "device_type" else key
        if name not in SPEC_KEYS:
            if isinstance(key, str) and key in RESERVED_TAG_KEYS:
                raise PciError(f"{field}.{key}",
                               f"cannot be matched; a spec matches "
                               f"{', '.join(SPEC_KEYS)} or device tags")
            tags[key] = value
            continue
        if name in spec:
            raise PciError(f"{field}.{key}", "given twice (device_type and dev_type)")
        if name in ("vendor_id", "product_id"):
            spec[name] = normalize_hex_id(value, f"{field}.{key}")
        elif name == "dev_type":
            spec[name] = normalize_dev_type(value, f"{field}.{key}")
        else:
            physnet = normalize_physical_network(value, f"{field}.{key}")
            if physnet is not None:
                spec[name] = physnet.lower()
    spec.update(normalize_tags(tags, field))
    return spec


_ALIAS_KEYS = ("name", "vendor_id", "product_id", "device_type", "numa_policy")


def _alias_entry(data: Any, field: str) -> Alias:
    if not isinstance(data, Mapping):
        raise PciError(field, f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in _ALIAS_KEYS and not is_tag_key(k))
    if unknown:
        raise PciError(f"{field}.{unknown[0]}",
                       f"unknown key; expected one of {', '.join(_ALIAS_KEYS)} or a tag name")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or any(c in name for c in ",:"):
        raise PciError(f"{field}.name", f"expected a non-empty name without ',' or ':', "
                                        f"got {name!r}")
    if "vendor_id" not in data and "product_id" not in data:
        raise PciError(field, "an alias needs vendor_id and/or product_id")
    spec = _spec({k: v for k, v in data.items() if k not in ("name", "numa_policy")}, field)
    policy = _numa_policy(data.get("numa_policy", DEFAULT_NUMA_POLICY), f"{field}.numa_policy")
    return Alias(name=name.strip(), specs=(spec,), numa_policy=policy,
                 device_type=spec.get("dev_type"))


def parse_aliases(alias_json_strings: Iterable[str]) -> dict[str, Alias]:
    """Parse ``[pci] alias`` values: each a JSON object (or a list of them).

    Entries sharing a name are alternatives (one spec each) and must agree on
    ``numa_policy`` and ``device_type``. Errors name ``pci.alias[i]``.
    """
    aliases: dict[str, Alias] = {}
    for i, text in enumerate(alias_json_strings):
        field = f"pci.alias[{i}]"
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise PciError(field, f"not valid JSON ({exc})") from None
        entries = data if isinstance(data, list) else [data]
        if not entries:
            raise PciError(field, "empty list")
        for j, entry in enumerate(entries):
            efield = f"{field}[{j}]" if isinstance(data, list) else field
            alias = _alias_entry(entry, efield)
            known = aliases.get(alias.name)
            if known is None:
                aliases[alias.name] = alias
                continue
            if (known.numa_policy, known.device_type) != (alias.numa_policy,
                                                           alias.device_type):
                raise PciError(efield, f"alias {alias.name!r} is defined again with a "
                                       f"different numa_policy or device_type")
            aliases[alias.name] = dataclasses.replace(known, specs=known.specs + alias.specs)
    return aliases


def requests_from_extra_spec(value: str, aliases: Mapping[str, Alias],
                             numa_policy: str | None = None) -> tuple[PciRequest, ...]:
    """Requests for ``pci_passthrough:alias`` (``"nic:2,gpu:1"``; ``"nic"`` means 1).

    ``numa_policy`` (e.g. the flavor's ``hw:pci_numa_affinity_policy``) overrides
    the aliases' own policy when given.
    """
    field = EXTRA_SPEC_FIELD
    if not isinstance(value, str):
        raise PciError(field, f"expected a string like 'nic:2,gpu:1', got {value!r}")
    if numa_policy is not None:
        _numa_policy(numa_policy, "flavor.extra_specs.hw:pci_numa_affinity_policy")
    requests = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count_text = (s.strip() for s in item.partition(":"))
        count = 1
        if sep:
            try:
                count = int(count_text)
            except ValueError:
                count = 0
            if count < 1:
                raise PciError(field, f"{item!r}: expected alias:count with a count >= 1")
        alias = aliases.get(name)
        if alias is None:
            known = ", ".join(sorted(aliases)) or "none configured"
            raise PciError(field, f"unknown PCI alias {name!r} (known: {known})")
        requests.append(PciRequest(count=count, specs=tuple(dict(s) for s in alias.specs),
                                   alias_name=alias.name,
                                   numa_policy=numa_policy or alias.numa_policy,
                                   request_id=new_request_id()))
    return tuple(requests)


_REQUEST_KEYS = ("count", "spec", "numa_policy", "alias_name", "request_id")


def requests_from_primitive(data: Any, field: str = "pci_requests") -> tuple[PciRequest, ...]:
    """Requests from a request spec's ``pci_requests`` list.

    Each item: ``count`` (>= 1), ``spec`` (a non-empty list of specs), optional
    ``numa_policy``, ``alias_name`` and ``request_id`` (generated if absent).
    """
    if data is None:
        return ()
    if not isinstance(data, list):
        raise PciError(field, f"expected a list, got {type(data).__name__}")
    requests = []
    for i, item in enumerate(data):
        ifield = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise PciError(ifield, f"expected an object, got {type(item).__name__}")
        unknown = sorted(set(item) - set(_REQUEST_KEYS))
        if unknown:
            raise PciError(f"{ifield}.{unknown[0]}",
                           f"unknown key; expected one of {', '.join(_REQUEST_KEYS)}")
        count = item.get("count", 1)
        if type(count) is not int or count < 1:
            raise PciError(f"{ifield}.count", f"expected an integer >= 1, got {count!r}")
        specs = item.get("spec")
        if not isinstance(specs, list) or not specs:
            raise PciError(f"{ifield}.spec", "expected a non-empty list of device specs")
        parsed = tuple(_spec(s, f"{ifield}.spec[{j}]") for j, s in enumerate(specs))
        policy = _numa_policy(item.get("numa_policy", DEFAULT_NUMA_POLICY),
                              f"{ifield}.numa_policy")
        alias_name = item.get("alias_name")
        if alias_name is not None and (not isinstance(alias_name, str) or not alias_name):
            raise PciError(f"{ifield}.alias_name", f"expected a string, got {alias_name!r}")
        request_id = item.get("request_id") or new_request_id()
        if not isinstance(request_id, str) or len(request_id) > 36:
            raise PciError(f"{ifield}.request_id",
                           f"expected a string of at most 36 characters, got {request_id!r}")
        requests.append(PciRequest(count=count, specs=parsed, alias_name=alias_name,
                                   numa_policy=policy, request_id=request_id))
    return tuple(requests)


def spec_matches(spec: Mapping[str, str], key: Any) -> bool:
    """Whether a pool key (or device) satisfies ``spec``: its device fields, then its
    tags; a ``remote_managed`` device only for a spec asking for one."""
    want = spec.get("dev_type")
    if want is None:
        if key.dev_type == TYPE_PF:
            return False
    elif want != key.dev_type:
        return False
    v = spec.get("vendor_id")
    if v is not None and v != key.vendor_id:
        return False
    p = spec.get("product_id")
    if p is not None and p != key.product_id:
        return False
    n = spec.get("physical_network")
    if n is not None and (key.physical_network is None or n != key.physical_network.lower()):
        return False
    have = getattr(key, "tag_values", None)
    if have is None:
        have = {k: value.casefold() for k, value in key.tags}
    asked_remote = False
    for name, value in spec.items():
        if name in SPEC_KEYS:
            continue
        wanted = value.casefold()
        if have.get(name) != wanted:
            return False
        if name == REMOTE_MANAGED_TAG:
            asked_remote = wanted in _TRUE
    return asked_remote or have.get(REMOTE_MANAGED_TAG) not in _TRUE
