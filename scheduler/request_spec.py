"""RequestSpec: the ``select_destinations`` payload, validated
(doc/source/reference/file-formats.rst).

``RequestSpec.from_primitive`` checks every field and raises ``InvalidRequest``
naming the field; nothing else in the scheduler re-validates. Derived values
(``disk_mb``, the NUMA topology, the PCI requests) are computed here once.
"""
from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from scheduler.exception import InvalidRequest

GROUP_POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
MAX_INSTANCES = 1000
MAX_LIST = 1000
MAX_STR = 255
#: PCI requests in one spec: ``pci_passthrough:alias`` items plus ``pci_requests``.
MAX_PCI_REQUESTS = 64
#: Devices asked for by one instance, over all its PCI requests.
MAX_PCI_DEVICES = 1024

_TOP_LEVEL = frozenset({
    "num_instances", "instance_uuids", "project_id", "user_id", "flavor", "image",
    "availability_zone", "scheduler_hints", "instance_group", "pci_requests",
    "force_hosts", "force_nodes", "ignore_hosts",
})
_FLAVOR_KEYS = frozenset({"name", "vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap",
                          "extra_specs", "id", "flavorid"})
_IMAGE_KEYS = frozenset({"id", "name", "properties"})
_GROUP_KEYS = frozenset({"uuid", "name", "policy", "rules", "members", "hosts"})


