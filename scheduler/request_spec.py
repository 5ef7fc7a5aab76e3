"""RequestSpec: the ``select_destinations`` payload, validated
(doc/source/reference/file-formats.rst).

``RequestSpec.from_primitive`` checks every field and raises ``InvalidRequest``
naming the field; nothing else in the scheduler re-validates. Derived values
(``disk_mb``, the NUMA topology, the PCI requests) are computed here once.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from scheduler import resource_request
from scheduler.exception import InvalidRequest
from scheduler.priority import Priority
from scheduler.validation import (
    MAX_LIST,
    integer,
    known_keys,
    mapping,
    optional,
    sequence,
    strings,
    text,
    text_mapping,
    uuids,
)

GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
MAX_INSTANCES = 1000
#: PCI requests in one spec: ``pci_passthrough:alias`` items plus ``pci_requests``.
MAX_PCI_REQUESTS = 64
#: Devices asked for by one instance, over all its PCI requests.
MAX_PCI_DEVICES = 1024

_TOP_LEVEL = frozenset({
    "num_instances", "instance_uuids", "project_id", "user_id", "flavor", "image",
    "availability_zone", "scheduler_hints", "instance_group", "pci_requests",
    "force_hosts", "force_nodes", "ignore_hosts", "member_of", "priority", "preemptible",
})
_FLAVOR_KEYS = frozenset({"name", "vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap",
                          "extra_specs", "id", "flavorid"})
_IMAGE_KEYS = frozenset({"id", "name", "properties"})
_GROUP_KEYS = frozenset({"uuid", "name", "policy", "rules", "members", "hosts"})


@dataclasses.dataclass(frozen=True, slots=True)
class Flavor:
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int = 0
    swap: int = 0
    name: str | None = None
    extra_specs: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_primitive(cls, data: Any) -> Flavor:
        known_keys(mapping(data, "flavor"), _FLAVOR_KEYS, "flavor")
        for key in ("vcpus", "memory_mb", "root_gb"):
            if key not in data:
                raise InvalidRequest(field=f"flavor.{key}", reason="required")
        return cls(
            vcpus=integer(data["vcpus"], "flavor.vcpus", 1, 4096),
            memory_mb=integer(data["memory_mb"], "flavor.memory_mb", 1, 1 << 40),
            root_gb=integer(data["root_gb"], "flavor.root_gb", 0, 1 << 30),
            ephemeral_gb=integer(data.get("ephemeral_gb", 0), "flavor.ephemeral_gb", 0, 1 << 30),
            swap=integer(data.get("swap", 0) or 0, "flavor.swap", 0, 1 << 30),
            name=optional(text, data.get("name"), "flavor.name"),
            extra_specs=text_mapping(data.get("extra_specs"), "flavor.extra_specs"),
        )

    def to_primitive(self) -> dict:
        return {"name": self.name, "vcpus": self.vcpus, "memory_mb": self.memory_mb,
                "root_gb": self.root_gb, "ephemeral_gb": self.ephemeral_gb, "swap": self.swap,
                "extra_specs": dict(self.extra_specs)}


@dataclasses.dataclass(frozen=True, slots=True)
class Image:
    id: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_primitive(cls, data: Any) -> Image:
        if data is None:
            return cls()
        known_keys(mapping(data, "image"), _IMAGE_KEYS, "image")
        return cls(id=optional(text, data.get("id"), "image.id"),
                   properties=text_mapping(data.get("properties"), "image.properties"))

    def to_primitive(self) -> dict:
        return {"id": self.id, "properties": dict(self.properties)}


@dataclasses.dataclass(frozen=True, slots=True)
class InstanceGroup:
    uuid: str
    policy: str
    max_server_per_host: int | None = None
    name: str | None = None

    @classmethod
    def from_primitive(cls, data: Any) -> InstanceGroup | None:
        if data is None:
            return None
        known_keys(mapping(data, "instance_group"), _GROUP_KEYS, "instance_group")
        if "uuid" not in data:
            raise InvalidRequest(field="instance_group.uuid", reason="required")
        policy = data.get("policy")
        if policy not in GROUP_POLICIES:
            raise InvalidRequest(field="instance_group.policy",
                                 reason=f"must be one of {', '.join(GROUP_POLICIES)}, "
                                        f"got {policy!r}")
        rules = optional(mapping, data.get("rules"), "instance_group.rules", MAX_LIST) or {}
        known_keys(rules, frozenset({"max_server_per_host"}), "instance_group.rules")
        max_per_host = None
        if "max_server_per_host" in rules:
            if policy != "anti-affinity":
                raise InvalidRequest(field="instance_group.rules.max_server_per_host",
                                     reason="only valid with the anti-affinity policy")
            raw = rules["max_server_per_host"]
            if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) < 19:
                raw = int(raw)
            max_per_host = integer(raw, "instance_group.rules.max_server_per_host", 1,
                                   MAX_INSTANCES)
        return cls(uuid=text(data["uuid"], "instance_group.uuid", 36), policy=policy,
                   max_server_per_host=max_per_host,
                   name=optional(text, data.get("name"), "instance_group.name"))

    def to_primitive(self) -> dict:
        rules = {}
        if self.max_server_per_host is not None:
            rules["max_server_per_host"] = self.max_server_per_host
        return {"uuid": self.uuid, "policy": self.policy, "rules": rules, "name": self.name}


def _one(raw: Any) -> Any:
    """A hint as Nova stores it (a one-item list) is that item."""
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        return raw[0]
    return raw


def _query(raw: Any):
    raw = _one(raw)
    if raw is None:
        return None
    from scheduler.filters import json_filter

    return json_filter.parse_query(raw)


def _near_network(near_ip: Any, cidr: Any):
    if near_ip is None and cidr is None:
        return None
    from scheduler.filters import simple_cidr_affinity

    return simple_cidr_affinity.parse_near(_one(near_ip), _one(cidr))


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulerHints:
    same_host: tuple[str, ...] = ()
    different_host: tuple[str, ...] = ()
    group: str | None = None
    other: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The ``query`` hint, checked and parsed (JsonFilter), or None.
    query: Any = None
    #: The network of ``build_near_host_ip`` and ``cidr`` (SimpleCIDRAffinityFilter).
    near_network: Any = None

    @classmethod
    def from_primitive(cls, data: Any) -> SchedulerHints:
        data = optional(mapping, data, "scheduler_hints", MAX_LIST) or {}
        other = {k: v for k, v in data.items()
                 if k not in ("same_host", "different_host", "group")}
        for k, v in other.items():
            text(k, "scheduler_hints")
            if not isinstance(v, str | int | float | bool | list | type(None)):
                raise InvalidRequest(field=f"scheduler_hints.{k}",
                                     reason="expected a string, number, boolean or list")
        return cls(
            same_host=tuple(uuids(strings(data.get("same_host"), "scheduler_hints.same_host"),
                                  "scheduler_hints.same_host", distinct=False)),
            different_host=tuple(uuids(strings(data.get("different_host"),
                                               "scheduler_hints.different_host"),
                                       "scheduler_hints.different_host", distinct=False)),
            group=optional(text, data.get("group"), "scheduler_hints.group"),
            other=other,
            query=_query(other.get("query")),
            near_network=_near_network(other.get("build_near_host_ip"), other.get("cidr")),
        )

    def to_primitive(self) -> dict:
        out = dict(self.other)
        if self.same_host:
            out["same_host"] = list(self.same_host)
        if self.different_host:
            out["different_host"] = list(self.different_host)
        if self.group:
            out["group"] = self.group
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec:
    """A validated request. Immutable: filters and the consume step read it only."""

    flavor: Flavor
    num_instances: int = 1
    instance_uuids: tuple[str, ...] | None = None
    project_id: str | None = None
    user_id: str | None = None
    image: Image = dataclasses.field(default_factory=Image)
    availability_zone: str | None = None
    scheduler_hints: SchedulerHints = dataclasses.field(default_factory=SchedulerHints)
    instance_group: InstanceGroup | None = None
    pci_requests: tuple = ()
    force_hosts: tuple[str, ...] = ()
    force_nodes: tuple[str, ...] = ()
    ignore_hosts: tuple[str, ...] = ()
    numa_topology: Any = None
    raw_pci_requests: tuple = ()
    #: What the request asks of a host's NUMA cells and PCI devices (guest
    #: topology, device counts, specs, policies): equal keys get equal fits.
    fit_key: Any = None
    #: What it asks of the ledger: resource classes and traits, in groups
    #: (``scheduler.resource_request``), and the aggregates it must be in.
    resources: Any = None
    raw_member_of: Any = None
    #: ``berth:priority`` / ``berth:preemptible`` (``scheduler.priority``).
    priority: Priority = Priority()

    # -- derived values -------------------------------------------------
    @property
    def vcpus(self) -> int:
        return self.flavor.vcpus

    @property
    def memory_mb(self) -> int:
        return self.flavor.memory_mb

    @property
    def disk_mb(self) -> int:
        """(root_gb + ephemeral_gb) * 1024 + swap, in MB."""
        f = self.flavor
        return (f.root_gb + f.ephemeral_gb) * 1024 + f.swap

    @property
    def extra_specs(self) -> Mapping[str, str]:
        return self.flavor.extra_specs

    # -- (de)serialisation ----------------------------------------------
    @classmethod
    def from_primitive(cls, data: Any, pci_aliases: Mapping | None = None) -> RequestSpec:
        """Validate a payload; raise ``InvalidRequest`` naming the first bad field."""
        known_keys(mapping(data, "request_spec"), _TOP_LEVEL)
        if "flavor" not in data:
            raise InvalidRequest(field="flavor", reason="required")
        flavor = Flavor.from_primitive(data["flavor"])
        num = integer(data.get("num_instances", 1), "num_instances", 1, MAX_INSTANCES)
        instance_uuids = None
        if data.get("instance_uuids") is not None:
            instance_uuids = tuple(uuids(strings(data["instance_uuids"], "instance_uuids"),
                                         "instance_uuids"))
            if len(instance_uuids) != num:
                raise InvalidRequest(field="instance_uuids",
                                     reason=f"{len(instance_uuids)} given for "
                                            f"num_instances={num}")
        image = Image.from_primitive(data.get("image"))
        group = InstanceGroup.from_primitive(data.get("instance_group"))
        hints = SchedulerHints.from_primitive(data.get("scheduler_hints"))
        if hints.group and group and hints.group != group.uuid:
            raise InvalidRequest(field="scheduler_hints.group",
                                 reason="does not match instance_group.uuid")
        raw_pci = list(sequence(data.get("pci_requests") or [], "pci_requests",
                                MAX_PCI_REQUESTS))
        spec = cls(
            flavor=flavor,
            num_instances=num,
            instance_uuids=instance_uuids,
            project_id=optional(text, data.get("project_id"), "project_id"),
            user_id=optional(text, data.get("user_id"), "user_id"),
            image=image,
            availability_zone=optional(text, data.get("availability_zone"),
                                       "availability_zone"),
            scheduler_hints=hints,
            instance_group=group,
            force_hosts=strings(data.get("force_hosts"), "force_hosts"),
            force_nodes=strings(data.get("force_nodes"), "force_nodes"),
            ignore_hosts=strings(data.get("ignore_hosts"), "ignore_hosts"),
            raw_pci_requests=tuple(raw_pci),
            priority=Priority.from_request(data, flavor.extra_specs),
        )
        _check_address_bits(flavor, image)
        numa_topology = _numa_topology(flavor, image)
        pci_requests = _pci_requests(flavor, image, raw_pci, pci_aliases or {})
        raw_member_of = data.get("member_of")
        resources = resource_request.from_request(flavor, image, numa_topology,
                                                  raw_member_of)
        return dataclasses.replace(spec, numa_topology=numa_topology,
                                   pci_requests=pci_requests,
                                   fit_key=_fit_key(numa_topology, pci_requests),
                                   resources=resources, raw_member_of=raw_member_of)

    def to_primitive(self) -> dict:
        out: dict[str, Any] = {
            "num_instances": self.num_instances,
            "flavor": self.flavor.to_primitive(),
            "image": self.image.to_primitive(),
            "scheduler_hints": self.scheduler_hints.to_primitive(),
            "force_hosts": list(self.force_hosts),
            "force_nodes": list(self.force_nodes),
            "ignore_hosts": list(self.ignore_hosts),
        }
        if self.instance_uuids is not None:
            out["instance_uuids"] = list(self.instance_uuids)
        for key in ("project_id", "user_id", "availability_zone"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.instance_group is not None:
            out["instance_group"] = self.instance_group.to_primitive()
        if self.raw_pci_requests:
            out["pci_requests"] = list(self.raw_pci_requests)
        if self.raw_member_of is not None:
            out["member_of"] = self.raw_member_of
        if self.priority.value is not None:
            out["priority"] = self.priority.value
        if self.priority.preemptible:
            out["preemptible"] = True
        return out

    def for_one_instance(self) -> RequestSpec:
        """The same request for a single instance (used to store with allocations)."""
        return dataclasses.replace(self, num_instances=1, instance_uuids=None)

    def replace(self, **changes) -> RequestSpec:
        return dataclasses.replace(self, **changes)


def _fit_key(numa_topology: Any, pci_requests: tuple) -> tuple:
    return (numa_topology,
            tuple((r.count, tuple(tuple(sorted(d.items())) for d in r.specs), r.numa_policy,
                   r.alias_name) for r in pci_requests))


#: Where a request asks for a guest physical address width (``cpu_info``'s
#: ``maxphysaddr.bits`` on the host must be at least this).
ADDRESS_BITS_KEYS = (("flavor.extra_specs", "hw:maxphysaddr_bits"),
                     ("image.properties", "hw_maxphysaddr_bits"))
MAX_ADDRESS_BITS = 1024


def address_bits(value: str | None) -> int | None:
    """``hw:maxphysaddr_bits`` / ``hw_maxphysaddr_bits`` as a number of bits, or
    None when absent or not a whole number from 1 to MAX_ADDRESS_BITS."""
    if value is None:
        return None
    text = value.strip()
    if not text.isascii() or not text.isdigit():
        return None
    bits = int(text)
    return bits if 1 <= bits <= MAX_ADDRESS_BITS else None


def _check_address_bits(flavor: Flavor, image: Image) -> None:
    for where, key in ADDRESS_BITS_KEYS:
        source = flavor.extra_specs if where == "flavor.extra_specs" else image.properties
        value = source.get(key)
        if value is not None and address_bits(value) is None:
            raise InvalidRequest(field=f"{where}.{key}",
                                 reason=f"expected a whole number of bits from 1 to "
                                        f"{MAX_ADDRESS_BITS}, got {value!r}")


def _numa_topology(flavor: Flavor, image: Image):
    """The guest NUMA topology from extra specs / image properties, or None."""
    specs, props = flavor.extra_specs, image.properties
    if not any(k.startswith("hw:") for k in specs) and \
            not any(k.startswith("hw_") for k in props):
        return None
    from numa import errors as numa_errors
    from numa import request as numa_request

    try:
        return numa_request.instance_topology_from_specs(
            flavor.vcpus, flavor.memory_mb, dict(specs), dict(props))
    except numa_errors.NumaError as e:
        raise InvalidRequest(field=e.field, reason=e.reason) from None


_PCI_POLICY_KEYS = (("flavor.extra_specs.hw:pci_numa_affinity_policy", "flavor",
                     "hw:pci_numa_affinity_policy"),
                    ("image.properties.hw_pci_numa_affinity_policy", "image",
                     "hw_pci_numa_affinity_policy"))


def _pci_numa_policy(flavor: Flavor, image: Image) -> str | None:
    """The flavor's (else the image's) PCI NUMA affinity policy, validated."""
    from pci.request import NUMA_POLICIES

    for field, where, key in _PCI_POLICY_KEYS:
        source = flavor.extra_specs if where == "flavor" else image.properties
        value = source.get(key)
        if value is None:
            continue
        if value not in NUMA_POLICIES:
            raise InvalidRequest(field=field, reason=f"expected one of "
                                                     f"{', '.join(NUMA_POLICIES)}, got {value!r}")
        return value
    return None


def _pci_requests(flavor: Flavor, image: Image, raw: list, aliases: Mapping) -> tuple:
    alias_spec = flavor.extra_specs.get("pci_passthrough:alias")
    policy = _pci_numa_policy(flavor, image)
    if not raw and not alias_spec:
        return ()
    if alias_spec:
        items = sum(1 for item in alias_spec.split(",") if item.strip())
        if items + len(raw) > MAX_PCI_REQUESTS:
            field = ("flavor.extra_specs.pci_passthrough:alias" if items > MAX_PCI_REQUESTS
                     else "pci_requests")
            raise InvalidRequest(field=field, reason=f"{items} alias items and {len(raw)} "
                                                     f"PCI requests: at most "
                                                     f"{MAX_PCI_REQUESTS} in all")
    from pci import errors as pci_errors
    from pci import request as pci_request

    try:
        out = ()
        if alias_spec:
            out += tuple(pci_request.requests_from_extra_spec(alias_spec, aliases,
                                                              numa_policy=policy))
        if raw:
            out += tuple(pci_request.requests_from_primitive(raw))
    except pci_errors.PciError as e:
        raise InvalidRequest(field=e.field, reason=e.reason) from None
    devices = sum(r.count for r in out)
    if devices > MAX_PCI_DEVICES:
        field = "pci_requests" if raw else "flavor.extra_specs.pci_passthrough:alias"
        raise InvalidRequest(field=field, reason=f"{devices} devices asked for: at most "
                                                 f"{MAX_PCI_DEVICES} per instance")
    return out
