"""What a request asks of the ledger: resource classes and traits, in groups.

Translated from the request as Nova translates a flavor and an image for
Placement:

* the flavor's ``vcpus``, ``memory_mb`` and disk (``root_gb + ephemeral_gb`` and
  the swap rounded up to whole GB) are VCPU, MEMORY_MB and DISK_GB of the
  unnumbered group, unless an extra spec names the class;
* ``resources:CLASS=N`` sets a class of the unnumbered group (``0`` removes a
  standard one: ``resources:VCPU=0`` for a baremetal flavor, ``resources:DISK_GB=0``
  for a boot-from-volume one); ``trait:NAME=required|forbidden`` adds a trait;
* ``resourcesS:CLASS=N`` and ``traitS:NAME=...`` with a suffix ``S`` (digits, or
  ``_`` and letters/digits) make numbered groups, each met by one provider of
  the node's tree; ``group_policy=isolate`` puts every numbered group on a
  provider of its own (``none``: they may share); two or more numbered groups
  need a ``group_policy``;
* ``hw:cpu_policy=dedicated`` asks PCPU instead of VCPU (``mixed``: PCPU for the
  dedicated vCPUs, VCPU for the rest; an isolated emulator thread one PCPU
  more); ``hw:cpu_thread_policy=require`` requires the trait
  HW_CPU_HYPERTHREADING (``isolate`` forbids nothing: see ``_cpu_policy``);
* the image's ``trait:NAME=required`` properties (and Glance's
  ``traits_required`` list) are required traits of the unnumbered group;
* the request's ``member_of`` lists aggregates (names or uuids) the host must
  belong to: each entry one aggregate or a list of which any will do, every
  entry must hold; ``!`` before a name forbids that aggregate.

A malformed class or trait name, amount or policy is an ``InvalidRequest``
naming the key; a well-formed class or trait no host offers is a NoValidHost
that names it.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from db import inventory
from db.inventory import DISK_GB, MEMORY_MB, PCPU, VCPU
from scheduler.exception import InvalidRequest

_KEY = re.compile(r"^(resources|trait)([A-Za-z0-9_-]{1,64})?:(.*)$")
HYPERTHREADING = "HW_CPU_HYPERTHREADING"
GROUP_POLICIES = ("none", "isolate")
MAX_GROUPS = 16
MAX_MEMBER_OF = 16


@dataclasses.dataclass(frozen=True, slots=True)
class RequestGroup:
    """Resources and traits one provider (numbered group), or the tree's
    providers together (the unnumbered group, ``suffix`` ''), must meet."""

    suffix: str
    resources: tuple[tuple[str, int], ...] = ()     # (class, amount), sorted, amounts > 0
    required: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()

    @property
    def numbered(self) -> bool:
        return bool(self.suffix)

    def amount(self, rc: str) -> int:
        for name, n in self.resources:
            if name == rc:
                return n
        return 0

    def to_primitive(self) -> dict:
        return {"suffix": self.suffix, "resources": dict(self.resources),
                "required": sorted(self.required), "forbidden": sorted(self.forbidden)}


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceRequest:
    """Every group of a request (the unnumbered one first), the group policy,
    and the aggregates the host must (``member_of``) or must not belong to."""

    groups: tuple[RequestGroup, ...] = ()
    group_policy: str | None = None
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggregates: frozenset[str] = frozenset()

    @property
    def unnumbered(self) -> RequestGroup | None:
        if self.groups and not self.groups[0].suffix:
            return self.groups[0]
        return None

    @property
    def numbered(self) -> tuple[RequestGroup, ...]:
        return tuple(g for g in self.groups if g.suffix)

    @property
    def has_traits(self) -> bool:
        return any(g.required or g.forbidden for g in self.groups)

    def amounts(self) -> dict[str, int]:
        """Every class asked, summed over the groups."""
        out: dict[str, int] = {}
        for g in self.groups:
            for rc, n in g.resources:
                out[rc] = out.get(rc, 0) + n
        return out

    def amount(self, rc: str) -> int:
        return sum(g.amount(rc) for g in self.groups)

    def required_traits(self) -> frozenset[str]:
        """Every required trait of every group (isolated aggregates compare these)."""
        out: frozenset[str] = frozenset()
        for g in self.groups:
            out |= g.required
        return out

    def to_primitive(self) -> dict:
        return {"groups": [g.to_primitive() for g in self.groups],
                "group_policy": self.group_policy,
                "member_of": [sorted(m) for m in self.member_of],
                "forbidden_aggregates": sorted(self.forbidden_aggregates)}


class _Group:
    """A group while it is being read from the extra specs."""

    def __init__(self) -> None:
        self.resources: dict[str, int] = {}
        self.required: set[str] = set()
        self.forbidden: set[str] = set()

    def frozen(self, suffix: str) -> RequestGroup:
        return RequestGroup(suffix=suffix,
                            resources=tuple(sorted((rc, n) for rc, n in self.resources.items()
                                                   if n > 0)),
                            required=frozenset(self.required),
                            forbidden=frozenset(self.forbidden))


def _check(fn, name: str, field: str) -> str:
    try:
        return fn(name, field)
    except inventory.InventoryError as e:
        raise InvalidRequest(field=e.field, reason=e.reason) from None


def _amount(value: str, field: str) -> int:
    text = value.strip() if isinstance(value, str) else value
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 10):
        raise InvalidRequest(field=field, reason=f"expected a whole number >= 0, got {value!r}")
    amount = int(text)
    if amount > inventory.MAX_AMOUNT:
        raise InvalidRequest(field=field, reason=f"must be at most {inventory.MAX_AMOUNT}")
    return amount


def _trait_value(value: str, field: str) -> str:
    if value not in ("required", "forbidden"):
        raise InvalidRequest(field=field,
                             reason=f"expected required or forbidden, got {value!r}")
    return value


def from_request(flavor, image, numa_topology: Any, member_of: Any = None) -> ResourceRequest:
    """The ledger request of a validated flavor and image (``numa_topology``:
    the guest topology already derived from them, for the CPU policy)."""
    groups: dict[str, _Group] = {"": _Group()}
    named: set[str] = set()         # classes some group's extra specs name (0 too)
    policy = None
    for key, value in flavor.extra_specs.items():
        field = f"flavor.extra_specs.{key}"
        if key == "group_policy":
            if value not in GROUP_POLICIES:
                raise InvalidRequest(field=field, reason=f"expected none or isolate, got "
                                                         f"{value!r}")
            policy = value
            continue
        match = _KEY.match(key)
        if match is None:
            continue
        prefix, suffix, name = match.group(1), match.group(2) or "", match.group(3)
        if suffix and suffix not in groups and len(groups) > MAX_GROUPS:
            raise InvalidRequest(field=field, reason=f"more than {MAX_GROUPS} request groups")
        group = groups.setdefault(suffix, _Group())
        if prefix == "resources":
            rc = _check(inventory.check_class, name, field)
            group.resources[rc] = _amount(value, field)
            named.add(rc)
        else:
            trait = _check(inventory.check_trait, name, field)
            (group.required if _trait_value(value, field) == "required"
             else group.forbidden).add(trait)
    unnumbered = groups[""]
    _image_traits(image, unnumbered)
    _cpu_policy(flavor, numa_topology, unnumbered, named)
    disk = flavor.root_gb + flavor.ephemeral_gb + inventory.disk_gb(flavor.swap)
    for rc, amount in ((MEMORY_MB, flavor.memory_mb), (DISK_GB, disk)):
        if rc not in named:
            unnumbered.resources[rc] = amount
    for trait in unnumbered.required & unnumbered.forbidden:
        raise InvalidRequest(field=f"flavor.extra_specs.trait:{trait}",
                             reason="both required and forbidden")
    frozen = [g.frozen(s) for s, g in sorted(groups.items(), key=lambda kv: (kv[0] != "",
                                                                             kv[0]))]
    out = []
    for g in frozen:
        if not g.suffix:
            if g.resources or g.required or g.forbidden:
                out.append(g)
            continue
        if not g.resources:
            if g.required or g.forbidden:
                raise InvalidRequest(
                    field=f"flavor.extra_specs.trait{g.suffix}",
                    reason=f"group {g.suffix} has traits but no resources{g.suffix}:")
            continue
        if g.required & g.forbidden:
            raise InvalidRequest(field=f"flavor.extra_specs.trait{g.suffix}",
                                 reason="a trait both required and forbidden")
        out.append(g)
    numbered = sum(1 for g in out if g.suffix)
    if numbered >= 2 and policy is None:
        raise InvalidRequest(field="flavor.extra_specs.group_policy",
                             reason=f"required with {numbered} numbered request groups: "
                                    f"none (they may share a provider) or isolate (one "
                                    f"provider each)")
    members, forbidden = _member_of(member_of)
    return ResourceRequest(groups=tuple(out), group_policy=policy, member_of=members,
                           forbidden_aggregates=forbidden)


def _image_traits(image, group: _Group) -> None:
    for key, value in image.properties.items():
        field = f"image.properties.{key}"
        if key.startswith("trait:"):
            trait = _check(inventory.check_trait, key[len("trait:"):], field)
            if value != "required":
                raise InvalidRequest(field=field, reason=f"expected required, got {value!r}")
            group.required.add(trait)
        elif key == "traits_required":
            for i, name in enumerate(_names(value, field)):
                group.required.add(_check(inventory.check_trait, name, f"{field}[{i}]"))


def image_traits(image) -> frozenset[str]:
    """The traits an image requires (a rebuild checks them on the instance's host)."""
    group = _Group()
    _image_traits(image, group)
    return frozenset(group.required)


def _names(value: Any, field: str) -> list[str]:
    """A list given as a list, or as JSON text / a comma-separated string (image
    properties arrive as strings)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            try:
                value = json.loads(text)
            except ValueError:
                raise InvalidRequest(field=field, reason="not a valid JSON list") from None
        else:
            value = [v.strip() for v in text.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(field=field, reason="expected a list of names")
    return value


def _cpu_policy(flavor, topology, group: _Group, named: set[str]) -> None:
    """VCPU/PCPU and the hyperthreading trait from the guest's CPU policy
    (``named``: the classes some group's extra specs name)."""
    dedicated = sum(len(cell.pcpuset) for cell in topology.cells) if topology else 0
    if not dedicated:
        if VCPU not in named and PCPU not in named:
            group.resources[VCPU] = flavor.vcpus
        return
    # require: only hosts with SMT siblings (NUMATopologyFilter then finds the
    # sibling pairs). isolate forbids nothing here: Berth places such guests on
    # SMT hosts too, keeping the siblings idle, unless [numa]
    # isolate_on_smt_hosts = refuse (then NUMATopologyFilter refuses them).
    if any(cell.cpu_thread_policy == "require" for cell in topology.cells):
        group.required.add(HYPERTHREADING)
    pcpus = dedicated + (1 if topology.emulator_threads_isolated else 0)
    shared = flavor.vcpus - dedicated
    if VCPU in named and group.resources.get(VCPU, 0) not in (0, shared):
        raise InvalidRequest(field=f"flavor.extra_specs.resources:{VCPU}",
                             reason=f"the CPU policy asks {shared} shared vCPUs")
    if PCPU in named and group.resources.get(PCPU) != pcpus:
        raise InvalidRequest(field=f"flavor.extra_specs.resources:{PCPU}",
                             reason=f"the CPU policy asks {pcpus} dedicated CPUs")
    group.resources[PCPU] = pcpus
    if shared > 0:
        group.resources[VCPU] = shared
    else:
        group.resources.pop(VCPU, None)


def _member_of(raw: Any) -> tuple[tuple[frozenset[str], ...], frozenset[str]]:
    if raw is None:
        return (), frozenset()
    if not isinstance(raw, list):
        raise InvalidRequest(field="member_of", reason="expected a list")
    if len(raw) > MAX_MEMBER_OF:
        raise InvalidRequest(field="member_of", reason=f"more than {MAX_MEMBER_OF} entries")
    members: list[frozenset[str]] = []
    forbidden: set[str] = set()
    for i, entry in enumerate(raw):
        field = f"member_of[{i}]"
        names = [entry] if isinstance(entry, str) else entry
        if not isinstance(names, list) or not names or len(names) > 1000 or \
                not all(isinstance(n, str) and 0 < len(n) <= 255 for n in names):
            raise InvalidRequest(field=field, reason="expected an aggregate name or uuid, or "
                                                     "a non-empty list of them")
        negated = [n for n in names if n.startswith("!")]
        if negated:
            if len(negated) != len(names):
                raise InvalidRequest(field=field, reason="mixes forbidden (!) and required "
                                                         "aggregates")
            forbidden.update(n[1:] for n in negated)
        else:
            members.append(frozenset(names))
    return tuple(members), frozenset(forbidden)