def _int(value: Any, field: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(field=field, reason=f"expected an integer, got {value!r}")
    if value < minimum:
        raise InvalidRequest(field=field, reason=f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidRequest(field=field, reason=f"must be <= {maximum}, got {value}")
    return value


def _str(value: Any, field: str, maxlen: int = MAX_STR) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(field=field, reason=f"expected a string, got {value!r}")
    if len(value) > maxlen:
        raise InvalidRequest(field=field, reason=f"longer than {maxlen} characters")
    return value


def _opt_str(value: Any, field: str) -> str | None:
    return None if value is None else _str(value, field)


def _str_list(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise InvalidRequest(field=field, reason=f"expected a list of strings, got {value!r}")
    if len(value) > MAX_LIST:
        raise InvalidRequest(field=field, reason=f"more than {MAX_LIST} entries")
    return tuple(_str(v, f"{field}[{i}]") for i, v in enumerate(value))


def _mapping(value: Any, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequest(field=field, reason=f"expected an object, got {value!r}")
    if len(value) > MAX_LIST:
        raise InvalidRequest(field=field, reason=f"more than {MAX_LIST} keys")
    return value


def _str_mapping(value: Any, field: str) -> dict[str, str]:
    out = {}
    for k, v in _mapping(value, field).items():
        _str(k, field)
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, int | float):
            v = str(v)
        out[k] = _str(v, f"{field}.{k}", maxlen=4096)
    return out


def _unknown(data: Mapping, allowed: frozenset, field: str) -> None:
    extra = sorted((k for k in data if k not in allowed), key=repr)
    if extra:
        # An empty or non-text key is named by its repr, so the field never reads ''.
        key = extra[0] if isinstance(extra[0], str) and extra[0] else repr(extra[0])
        raise InvalidRequest(field=f"{field}.{key}" if field else key, reason="unknown key")


def _uuid(value: Any, field: str) -> str:
    text = _str(value, field)
    try:
        return str(uuidlib.UUID(text))
    except ValueError:
        raise InvalidRequest(field=field, reason=f"not a UUID: {text!r}") from None


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
        if not isinstance(data, dict):
            raise InvalidRequest(field="flavor", reason="expected an object")
        _unknown(data, _FLAVOR_KEYS, "flavor")
        for key in ("vcpus", "memory_mb", "root_gb"):
            if key not in data:
                raise InvalidRequest(field=f"flavor.{key}", reason="required")
        return cls(
            vcpus=_int(data["vcpus"], "flavor.vcpus", 1, 4096),
            memory_mb=_int(data["memory_mb"], "flavor.memory_mb", 1, 1 << 40),
            root_gb=_int(data["root_gb"], "flavor.root_gb", 0, 1 << 30),
            ephemeral_gb=_int(data.get("ephemeral_gb", 0), "flavor.ephemeral_gb", 0, 1 << 30),
            swap=_int(data.get("swap", 0) or 0, "flavor.swap", 0, 1 << 30),
            name=_opt_str(data.get("name"), "flavor.name"),
            extra_specs=_str_mapping(data.get("extra_specs"), "flavor.extra_specs"),
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
        if not isinstance(data, dict):
            raise InvalidRequest(field="image", reason="expected an object")
        _unknown(data, _IMAGE_KEYS, "image")
        return cls(id=_opt_str(data.get("id"), "image.id"),
                   properties=_str_mapping(data.get("properties"), "image.properties"))

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
        if not isinstance(data, dict):
            raise InvalidRequest(field="instance_group", reason="expected an object")
        _unknown(data, _GROUP_KEYS, "instance_group")
        if "uuid" not in data:
            raise InvalidRequest(field="instance_group.uuid", reason="required")
        policy = data.get("policy")
        if policy not in GROUP_POLICIES:
            raise InvalidRequest(field="instance_group.policy",
                                 reason=f"must be one of {', '.join(GROUP_POLICIES)}, "
                                        f"got {policy!r}")
        rules = _mapping(data.get("rules"), "instance_group.rules")
        _unknown(rules, frozenset({"max_server_per_host"}), "instance_group.rules")
        max_per_host = None
        if "max_server_per_host" in rules:
            if policy != "anti-affinity":
                raise InvalidRequest(field="instance_group.rules.max_server_per_host",
                                     reason="only valid with the anti-affinity policy")
            raw = rules["max_server_per_host"]
            if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) < 19:
                raw = int(raw)
            max_per_host = _int(raw, "instance_group.rules.max_server_per_host", 1, MAX_INSTANCES)
        return cls(uuid=_str(data["uuid"], "instance_group.uuid", 36), policy=policy,
                   max_server_per_host=max_per_host,
                   name=_opt_str(data.get("name"), "instance_group.name"))

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
        data = _mapping(data, "scheduler_hints")
        other = {k: v for k, v in data.items()
                 if k not in ("same_host", "different_host", "group")}
        for k, v in other.items():
            _str(k, "scheduler_hints")
            if not isinstance(v, str | int | float | bool | list | type(None)):
                raise InvalidRequest(field=f"scheduler_hints.{k}",
                                     reason="expected a string, number, boolean or list")
        return cls(
            same_host=tuple(_uuid(v, f"scheduler_hints.same_host[{i}]") for i, v in
                            enumerate(_str_list(data.get("same_host"),
                                                "scheduler_hints.same_host"))),
            different_host=tuple(_uuid(v, f"scheduler_hints.different_host[{i}]") for i, v in
                                 enumerate(_str_list(data.get("different_host"),
                                                     "scheduler_hints.different_host"))),
            group=_opt_str(data.get("group"), "scheduler_hints.group"),
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
        if not isinstance(data, dict):
            raise InvalidRequest(field="request_spec", reason="expected an object")
        _unknown(data, _TOP_LEVEL, "")
        if "flavor" not in data:
            raise InvalidRequest(field="flavor", reason="required")
        flavor = Flavor.from_primitive(data["flavor"])
        num = _int(data.get("num_instances", 1), "num_instances", 1, MAX_INSTANCES)
        uuids = None
        if data.get("instance_uuids") is not None:
            raw = _str_list(data["instance_uuids"], "instance_uuids")
            uuids = tuple(_uuid(u, f"instance_uuids[{i}]") for i, u in enumerate(raw))
            if len(uuids) != num:
                raise InvalidRequest(field="instance_uuids",
                                     reason=f"{len(uuids)} given for num_instances={num}")
            if len(set(uuids)) != len(uuids):
                raise InvalidRequest(field="instance_uuids", reason="duplicate UUIDs")
        image = Image.from_primitive(data.get("image"))
        group = InstanceGroup.from_primitive(data.get("instance_group"))
        hints = SchedulerHints.from_primitive(data.get("scheduler_hints"))
        if hints.group and group and hints.group != group.uuid:
            raise InvalidRequest(field="scheduler_hints.group",
                                 reason="does not match instance_group.uuid")
        raw_pci = data.get("pci_requests") or []
        if not isinstance(raw_pci, list):
            raise InvalidRequest(field="pci_requests", reason="expected a list")
        if len(raw_pci) > MAX_PCI_REQUESTS:
            raise InvalidRequest(field="pci_requests",
                                 reason=f"more than {MAX_PCI_REQUESTS} requests")
        spec = cls(
            flavor=flavor,
            num_instances=num,
            instance_uuids=uuids,
            project_id=_opt_str(data.get("project_id"), "project_id"),
            user_id=_opt_str(data.get("user_id"), "user_id"),
            image=image,
            availability_zone=_opt_str(data.get("availability_zone"), "availability_zone"),
            scheduler_hints=hints,
            instance_group=group,
            force_hosts=_str_list(data.get("force_hosts"), "force_hosts"),
            force_nodes=_str_list(data.get("force_nodes"), "force_nodes"),
            ignore_hosts=_str_list(data.get("ignore_hosts"), "ignore_hosts"),
            raw_pci_requests=tuple(raw_pci),
        )
        numa_topology = _numa_topology(flavor, image)
        pci_requests = _pci_requests(flavor, image, raw_pci, pci_aliases or {})
        return dataclasses.replace(spec, numa_topology=numa_topology,
                                   pci_requests=pci_requests,
                                   fit_key=_fit_key(numa_topology, pci_requests))

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
